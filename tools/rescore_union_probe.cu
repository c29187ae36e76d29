// The exact rescoring of an fp16 gate's candidates done as today's scan does its keys (tools/rescore.py's
// `union` kernels; docs/fp16-gate.md, "Left open", the fourth lever): a CTA (one warpgroup) takes a row
// block of kRows = 128 / H rows (the gated kernel's blocks at H = 64 and 32), its query tile of
// kRows x H (row, head) columns in sm90::LaneTotals' column order (as sm90_host::query_map's TMA box
// lays it), and the block's list of candidate keys (the union of its rows' candidates), gathered 64 at a
// time (cp.async into the 128-byte swizzle) and multiplied with the whole tile: m64n128k32, four
// k-steps, then the scan's exact epilogue (sm90::row_sums<kRows, H>), every row's score of every key of
// the list. A key of the list costs what a key of today's scan costs (one product column of the tile,
// the same epilogue) where the gather keeps up: that is what it measures, beside the row-at-a-time
// kernels of tools/rescore_probe.cu. The head sums run in today's order, so the scores are the scan's.
// kSub chunks a barrier: their kSub products issued as one group, reduced after one wait.
//
// Compiled with -DHEADS=32|64 and -DWGMMA_HEADER naming templates/common/wgmma.cuh.j2 rendered for N = 128.
#include "rescore_gather.cuh"
#include WGMMA_HEADER

namespace {
constexpr int kHeads = HEADS;
constexpr int kRows = 128 / kHeads;        // rows a block: kRows x kHeads = 128 columns (wgmma N)
constexpr int kColumns = kRows * kHeads;
constexpr int kTileKeys = 64;              // keys a product (wgmma M)
constexpr int kQueryBytes = kColumns * 128;
constexpr int kThreads = 128;
using Lane = sm90::LaneTotals<kRows>;

using namespace gather;

// The block's query tile: column n = 2c + e holds row c % kRows, head 2 (c / kRows) + e (LaneTotals'
// order), each column its 128 bytes, by `threads` threads (cp.async; the caller commits).
__device__ __forceinline__ void load_block_query(uint8_t* query, const uint8_t* q, int row0) {
    for (int i = threadIdx.x; i < kColumns * 8; i += kThreads) {
        const int n = i / 8, c = n / 2, row = row0 + c % kRows, head = 2 * (c / kRows) + n % 2;
        cp_async_16(query + swizzled(n, 16 * (i % 8)), q + (size_t(row) * kHeads + head) * 128 + 16 * (i % 8));
    }
}

// out[row0 + r, j] = k_scale[c] * sum_h w[row0 + r, h] relu(q[row0 + r, h] . k[c]) for every row r of
// block b (rows row0 = b kRows ..) and c = candidates[b, j], j < per_row (a multiple of kSub x 64): the
// block's list scored for each of its rows.
template <int kSub>
__global__ void __launch_bounds__(kThreads) rescore_union_kernel(const uint8_t* q, const uint8_t* k, const float* k_scale,
                                                                const float* weights, const int* candidates, float* out,
                                                                int rows, int per_row) {
    using Ring = ChunkRing<kSub, kTileKeys, kQueryBytes>;
    constexpr int kChunkKeys = Ring::kChunkKeys;
    extern __shared__ uint8_t dynamic_smem[];
    const Ring ring(dynamic_smem);
    const int chunks = per_row / kChunkKeys, blocks = rows / kRows;
    const int quad_key = 16 * (threadIdx.x / 32) + (threadIdx.x % 32) / 4;  // key g of the lane's quad in a tile
    float acc[kSub][kColumns / 2];
    float w[kColumns / 8][2];
    for (int block = blockIdx.x; block < blocks; block += gridDim.x) {
        const int row0 = block * kRows;
        __syncthreads();  // the previous block's products have read the query tile and the buffers
        load_block_query(ring.query, q, row0);
        const int* list = candidates + size_t(block) * per_row;
        sm90::load_lane_weights<kRows, kHeads>(w, weights, row0, rows);
        walk_chunks<kThreads>(
            ring, k, k_scale, list, chunks,
            [&](int buf, int s) {
                sm90::wgmma_keys_queries(acc[s], ring.tile_start(buf, s), ring.query_start());
            },
            [&](int c, int buf, int s) {
                float v[Lane::kCount];
                sm90::row_sums<kRows, kHeads>(acc[s], w, v);
                if (!Lane::holds()) return;
#pragma unroll
                for (int m = 0; m < Lane::kCount; ++m) {
                    const int key = quad_key + Lane::key_offset(Lane::key_slot(m));
                    const int row = row0 + Lane::row(Lane::row_slot(m));
                    out[size_t(row) * per_row + c * kChunkKeys + s * kTileKeys + key] =
                        v[m] * ring.tile_scales(buf, s)[key];
                }
            });
    }
}

template <int kSub>
constexpr int kSmemBytes = ChunkRing<kSub, kTileKeys, kQueryBytes>::kBytes;
}  // namespace

// sub: chunks of 64 keys a barrier, 1 or 2. rows: a multiple of the block's rows; candidates
// [rows / block rows, per_row].
extern "C" int rescore_union(const void* q, const void* k, const float* k_scale, const float* weights,
                             const int* candidates, float* out, int rows, int per_row, int ctas, int sub, void* stream) {
    if (rows % kRows || per_row % (sub * kTileKeys) || (sub != 1 && sub != 2)) return -1;
    const auto launch = [&](auto kernel, int smem) {
        const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (set != cudaSuccess) return static_cast<int>(set);
        kernel<<<ctas, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const uint8_t*>(q), static_cast<const uint8_t*>(k), k_scale, weights, candidates, out, rows, per_row);
        return static_cast<int>(cudaGetLastError());
    };
    return sub == 1 ? launch(rescore_union_kernel<1>, kSmemBytes<1>) : launch(rescore_union_kernel<2>, kSmemBytes<2>);
}

extern "C" int rescore_union_rows() { return kRows; }
