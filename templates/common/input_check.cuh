// The contract's value checks (runtime/contract.py) in one launch: a pass over q, k, the key scales,
// the weights and the ranges that ORs a flag per broken rule and takes the most keys one row sees,
// then one copy of two words to the host. The torch form of the same checks takes about twenty small
// launches, which a one-row call cannot hide; runtime/contract.py decodes both forms alike.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace input_check {

// The flags: one bit per rule, in the order runtime/contract.py reports them.
enum : int { kKsNegative = 1, kKsAboveKe = 2, kKeAboveN = 4, kBadScale = 8, kBadWeights = 16, kNanQ = 32, kNanK = 64 };
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 128;  // per array (grid.y picks the array)

// Whether any byte of w is an e4m3 NaN code (b & 0x7F == 0x7F): adding 1 to each byte's low seven
// bits carries into its bit 7 only from 0x7F, and never into the next byte.
__device__ __forceinline__ bool nan_code_in(uint32_t w) {
    return (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;
}
__device__ __forceinline__ bool nan_code_in(uint4 v) {
    return nan_code_in(v.x) | nan_code_in(v.y) | nan_code_in(v.z) | nan_code_in(v.w);
}

// result[0] |= flags, result[1] = max(result[1], most keys a row sees); result zeroed before.
__global__ void __launch_bounds__(kThreads) check_kernel(const uint4* q, long long q_vectors, const uint4* k,
                                                         long long k_vectors, const float* scales, int keys,
                                                         const float* weights, long long weight_count,
                                                         const int* ks, const int* ke, int rows, int* result) {
    const long long stride = (long long)gridDim.x * kThreads;
    const long long first = (long long)blockIdx.x * kThreads + threadIdx.x;
    int flags = 0, longest = 0;
    switch (blockIdx.y) {
        case 0:
            for (long long i = first; i < q_vectors; i += stride) flags |= nan_code_in(__ldg(q + i)) ? kNanQ : 0;
            break;
        case 1:
            for (long long i = first; i < k_vectors; i += stride) flags |= nan_code_in(__ldg(k + i)) ? kNanK : 0;
            break;
        case 2:
            for (long long i = first; i < keys; i += stride) {
                const float s = __ldg(scales + i);
                flags |= (s > 0.f && s <= 3.402823466e38f) ? 0 : kBadScale;  // (NaN fails both)
            }
            break;
        case 3:
            for (long long i = first; i < weight_count; i += stride)
                flags |= isfinite(__ldg(weights + i)) ? 0 : kBadWeights;
            break;
        default:
            for (long long i = first; i < rows; i += stride) {
                const int s = __ldg(ks + i), e = __ldg(ke + i);
                flags |= (s < 0 ? kKsNegative : 0) | (s > e ? kKsAboveKe : 0) | (e > keys ? kKeAboveN : 0);
                longest = max(longest, max(min(e, keys) - max(s, 0), 0));
            }
    }
    flags = __reduce_or_sync(0xFFFFFFFFu, flags);
    longest = __reduce_max_sync(0xFFFFFFFFu, longest);
    if (threadIdx.x % 32 == 0) {
        if (flags) atomicOr(&result[0], flags);
        if (longest) atomicMax(&result[1], longest);
    }
}

// Runs the checks on `stream` and waits for them: host_result receives {flags, longest row}.
// device_result: two ints of device memory. q and k must be 16-byte aligned.
inline cudaError_t run(const void* q, const void* k, const float* scales, const float* weights, const int* ks,
                       const int* ke, int rows, int heads, int keys, int* device_result, int* host_result,
                       cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(device_result, 0, 2 * sizeof(int), stream);
    if (err != cudaSuccess) return err;
    const long long q_vectors = (long long)rows * heads * 8, k_vectors = (long long)keys * 8;
    long long most = q_vectors > k_vectors ? q_vectors : k_vectors;
    most = most > rows ? most : rows;
    const int blocks = int(most / kThreads + 1 < kMaxBlocks ? most / kThreads + 1 : kMaxBlocks);
    check_kernel<<<dim3(blocks, 5), kThreads, 0, stream>>>(static_cast<const uint4*>(q), q_vectors,
                                                           static_cast<const uint4*>(k), k_vectors, scales, keys,
                                                           weights, (long long)rows * heads, ks, ke, rows,
                                                           device_result);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    err = cudaMemcpyAsync(host_result, device_result, 2 * sizeof(int), cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
    return cudaStreamSynchronize(stream);
}

}  // namespace input_check
