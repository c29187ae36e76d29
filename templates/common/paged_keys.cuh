// Keys read straight from the paged indexer cache (DeepGEMM's layout, as vLLM passes it): cache block
// i holds kBlockSize keys of 128 fp8 bytes, then their kBlockSize fp32 scales. Included by the paged
// decode kernel and by the prefill kernels' paged builds (a variant with page_block_size), after
// sm90.cuh and sm90_host.cuh; the gathered builds do not include it, so their code is unchanged.
#pragma once

namespace paged {

// Loads the box at (x, y, z) of a 3-D tensor map into shared memory; completion is counted on `bar`.
__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int x, int y, int z) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
            sm90::smem_addr(smem_dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(sm90::smem_addr(bar)), "r"(x), "r"(y), "r"(z)
        : "memory");
}

// One 64-key piece: the keys at slots in_block .. in_block + 63 of cache block `block` (in_block a
// multiple of 64) and their scales, into a K ring slot (keys_dst: 64 rows of 128 bytes in the 128-byte
// swizzle, exactly as one larger box would have put them there) and its scale ring slot.
template <int kBlockSize>
__device__ __forceinline__ void load_piece(void* keys_dst, void* scales_dst, const CUtensorMap* k_map,
                                           const CUtensorMap* scale_map, uint64_t* bar, int block, int in_block) {
    constexpr int kScalesAt = kBlockSize * 128 / 4;  // a block's scales, in floats from its start
    tma_load_3d(keys_dst, k_map, bar, 0, in_block, block);
    sm90::tma_load_2d(scales_dst, scale_map, bar, kScalesAt + in_block, block);
}

// Producer side of a prefill kernel's paged build, in place of sm90::load_key_tile: the kKeys keys
// from first_key on (a multiple of 64) in 64-key pieces, key x at slot x % kBlockSize of cache block
// pages[x / kBlockSize]. `pages` maps the launch's key space to cache blocks (the runtime lays each
// request's blocks end to end in it: runtime/page_layout.py) and covers every tile a launch loads.
// The block ids are read before the slot is waited for, so their loads overlap the wait.
template <int kBlockSize, int kKeys>
__device__ __forceinline__ void load_key_tile(uint64_t* full, uint64_t* empty, int stage, int use, uint8_t* keys_dst,
                                              uint8_t* scales_dst, const CUtensorMap* k_map, const CUtensorMap* scale_map,
                                              int first_key, const int* pages) {
    static_assert(kKeys % 64 == 0 && kBlockSize % 64 == 0, "whole 64-key pieces, each in one cache block");
    constexpr int kPieces = kKeys / 64;
    int block[kPieces];
#pragma unroll
    for (int i = 0; i < kPieces; ++i) block[i] = __ldg(pages + (first_key + 64 * i) / kBlockSize);
    sm90::mbar_wait(&empty[stage], (use & 1) ^ 1);
    sm90::mbar_arrive_expect_tx(&full[stage], kKeys * (128 + 4));
#pragma unroll
    for (int i = 0; i < kPieces; ++i)
        load_piece<kBlockSize>(keys_dst + i * 64 * 128, scales_dst + i * 64 * 4, k_map, scale_map, &full[stage], block[i],
                               (first_key + 64 * i) % kBlockSize);
}

// The cache as the kernels read it, block by block (a block index is a coordinate of its own, so no
// coordinate outgrows int32 however large the cache): the keys as [num_blocks][block rows][128] bytes,
// a box being 64 keys of one block (128-byte swizzle, as the wgmma descriptors expect); the scales as
// [num_blocks][kBlockSize * 33] floats, a box being 64 of them.
template <int kBlockSize>
inline bool cache_maps(CUtensorMap* keys, CUtensorMap* scales, const void* kv_cache, int num_blocks) {
    constexpr int kBlockRows = kBlockSize * (128 + 4) / 128;  // a cache block, in rows of 128 bytes
    auto encode = sm90_host::encode_tiled();
    if (encode == nullptr) return false;
    const cuuint32_t elem[3] = {1, 1, 1};
    const cuuint64_t key_dims[3] = {128, kBlockRows, cuuint64_t(num_blocks)};
    const cuuint64_t key_strides[2] = {128, cuuint64_t(kBlockRows) * 128};
    const cuuint32_t key_box[3] = {128, 64, 1};
    const cuuint64_t scale_dims[2] = {cuuint64_t(kBlockRows) * 128 / 4, cuuint64_t(num_blocks)};
    const cuuint64_t scale_strides[1] = {cuuint64_t(kBlockRows) * 128};
    const cuuint32_t scale_box[2] = {64, 1};
    return encode(keys, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(kv_cache), key_dims, key_strides, key_box, elem,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS &&
           encode(scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<void*>(kv_cache), scale_dims, scale_strides,
                  scale_box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// sm90_host::operand_maps of a paged build: the queries' map, and the cache's in place of k's and
// k_scale's.
template <int kBlockSize>
inline cudaError_t operand_maps(sm90_host::OperandMaps* m, const void* q, const void* kv_cache, int cache_blocks, int rows,
                                int heads, int block_rows) {
    if (sm90_host::encode_tiled() == nullptr) return cudaErrorNotSupported;
    return sm90_host::query_map(&m->q, q, uint64_t(rows), uint32_t(heads), uint32_t(block_rows)) &&
                   cache_maps<kBlockSize>(&m->k, &m->scales, kv_cache, cache_blocks)
               ? cudaSuccess
               : cudaErrorInvalidValue;
}

}  // namespace paged
