// What the rescoring probes (tools/rescore_probe.cu, tools/rescore_wide_probe.cu) gather candidates
// with: cp.async copies into 128-byte-swizzled tiles, which the wgmma descriptors of
// templates/common/sm90.cuh read as TMA would have written them.
#pragma once
#include "../templates/common/sm90.cuh"

namespace gather {

// Byte x of row r of a tile of 128-byte rows with the 128-byte swizzle (the tile 1024-byte aligned).
__device__ __forceinline__ int swizzled(int r, int x) { return r * 128 + ((((x >> 4) ^ r) & 7) << 4) + (x & 15); }

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sm90::smem_addr(smem_dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sm90::smem_addr(smem_dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory"); }

// A chunk's gather has landed for every thread's products: this thread's cp.async groups waited for
// (all but the newest where `next_in_flight`: the next chunk's, committed after it), its writes made
// visible to the tensor core (the async proxy), then a barrier for the other threads' writes.
__device__ __forceinline__ void chunk_landed(bool next_in_flight) {
    if (next_in_flight) cp_async_wait<1>(); else cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
}

// Keys list[0, kTileKeys) into `tile` (kTileKeys rows of 128 bytes, swizzled) and their scales into
// `scales`, by kThreads threads (cp.async, 16 bytes a copy; the caller commits).
template <int kTileKeys, int kThreads>
__device__ __forceinline__ void gather_tile(uint8_t* tile, float* scales, const uint8_t* k, const float* k_scale,
                                            const int* list) {
    const int t = threadIdx.x;
#pragma unroll
    for (int j = 0; j < kTileKeys * 8 / kThreads; ++j) {  // 16-byte pieces: key i's piece p
        const int i = (t + kThreads * j) / 8, p = (t + kThreads * j) % 8;
        cp_async_16(tile + swizzled(i, 16 * p), k + size_t(list[i]) * 128 + 16 * p);
    }
    if (t < kTileKeys) cp_async_4(scales + t, k_scale + list[t]);
}

// The dynamic shared memory of the kernels of kSub products a barrier, from its base: the query tile
// (kQueryBytes, 1024-byte aligned), two buffers of kSub tiles of kTileKeys keys, then their scales
// ([2][kSub x kTileKeys]); kBytes with the base's alignment slack.
template <int kSub_, int kTileKeys_, int kQueryBytes>
struct ChunkRing {
    static constexpr int kSub = kSub_;
    static constexpr int kTileKeys = kTileKeys_;
    static constexpr int kTileBytes = kTileKeys * 128;
    static constexpr int kChunkKeys = kSub * kTileKeys;
    static constexpr int kBytes = 1024 + kQueryBytes + 2 * kSub * kTileBytes + 2 * kChunkKeys * 4;
    uint8_t* query;
    uint8_t* tiles;
    float* scales;
    __device__ explicit ChunkRing(uint8_t* base)
        : query(sm90::aligned_shared_base(base)),
          tiles(query + kQueryBytes),
          scales(reinterpret_cast<float*>(tiles + 2 * kSub * kTileBytes)) {}
    // The wgmma descriptors' start fields (sm90::kmajor_sw128_start): the query, and tile s of buffer buf.
    __device__ uint32_t query_start() const { return sm90::kmajor_sw128_start(query); }
    __device__ uint32_t tile_start(int buf, int s) const {
        return sm90::kmajor_sw128_start(tiles) + (buf * kSub + s) * (kTileBytes / 16);
    }
    // The scales of tile s of buffer buf.
    __device__ float* tile_scales(int buf, int s) const { return scales + buf * kChunkKeys + s * kTileKeys; }
};

// A list walked a chunk of the ring's kSub tiles at a time, two buffers: chunk c is gathered two
// chunks ahead (chunk 0's copies join the caller's uncommitted ones, its query's, in one group), landed,
// multiplied (products(buf, s) issues tile s of buffer buf into accumulator set s; one wait for the
// kSub), reduced (reduce(c, buf, s) reads set s), and its buffer freed by a barrier.
template <int kThreads, typename Ring, typename Products, typename Reduce>
__device__ __forceinline__ void walk_chunks(const Ring& ring, const uint8_t* k, const float* k_scale, const int* list,
                                            int chunks, Products products, Reduce reduce) {
    constexpr int kSub = Ring::kSub, kTileKeys = Ring::kTileKeys;
    auto gather_chunk = [&](int c) {
        const int buf = c & 1;
#pragma unroll
        for (int s = 0; s < kSub; ++s)
            gather_tile<kTileKeys, kThreads>(ring.tiles + (buf * kSub + s) * Ring::kTileBytes,
                                             ring.tile_scales(buf, s), k, k_scale,
                                             list + c * Ring::kChunkKeys + s * kTileKeys);
        cp_async_commit();
    };
    gather_chunk(0);
    if (chunks > 1) gather_chunk(1);
    for (int c = 0; c < chunks; ++c) {
        const int buf = c & 1;
        chunk_landed(c + 1 < chunks);
#pragma unroll
        for (int s = 0; s < kSub; ++s) products(buf, s);
        sm90::wgmma_wait<0>();
#pragma unroll
        for (int s = 0; s < kSub; ++s) reduce(c, buf, s);
        __syncthreads();  // every lane has read this buffer's scales and the products its keys
        if (c + 2 < chunks) gather_chunk(c + 2);
    }
}

// Row `row`'s query (heads x 128 fp8, rows of q [*, heads, 128]) into the swizzled tile `query`, by
// `threads` threads (cp.async; the caller commits).
__device__ __forceinline__ void load_query(uint8_t* query, const uint8_t* q, int row, int heads, int threads) {
    for (int i = threadIdx.x; i < heads * 8; i += threads)
        cp_async_16(query + swizzled(i / 8, 16 * (i % 8)), q + (size_t(row) * heads + i / 8) * 128 + 16 * (i % 8));
}

}  // namespace gather
