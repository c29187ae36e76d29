// Probe of the fp8 warpgroup product with fp16 accumulators (wgmma .f16.e4m3.e4m3, sm_90a), for a
// scan gated in fp16 ("Past the epilogue"; tools/accumulation.py --wgmma-f16-steps, --wgmma-rate):
// 1. how it rounds: every CTA, one warpgroup, computes D = C + A B^T for a 64 x 8 tile with `steps`
//    chained k32 instructions (K = 32 steps <= 128), A [groups, 64, 128] and B [groups, 8, 128] e4m3
//    (only the first 32 steps dims used), C and D [groups, 64, 8] fp16;
// 2. how fast it runs beside the fp32-accumulating instruction: m64n128k32 (the scan kernels' N at
//    H = 32 x 4 rows and H = 64 x 2) back to back from one pair of shared tiles.
// Both operands K-major with the 128-byte swizzle, as TMA writes them for the kernels
// (templates/common/sm90.cuh's descriptors); the instructions as the generated kernels write them
// (templates/common/wgmma.cuh.j2), here for fixed N and both accumulator types.
#include "../templates/common/sm90.cuh"
#include <cuda_fp16.h>

namespace {
__device__ __forceinline__ void wgmma_n8_f16(uint32_t (&d)[2], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 {%0, %1}, %2, %3, 1, 1, 1;\n"
                 : "+r"(d[0]), "+r"(d[1])
                 : "l"(desc_a), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_n128_f16(uint32_t (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f16.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1;\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "l"(desc_a), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_n128_f32(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b));
}

// Byte x of row r of a tile of 128-byte rows stored with the 128-byte swizzle (1024-byte aligned).
__device__ __forceinline__ int swizzled(int r, int x) { return r * 128 + ((((x >> 4) ^ r) & 7) << 4) + (x & 15); }

// Copies rows [0, rows) of `src` (128 bytes each) into the swizzled tile, by the whole CTA, then
// makes the writes visible to the tensor core (the async proxy).
__device__ void fill_tile(uint8_t* tile, const uint8_t* src, int rows) {
    for (int i = threadIdx.x; i < rows * 128; i += blockDim.x) tile[swizzled(i / 128, i % 128)] = src[i];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
}

__global__ void __launch_bounds__(128) probe_f16_kernel(const uint8_t* a, const uint8_t* b, const __half* c,
                                                       __half* d, int steps) {
    __shared__ __align__(1024) uint8_t smem[64 * 128 + 8 * 128];
    fill_tile(smem, a + size_t(blockIdx.x) * 64 * 128, 64);
    fill_tile(smem + 64 * 128, b + size_t(blockIdx.x) * 8 * 128, 8);
    // Thread t of warp w holds rows 16w + g and 16w + g + 8 (g = lane / 4), columns 2 (lane % 4) + {0, 1},
    // each pair packed in one register: the fp32 layout with its pairs packed.
    const int lane = threadIdx.x % 32, row = 16 * (threadIdx.x / 32) + lane / 4, col = 2 * (lane % 4);
    const size_t at = size_t(blockIdx.x) * 64 * 8;
    __half2 acc[2] = {__halves2half2(c[at + row * 8 + col], c[at + row * 8 + col + 1]),
                      __halves2half2(c[at + (row + 8) * 8 + col], c[at + (row + 8) * 8 + col + 1])};
    uint32_t* bits = reinterpret_cast<uint32_t*>(acc);
    uint32_t d_regs[2] = {bits[0], bits[1]};
    const uint32_t a_start = sm90::kmajor_sw128_start(smem), b_start = sm90::kmajor_sw128_start(smem + 64 * 128);
    sm90::wgmma_fence();
    for (int k = 0; k < steps; ++k)  // a k-step of 32 fp8: + 32 bytes, + 2 in the start fields
        wgmma_n8_f16(d_regs, sm90::kKmajorSw128High | (a_start + 2 * k), sm90::kKmajorSw128High | (b_start + 2 * k));
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    bits[0] = d_regs[0];
    bits[1] = d_regs[1];
    d[at + row * 8 + col] = __low2half(acc[0]);
    d[at + row * 8 + col + 1] = __high2half(acc[0]);
    d[at + (row + 8) * 8 + col] = __low2half(acc[1]);
    d[at + (row + 8) * 8 + col + 1] = __high2half(acc[1]);
}

// `iters` groups of four k32 products (a 128-dim tile, as the scan issues them) into one accumulator
// set, by each of the CTA's warpgroups; out[blockIdx.x] keeps the accumulators alive. The same tiles
// every iteration: the fp16 sums (about 160 a group) reach infinity after some 400 of the 4,096, which the
// measured rate does not depend on as far as is known (not checked with finite sums).
template <bool kF16>
__global__ void __launch_bounds__(256) rate_kernel(int iters, float* out) {
    __shared__ __align__(1024) uint8_t smem[64 * 128 + 128 * 128];
    for (int i = threadIdx.x; i < int(sizeof(smem)); i += blockDim.x) smem[i] = uint8_t(0x38 + (i * 7) % 3);  // 1.0-ish
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint32_t a_start = sm90::kmajor_sw128_start(smem), b_start = sm90::kmajor_sw128_start(smem + 64 * 128);
    using Acc = typename std::conditional<kF16, uint32_t, float>::type;
    Acc acc[kF16 ? 32 : 64] = {};
    sm90::wgmma_fence();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if constexpr (kF16)
                wgmma_n128_f16(acc, sm90::kKmajorSw128High | (a_start + 2 * k), sm90::kKmajorSw128High | (b_start + 2 * k));
            else
                wgmma_n128_f32(acc, sm90::kKmajorSw128High | (a_start + 2 * k), sm90::kKmajorSw128High | (b_start + 2 * k));
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();
    }
    sm90::wgmma_wait<0>();
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < (kF16 ? 32 : 64); ++i) sum += float(acc[i]);
    if (sum == 12345.f) out[blockIdx.x] = sum;
}
}  // namespace

extern "C" int wgmma_probe_f16(const void* a, const void* b, const void* c, void* d, int groups, int steps, void* stream) {
    probe_f16_kernel<<<groups, 128, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), static_cast<const __half*>(c),
        static_cast<__half*>(d), steps);
    return static_cast<int>(cudaGetLastError());
}

// One launch of `ctas` CTAs of two warpgroups, each issuing 4 x iters products of 64 x 128 x 32.
extern "C" int wgmma_rate(int f16, int ctas, int iters, float* out, void* stream) {
    if (f16)
        rate_kernel<true><<<ctas, 256, 0, static_cast<cudaStream_t>(stream)>>>(iters, out);
    else
        rate_kernel<false><<<ctas, 256, 0, static_cast<cudaStream_t>(stream)>>>(iters, out);
    return static_cast<int>(cudaGetLastError());
}
