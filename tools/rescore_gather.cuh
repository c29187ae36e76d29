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

// Row `row`'s query (heads x 128 fp8, rows of q [*, heads, 128]) into the swizzled tile `query`, by
// `threads` threads (cp.async; the caller commits).
__device__ __forceinline__ void load_query(uint8_t* query, const uint8_t* q, int row, int heads, int threads) {
    for (int i = threadIdx.x; i < heads * 8; i += threads)
        cp_async_16(query + swizzled(i / 8, 16 * (i % 8)), q + (size_t(row) * heads + i / 8) * 128 + 16 * (i % 8));
}

}  // namespace gather
