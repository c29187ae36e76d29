// Probe of the exact rescoring an fp16-gated scan needs ("Past the epilogue"; docs/fp16-gate.md, step 5;
// driven by tools/rescore.py): the exact score of each of a row's candidate keys, a row at a time, on
// the tensor core. What it measures is what a candidate costs beside a (row, key) of today's scan,
// which the plan's estimate assumed equal.
//
// A CTA (one warpgroup) takes a row: its query (H x 128 fp8) goes to a swizzled shared tile, then its
// candidates 64 at a time: their keys gathered (cp.async, 16 bytes a thread and copy, into the 128-byte
// swizzle the wgmma descriptors read) with their scales ahead of their products, one m64nHk32 product of
// four k-steps (templates/common/wgmma.cuh.j2 rendered
// for N = H, one row: sm90::LaneTotals<1>'s layout), and the exact epilogue (sm90::row_sums<1, H>: fmax
// and fma per (key, head), then the quad's shuffles). Several CTAs an SM hide the gathers' latency.
// The head sum runs in row_sums' one-row order, not the order today's multi-row tiles add a row's heads
// in: the scores are exact by the two-sided rule but may differ from the scan's in the last bit
// (docs/fp16-gate.md shows how a kernel would keep them equal).
//
// Compiled with -DHEADS=32|64 and -DWGMMA_HEADER naming the rendered header.
#include "rescore_gather.cuh"
#include WGMMA_HEADER
#include <type_traits>

namespace {
constexpr int kHeads = HEADS;
constexpr int kTileKeys = 64;                 // candidates a product (wgmma M)
constexpr int kQueryBytes = kHeads * 128;     // a multiple of 1024: the key tiles after it stay aligned
constexpr int kTileBytes = kTileKeys * 128;
constexpr int kThreads = 128;

using namespace gather;

// Candidates [first, first + 64) of a row's list: their keys into `tile`, their scales into `scales`.
__device__ __forceinline__ void gather_tile(uint8_t* tile, float* scales, const uint8_t* k, const float* k_scale,
                                            const int* candidates) {
    gather::gather_tile<kTileKeys, kThreads>(tile, scales, k, k_scale, candidates);
}

// A chunk's scores from its accumulators: out[j] = k_scale * sum_h w_h relu(acc), for the lanes that hold
// a key's total (sm90::LaneTotals<1>); or, kEpilogue false, one accumulator a lane as it is (not a
// score: what the products cost without the epilogue).
template <bool kEpilogue>
__device__ __forceinline__ void store_scores(const float (&acc)[kHeads / 2], const float (&w)[kHeads / 8][2],
                                             const float* scales, float* out) {
    using L = sm90::LaneTotals<1>;
    float v[L::kCount] = {acc[0]};
    if constexpr (kEpilogue) sm90::row_sums<1, kHeads>(acc, w, v);
    if (L::holds()) {
        const int key = 16 * (threadIdx.x / 32) + (threadIdx.x % 32) / 4 + L::key_offset(0);
        out[key] = kEpilogue ? v[0] * scales[key] : v[0];
    }
}

// out[r, j] = k_scale[c] * sum_h w[r, h] relu(q[r, h] . k[c]) for c = candidates[r, j], j < per_row
// (a multiple of 128). kOverlap false: each chunk gathered, multiplied, waited for and reduced in turn
// (the next chunk's gather in flight; two barriers a chunk). kOverlap true: as the scan kernels' slices
// (sm90::consume_key_tiles), chunk c + 1's products run on the tensor core while chunk c is reduced,
// chunk c + 2 is gathered meanwhile (three buffers), one barrier a chunk. kEpilogue false: the same
// without the epilogue (store_scores).
template <bool kOverlap, bool kEpilogue = true>
__global__ void __launch_bounds__(kThreads) rescore_kernel(const uint8_t* q, const uint8_t* k, const float* k_scale,
                                                           const float* weights, const int* candidates, float* out,
                                                           int rows, int per_row) {
    constexpr int kBuffers = kOverlap ? 3 : 2;
    __shared__ __align__(1024) uint8_t smem[kQueryBytes + kBuffers * kTileBytes];
    __shared__ float scales[kBuffers][kTileKeys];
    uint8_t* query = smem;
    uint8_t* tiles = smem + kQueryBytes;
    const uint32_t query_start = sm90::kmajor_sw128_start(query), tiles_start = sm90::kmajor_sw128_start(tiles);
    const int chunks = per_row / kTileKeys;
    float acc[2][kHeads / 2];
    float w[kHeads / 8][2];
    auto products = [&](float (&a)[kHeads / 2], int c) {
        sm90::wgmma_keys_queries(a, tiles_start + (c % kBuffers) * (kTileBytes / 16), query_start);
    };
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        __syncthreads();  // the previous row's products have read the query tile and the buffers
        load_query(query, q, row, kHeads, kThreads);
        const int* list = candidates + size_t(row) * per_row;
        float* row_out = out + size_t(row) * per_row;
        sm90::load_lane_weights<1, kHeads>(w, weights, row, row + 1);
        auto gather_row = [&](int c) {
            gather_tile(tiles + (c % kBuffers) * kTileBytes, scales[c % kBuffers], k, k_scale, list + c * kTileKeys);
            cp_async_commit();
        };
        gather_row(0);  // (with the query: one group)
        gather_row(1);
        if constexpr (!kOverlap) {
            for (int c = 0; c < chunks; ++c) {
                chunk_landed(c + 1 < chunks);
                products(acc[0], c);
                sm90::wgmma_wait<0>();
                store_scores<kEpilogue>(acc[0], w, scales[c % kBuffers], row_out + c * kTileKeys);
                __syncthreads();  // every lane has read this buffer's scales and the products its keys
                if (c + 2 < chunks) gather_row(c + 2);
            }
        } else {
            chunk_landed(true);
            products(acc[0], 0);
            sm90::wgmma_wait<0>();
            // Step c: chunk c's products are done in acc[cur]; chunk c + 1's start into the other set
            // while chunk c is reduced, and every product is waited for by the step's end (ptxas
            // serialises the wgmmas of a loop whose products stay in flight across its back edge).
            auto step = [&](auto cur, int c) {
                if (c >= chunks) return;
                if (c + 1 < chunks) {
                    chunk_landed(false);  // chunk c + 1, the one gather in flight (and every lane is past
                                          // step c - 1: buffer (c + 2) % 3 is free)
                    products(acc[cur.value ^ 1], c + 1);
                    if (c + 2 < chunks) gather_row(c + 2);
                }
                store_scores<kEpilogue>(acc[cur.value], w, scales[c % kBuffers], row_out + c * kTileKeys);
                sm90::wgmma_wait<0>();
            };
            for (int c = 0; c < chunks; c += 2) {
                step(std::integral_constant<int, 0>{}, c);
                step(std::integral_constant<int, 1>{}, c + 1);
            }
        }
    }
}

