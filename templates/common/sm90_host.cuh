// Host side of the Hopper kernels: tensor maps for the operands they stream, and the one-time launch
// setup. The driver's encoder is reached through the runtime (cudaGetDriverEntryPointByVersion), so
// the libraries need no -lcuda.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace sm90_host {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_tiled() {
    static EncodeTiled fn = nullptr;
    if (fn == nullptr) {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult status;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) ==
                cudaSuccess &&
            status == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<EncodeTiled>(p);
    }
    return fn;
}

// A 2-D map over `rows` rows of 128 bytes (the fp8 keys) with the 128-byte swizzle the
// wgmma descriptors expect; one box is box_rows rows (at most 256).
inline bool rows_map(CUtensorMap* map, const void* base, uint64_t rows, uint32_t box_rows) {
    const cuuint64_t dims[2] = {128, rows};
    const cuuint64_t strides[1] = {128};
    const cuuint32_t box[2] = {128, box_rows};
    const cuuint32_t elem[2] = {1, 1};
    return encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The queries q [rows, heads, 128] as a 4-D map whose box is one row block's query tile with its
// (row, head) rows in sm90::LaneTotals order: dims (byte, head & 1, row, head / 2), so box
// (128, 2, box_rows, heads / 2) lands the row of (row r, head h) at 2 (box_rows (h / 2) + r) + (h & 1).
// The strides need not grow with the dimension (TMA takes any multiples of 16 bytes); rows past the
// end are zero-filled like any out-of-range box.
inline bool query_map(CUtensorMap* map, const void* q, uint64_t rows, uint32_t heads, uint32_t box_rows) {
    const cuuint64_t dims[4] = {128, 2, rows, heads / 2};
    const cuuint64_t strides[3] = {128, uint64_t(heads) * 128, 256};
    const cuuint32_t box[4] = {128, 2, box_rows, heads / 2};
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    return encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(q), dims, strides, box, elem,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The key scales as a [1, keys] fp32 map with box [box_keys, 1]: loads at x = first key, y = 0.
inline bool scales_map(CUtensorMap* map, const float* base, uint64_t keys, uint32_t box_keys) {
    const cuuint64_t dims[2] = {keys, 1};
    const cuuint64_t strides[1] = {((keys * 4 + 15) / 16) * 16};
    const cuuint32_t box[2] = {box_keys, 1};
    const cuuint32_t elem[2] = {1, 1};
    return encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides, box, elem,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The three maps every Hopper kernel here reads through: the queries (query_map, box block_rows
// rows), the keys (k [keys, 128], box key_tile keys) and their scales.
struct OperandMaps {
    CUtensorMap q, k, scales;
};
inline cudaError_t operand_maps(OperandMaps* m, const void* q, const void* k, const float* k_scale, int rows, int heads,
                                int block_rows, int keys, uint32_t key_tile) {
    if (encode_tiled() == nullptr) return cudaErrorNotSupported;
    const uint64_t n = uint64_t(keys > 0 ? keys : 1);  // callers launch nothing for 0 keys; a map needs 1
    return query_map(&m->q, q, uint64_t(rows), uint32_t(heads), uint32_t(block_rows)) && rows_map(&m->k, k, n, key_tile) &&
                   scales_map(&m->scales, k_scale, n, key_tile)
               ? cudaSuccess
               : cudaErrorInvalidValue;
}

// Once per device: opt the kernel into `smem_bytes` of dynamic shared memory, check that ptxas gave
// it the launch registers the setmaxnreg arithmetic assumes (else setmaxnreg.inc would hang: refuse
// to launch instead), and read the SM count, which *sms receives (cached in `sms_by_device`).
template <typename Kernel>
cudaError_t setup_persistent(Kernel kernel, int smem_bytes, int launch_registers, int (&sms_by_device)[64], int* sms) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device < 0 || device >= 64) return cudaErrorInvalidDevice;
    if (sms_by_device[device] == 0) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
        if (err != cudaSuccess) return err;
        cudaFuncAttributes attr;
        err = cudaFuncGetAttributes(&attr, kernel);
        if (err != cudaSuccess) return err;
        if (attr.numRegs < launch_registers) return cudaErrorInvalidConfiguration;
        err = cudaDeviceGetAttribute(&sms_by_device[device], cudaDevAttrMultiProcessorCount, device);
        if (err != cudaSuccess) return err;
    }
    *sms = sms_by_device[device];
    return cudaSuccess;
}

}  // namespace sm90_host
