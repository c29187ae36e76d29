// Row blocks of the fused kernels: which keys each row and each block of kRows consecutive rows see.
// Params is any struct with ks, ke (int[rows]), rows and keys.
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

}  // namespace blocks
