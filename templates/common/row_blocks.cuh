// Row blocks of the fused Hopper kernels: which keys each row and each block of kRows consecutive rows
// see (Params is any struct with ks, ke (int[rows]), rows and keys), and the producer loop that hands
// blocks to the math warpgroups.
#pragma once

namespace blocks {

// Row `row`'s visible keys, clamped so that out-of-contract ranges cannot fault; (0, 0) if empty.
template <typename Params>
__device__ __forceinline__ int2 visible_range(const Params& p, int row) {
    if (row >= p.rows) return make_int2(0, 0);
    const int ks = max(p.ks[row], 0), ke = min(p.ke[row], p.keys);
    return ks < ke ? make_int2(ks, ke) : make_int2(0, 0);
}

// The union of the block's ranges, its first key aligned down to 4 (16 bytes of scales for the TMA
// copy); lo == hi when no row of the block sees anything.
template <int kRows, typename Params>
__device__ __forceinline__ int2 block_range(const Params& p, int row0) {
    int lo = 0x7FFFFFFF, hi = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int2 range = visible_range(p, row0 + r);
        if (range.x < range.y) {
            lo = min(lo, range.x);
            hi = max(hi, range.y);
        }
    }
    return lo < hi ? make_int2(lo & ~3, hi) : make_int2(0, 0);
}

// The producer of the persistent row-block kernels (one thread): claims work items 0, 1, ... through
// `counter` until num_items are taken; item i covers (some of the keys of) row block block_of(i). For
// each it waits for a free Q stage, publishes the item in item_of_stage[stage] (the math warpgroups
// read it once full_q[stage] completes), loads the block's Q tile (kRows x kHeads rows of 128 bytes)
// and calls load_tiles(item, row0) to issue its K tiles. The last publication is -1: no more items.
// With gate_q_map (the fp16 gate's query), a second Q tile is loaded into gate_q_ring on the same barrier.
template <int kRows, int kHeads, int kQStages, typename BlockOf, typename LoadTiles>
__device__ __forceinline__ void produce_row_blocks(int* counter, int num_items, int* item_of_stage, uint64_t* full_q,
                                                   uint64_t* empty_q, uint8_t* q_ring, const CUtensorMap* q_map,
                                                   BlockOf block_of, LoadTiles load_tiles,
                                                   const CUtensorMap* gate_q_map = nullptr, uint8_t* gate_q_ring = nullptr) {
    constexpr int kQTileBytes = kRows * kHeads * 128;
    for (int q_iter = 0;; ++q_iter) {
        const int qs = q_iter % kQStages;
        sm90::mbar_wait(&empty_q[qs], ((q_iter / kQStages) & 1) ^ 1);
        const int claimed = atomicAdd(counter, 1);
        const int item = claimed < num_items ? claimed : -1;
        item_of_stage[qs] = item;  // published by the arrive below
        if (item < 0) {
            sm90::mbar_arrive(&full_q[qs]);
            return;
        }
        const int row0 = block_of(item) * kRows;
        sm90::mbar_arrive_expect_tx(&full_q[qs], gate_q_map != nullptr ? 2 * kQTileBytes : kQTileBytes);
        sm90::tma_load_query_tile(q_ring + qs * kQTileBytes, q_map, &full_q[qs], row0);
        if (gate_q_map != nullptr) sm90::tma_load_query_tile(gate_q_ring + qs * kQTileBytes, gate_q_map, &full_q[qs], row0);
        load_tiles(item, row0);
    }
}

}  // namespace blocks
