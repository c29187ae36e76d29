// The few hardware primitives the kernels use, each a thin wrapper over one PTX instruction.
// Kept in one header (included into every rendered kernel) so kernel templates read as plain CUDA.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace prim {

// ---- asynchronous global -> shared copies (sm_80+) --------------------------------------------
// `src_bytes` < the copy size zero-fills the rest: out-of-range keys read as zeros, never fault.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, uint32_t src_bytes) {
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src, uint32_t src_bytes) {
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
// Brings the 128-byte line at p into L2 (no register written, nothing to wait for).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

// ---- fp8 tensor-core product (sm_89+: Ada, Hopper, Blackwell) ---------------------------------
// D[16x8] += A[16x32] * B[32x8], e4m3 inputs, fp32 accumulators. Fragment ownership (lane = 4*g + t):
//   a[0]: A row g,   k 4t..4t+3     a[1]: A row g+8, k 4t..4t+3
//   a[2]: A row g,   k 16+4t..+3    a[3]: A row g+8, k 16+4t..+3
//   b[0]: B col g,   k 4t..4t+3     b[1]: B col g,   k 16+4t..+3
//   d[0..1]: row g, cols 2t, 2t+1   d[2..3]: row g+8, cols 2t, 2t+1
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- order-preserving score codes ------------------------------------------------------------
// Maps fp32 to uint32 so that unsigned comparison is float comparison (-0 is folded onto +0 first;
// NaN lands beyond +-inf and is handled as an ordinary extreme value, never a trap).
__device__ __forceinline__ uint32_t score_code(float s) {
    const uint32_t bits = __float_as_uint(s + 0.0f);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
// The score whose code is `code` (codes of NaN and -0 never come out of score_code); code 0 gives a
// NaN, so the gate test !(s < score_of_code(theta)) admits every score when theta is 0, and it admits
// a score iff score_code(s) >= theta otherwise (NaN scores always: a superset, never a loss).
__device__ __forceinline__ float score_of_code(uint32_t code) {
    return __uint_as_float((code & 0x80000000u) ? (code & 0x7FFFFFFFu) : ~code);
}

// A plain (weak) global store, where the compiler would emit a generic one (ST.E: the gated kernel's
// slab appends, whose pointer is one of several chosen at run time; slower than STG: experiment
// log, "2026-11-30: tail split"). No memory clobber: the callers order it with fences and barriers, which
// are volatile asm too.
__device__ __forceinline__ void store_global(uint2* p, uint2 v) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(p), "r"(v.x), "r"(v.y));
}
__device__ __forceinline__ void store_global(int* p, int v) { asm volatile("st.global.u32 [%0], %1;\n" ::"l"(p), "r"(v)); }

// threadIdx.x, read again wherever it is used: the compiler cannot hoist what derives from it out of a
// persistent loop (hoisted, the selector warps' per-thread constants filled their 56 registers and
// spilled).
__device__ __forceinline__ int thread_index() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

__device__ __forceinline__ uint32_t lanemask_lt() {
    uint32_t mask;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
    return mask;
}

// Appends one item per lane where `take` to a list grown through `*counter` (one shared-memory
// atomic per warp) and returns the lane's position in it (meaningless where !take). Every lane of
// the warp must call it.
__device__ __forceinline__ int warp_append(int* counter, bool take) {
    const uint32_t mask = __ballot_sync(0xFFFFFFFFu, take);
    if (mask == 0) return 0;
    const int leader = __ffs(mask) - 1;
    int base = 0;
    if ((threadIdx.x & 31) == leader) base = atomicAdd(counter, __popc(mask));
    return __shfl_sync(0xFFFFFFFFu, base, leader) + __popc(mask & lanemask_lt());
}

// Reserves `count` slots (the same in every lane, which must all call it) in a list grown through
// `*counter` and returns the first: one shared-memory atomic by lane 0. (Written in PTX, ptxas still
// wraps it in its warp-aggregation sequence, VOTEU / FLO / UPOPC: a few instructions a call.)
__device__ __forceinline__ int warp_reserve(int* counter, int count) {
    int base = 0;
    if ((threadIdx.x & 31) == 0 && count != 0)
        asm volatile("atom.shared.add.u32 %0, [%1], %2;\n"
                     : "=r"(base)
                     : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(counter))), "r"(count));
    return __shfl_sync(0xFFFFFFFFu, base, 0);
}

// Appends one item per lane where `take` to a list that only this warp writes, by the lanes in
// `lanes` (the same mask in all of them; other lanes must not take), which keep its length `filled`
// in a register: returns the lane's position (meaningless where !take) and advances `filled`. Two
// lane groups fill two lists from one vote. `votes` is __ballot_sync(~0u, take), taken by the caller
// so that it can vote for several lists before appending to any (independent chains). No
// shared-memory round trip, only two popcs. (A uniform early exit where votes == 0 was measured
// slower at 128K keys and no faster at 512K: experiment log, "2026-11-29: appends without atomics".)
__device__ __forceinline__ int warp_fill(int& filled, uint32_t votes, uint32_t lanes) {
    const int pos = filled + __popc(votes & lanes & lanemask_lt());
    filled += __popc(votes & lanes);
    return pos;
}

// The sum of `value` over lanes 0 .. this lane (every lane of the warp must call it).
__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t value) {
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, value, offset);
        if (int(threadIdx.x & 31) >= offset) value += v;
    }
    return value;
}

// Adds one to hist[bin] for each lane where `take`, with one shared-memory atomic per distinct bin
// in the warp: lanes that agree on a bin add together. Lists whose codes share their top bits (the
// candidates above a gate) would otherwise serialise most of a radix pass on one or two bins.
// Every lane of the warp must call it.
__device__ __forceinline__ void warp_histogram_add(uint32_t* hist, uint32_t bin, bool take) {
    const uint32_t peers = __match_any_sync(0xFFFFFFFFu, take ? bin : 0xFFFFFFFFu);
    if (take && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
}

}  // namespace prim
