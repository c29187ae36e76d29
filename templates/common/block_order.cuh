// The order the persistent fused kernels claim row blocks in: heaviest first (by the block's longest
// visible row; ties by block index), so the long blocks start early and the short ones fill the tail.
// Made on the GPU by one small kernel inside each library's launch: the same order as torch's stable
// descending argsort (runtime/fused.py keeps that definition for the tests), which took nine small
// kernels a call (experiment log, "2026-12-01: power cap").
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace order {

// A CTA ranks kThreads blocks against kCompared others: 16 CTAs at 1,024 blocks, 256 at 4,096 (more
// CTAs comparing fewer blocks each: experiment log, "2026-12-01: power cap").
constexpr int kThreads = 256;
constexpr int kCompared = 256;

// Workspace bytes for `blocks` row blocks: the order, each block's rank, and a counter of finished
// CTAs; 256-byte aligned.
inline size_t workspace_bytes(int blocks) { return (size_t(2 * blocks + 1) * sizeof(int) + 255) / 256 * 256; }

// Row block b's weight: the most keys one of its rows sees (0 past the last row).
template <int kRows>
__device__ __forceinline__ int block_weight(const int* ks, const int* ke, int rows, int keys, int b) {
    int most = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int row = b * kRows + r;
        if (row < rows) most = max(most, min(ke[row], keys) - max(ks[row], 0));
    }
    return most;
}

// Grid (ceil(blocks / kThreads), ceil(blocks / kCompared)): CTA (x, y) adds to the rank of each of
// blocks x kThreads .. the number of blocks among y kCompared .. that go before it; the last CTA to
// finish writes order[rank[b]] = b. rank and done must be zero at the launch.
template <int kRows>
__global__ void __launch_bounds__(kThreads) heaviest_first_kernel(const int* ks, const int* ke, int rows, int keys,
                                                                   int blocks, int* rank, unsigned* done, int* order) {
    __shared__ int weight[kCompared];
    __shared__ bool last;
    const int b = blockIdx.x * kThreads + threadIdx.x, first = blockIdx.y * kCompared;
    const int compared = min(kCompared, blocks - first);
    for (int i = threadIdx.x; i < compared; i += kThreads) weight[i] = block_weight<kRows>(ks, ke, rows, keys, first + i);
    __syncthreads();
    if (b < blocks) {
        const int mine = block_weight<kRows>(ks, ke, rows, keys, b);
        int before = 0;
        for (int i = 0; i < compared; ++i) before += weight[i] > mine || (weight[i] == mine && first + i < b);
        if (before > 0) atomicAdd(&rank[b], before);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x * gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // (four ranks in flight a thread: the loads do not wait on the stores before them)
    for (int base = threadIdx.x; base < blocks; base += 4 * kThreads) {
        int r[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) r[u] = base + u * kThreads < blocks ? __ldcg(&rank[base + u * kThreads]) : 0;
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (base + u * kThreads < blocks) order[r[u]] = base + u * kThreads;
    }
}

// Writes the order of ceil(rows / kRows) row blocks into `workspace` (workspace_bytes of them) on
// `s` and points *block_order at it.
template <int kRows>
inline cudaError_t heaviest_first(const int* ks, const int* ke, int rows, int keys, void* workspace, const int** block_order,
                                  cudaStream_t s) {
    const int blocks = (rows + kRows - 1) / kRows;
    int* out = static_cast<int*>(workspace);
    int* rank = out + blocks;
    unsigned* done = reinterpret_cast<unsigned*>(rank + blocks);
    *block_order = out;
    cudaError_t err = cudaMemsetAsync(rank, 0, size_t(blocks + 1) * sizeof(int), s);
    if (err != cudaSuccess) return err;
    const dim3 grid((blocks + kThreads - 1) / kThreads, (blocks + kCompared - 1) / kCompared);
    heaviest_first_kernel<kRows><<<grid, kThreads, 0, s>>>(ks, ke, rows, keys, blocks, rank, done, out);
    return cudaGetLastError();
}

}  // namespace order