// kSub products a barrier (mode 3): as the in-turn kernel, but each barrier serves kSub x 64 candidates,
// gathered together, their kSub products issued as one group into kSub accumulator sets and reduced
// after one wait (dynamic shared memory: the query, two buffers of kSub tiles, their scales). Whether
// the in-turn kernel waits on its barriers and products more than on the tensor core's rate.
template <int kSub>
__global__ void __launch_bounds__(kThreads) rescore_batched_kernel(const uint8_t* q, const uint8_t* k, const float* k_scale,
                                                                const float* weights, const int* candidates, float* out,
                                                                int rows, int per_row) {
    using Ring = ChunkRing<kSub, kTileKeys, kQueryBytes>;
    constexpr int kChunkKeys = Ring::kChunkKeys;
    extern __shared__ uint8_t dynamic_smem[];
    const Ring ring(dynamic_smem);
    const int chunks = per_row / kChunkKeys;
    float acc[kSub][kHeads / 2];
    float w[kHeads / 8][2];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        __syncthreads();
        load_query(ring.query, q, row, kHeads, kThreads);
        const int* list = candidates + size_t(row) * per_row;
        float* row_out = out + size_t(row) * per_row;
        sm90::load_lane_weights<1, kHeads>(w, weights, row, row + 1);
        walk_chunks<kThreads>(
            ring, k, k_scale, list, chunks,
            [&](int buf, int s) {
                sm90::wgmma_keys_queries(acc[s], ring.tile_start(buf, s), ring.query_start());
            },
            [&](int c, int buf, int s) {
                store_scores<true>(acc[s], w, ring.tile_scales(buf, s),
                                   row_out + c * kChunkKeys + s * kTileKeys);
            });
    }
}

constexpr int kBatchedSub = 4;
constexpr int kBatchedSmemBytes = ChunkRing<kBatchedSub, kTileKeys, kQueryBytes>::kBytes;
}  // namespace

extern "C" int rescore(const void* q, const void* k, const float* k_scale, const float* weights, const int* candidates,
                       float* out, int rows, int per_row, int ctas, int mode, void* stream) {
    if (per_row % (2 * kTileKeys) || mode < 0 || mode > 3) return -1;
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    if (mode == 3) {  // kBatchedSub products a barrier
        if (per_row % (kBatchedSub * kTileKeys)) return -1;
        const auto batched = rescore_batched_kernel<kBatchedSub>;
        const cudaError_t set = cudaFuncSetAttribute(batched, cudaFuncAttributeMaxDynamicSharedMemorySize, kBatchedSmemBytes);
        if (set != cudaSuccess) return static_cast<int>(set);
        batched<<<ctas, kThreads, kBatchedSmemBytes, cuda_stream>>>(static_cast<const uint8_t*>(q), static_cast<const uint8_t*>(k),
                                                              k_scale, weights, candidates, out, rows, per_row);
        return static_cast<int>(cudaGetLastError());
    }
    // mode 0: in turn; 1: overlapped; 2: overlapped, products only (no scores)
    auto kernel = mode == 0 ? rescore_kernel<false> : mode == 1 ? rescore_kernel<true> : rescore_kernel<true, false>;
    kernel<<<ctas, kThreads, 0, cuda_stream>>>(static_cast<const uint8_t*>(q), static_cast<const uint8_t*>(k), k_scale,
                                               weights, candidates, out, rows, per_row);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int rescore_heads() { return kHeads; }
