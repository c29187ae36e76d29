// The exact rescoring of tools/rescore_probe.cu with the operands the other way round, for H = 64
// (tools/rescore.py's `wide` kernel; docs/fp16-gate.md, "Left open"): the row's query is the A operand
// (M = 64 heads) and 256 gathered candidates the B operand (N = 256), one m64n256k32 product of four
// k-steps a chunk, where the row-at-a-time kernels multiply 64 candidates by the query (m64n64k32):
// 1.6x fewer shared-memory bytes a FLOP. The head sum then crosses lanes and warps: a lane holds heads
// g and g + 8 of its warp's 16 (g = lane / 4) for 64 of the 256 keys; it weights and adds its two,
// a butterfly over the 8 lanes of equal lane % 4 leaves it 8 keys' 16-head sums, and the four warps'
// sums meet in shared memory, where each thread adds two keys' and scales them.
//
// Compiled with -DWGMMA_HEADER naming templates/common/wgmma.cuh.j2 rendered for N = 256.
#include "rescore_gather.cuh"
#include WGMMA_HEADER

namespace {
constexpr int kHeads = 64;                // the A operand's M
constexpr int kChunkKeys = 256;           // candidates a product (N)
constexpr int kThreads = 128;             // one warpgroup
constexpr int kQueryBytes = kHeads * 128;
constexpr int kChunkBytes = kChunkKeys * 128;
constexpr int kSmemBytes = 1024 + kQueryBytes + 2 * kChunkBytes + 2 * kChunkKeys * 4 + 4 * kChunkKeys * 4;

using namespace gather;

// Half of `v` stays, the other half goes to the lane `mask` away, which adds it to its own kept half:
// v[0, n / 2) ends up holding the sums of the kept half (the upper half where this lane's mask bit is
// set), so after masks 16, 8 and 4 a lane holds values 8g .. 8g + 7 of the 64, summed over the 8 lanes.
template <int kN>
__device__ __forceinline__ void halve(float (&v)[64], int mask) {
    const bool upper = threadIdx.x & mask;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
        const float keep = upper ? v[kN / 2 + i] : v[i], send = upper ? v[i] : v[kN / 2 + i];
        v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, mask);
    }
}

// out[r, j] = k_scale[c] * sum_h w[r, h] relu(q[r, h] . k[c]) for c = candidates[r, j], j < per_row (a
// multiple of 256).
__global__ void __launch_bounds__(kThreads) rescore_wide_kernel(const uint8_t* q, const uint8_t* k, const float* k_scale,
                                                                const float* weights, const int* candidates, float* out,
                                                                int rows, int per_row) {
    extern __shared__ uint8_t dynamic_smem[];
    uint8_t* query = sm90::aligned_shared_base(dynamic_smem);
    uint8_t* keys = query + kQueryBytes;                                  // [2][256 x 128]
    float* scales = reinterpret_cast<float*>(keys + 2 * kChunkBytes);    // [2][256]
    float* partial = scales + 2 * kChunkKeys;                            // [4 warps][256 keys]
    const uint32_t query_start = sm90::kmajor_sw128_start(query), keys_start = sm90::kmajor_sw128_start(keys);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int chunks = per_row / kChunkKeys;
    float acc[kChunkKeys / 2];
    float v[64];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        __syncthreads();  // the previous row's products and sums are done with the tiles
        load_query(query, q, row, kHeads, kThreads);
        const int* list = candidates + size_t(row) * per_row;
        float* row_out = out + size_t(row) * per_row;
        const float w_lo = weights[size_t(row) * kHeads + 16 * warp + g], w_hi = weights[size_t(row) * kHeads + 16 * warp + g + 8];
        auto gather = [&](int c) {
            const int buf = c & 1;
            const int* chunk = list + c * kChunkKeys;
#pragma unroll 4
            for (int j = 0; j < kChunkKeys * 8 / kThreads; ++j) {  // 16-byte pieces: key i's piece p
                const int i = (threadIdx.x + kThreads * j) / 8, p = (threadIdx.x + kThreads * j) % 8;
                cp_async_16(keys + buf * kChunkBytes + swizzled(i, 16 * p), k + size_t(chunk[i]) * 128 + 16 * p);
            }
            for (int i = threadIdx.x; i < kChunkKeys; i += kThreads) cp_async_4(scales + buf * kChunkKeys + i, k_scale + chunk[i]);
            cp_async_commit();
        };
        gather(0);  // (with the query: one group)
        if (chunks > 1) gather(1);
        for (int c = 0; c < chunks; ++c) {
            const int buf = c & 1;
            chunk_landed(c + 1 < chunks);
            // D[heads, keys] = query . keys^T: the header's product takes its A operand first.
            sm90::wgmma_keys_queries(acc, query_start, keys_start + buf * (kChunkBytes / 16));
            sm90::wgmma_wait<0>();
            // d[4j + e] is head 16 warp + g, d[4j + 2 + e] head 16 warp + g + 8, both of key 8j + 2t + e.
#pragma unroll
            for (int j = 0; j < kChunkKeys / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    v[2 * j + e] = fmaf(w_hi, fmaxf(acc[4 * j + 2 + e], 0.f), w_lo * fmaxf(acc[4 * j + e], 0.f));
            halve<64>(v, 16);
            halve<32>(v, 8);
            halve<16>(v, 4);
            // v[i] is now key 8 (4g + i / 2) + 2t + i % 2 summed over the warp's 16 heads.
#pragma unroll
            for (int m = 0; m < 4; ++m)
                *reinterpret_cast<float2*>(partial + warp * kChunkKeys + 32 * g + 8 * m + 2 * t) = make_float2(v[2 * m], v[2 * m + 1]);
            const float2 scale = *reinterpret_cast<const float2*>(scales + buf * kChunkKeys + 2 * threadIdx.x);
            __syncthreads();  // the four warps' sums are written; every lane is done with this buffer
            float2 sum = *reinterpret_cast<const float2*>(partial + 2 * threadIdx.x);
#pragma unroll
            for (int w = 1; w < 4; ++w) {
                const float2 p = *reinterpret_cast<const float2*>(partial + w * kChunkKeys + 2 * threadIdx.x);
                sum.x += p.x;
                sum.y += p.y;
            }
            *reinterpret_cast<float2*>(row_out + c * kChunkKeys + 2 * threadIdx.x) = make_float2(sum.x * scale.x, sum.y * scale.y);
            if (c + 2 < chunks) gather(c + 2);
        }
    }
}
}  // namespace

extern "C" int rescore_wide(const void* q, const void* k, const float* k_scale, const float* weights,
                            const int* candidates, float* out, int rows, int per_row, int ctas, void* stream) {
    if (per_row % kChunkKeys) return -1;
    const cudaError_t set =
        cudaFuncSetAttribute(rescore_wide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (set != cudaSuccess) return static_cast<int>(set);
    rescore_wide_kernel<<<ctas, kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const uint8_t*>(q), static_cast<const uint8_t*>(k), k_scale, weights, candidates, out, rows, per_row);
    return static_cast<int>(cudaGetLastError());
}
