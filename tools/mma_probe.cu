// Probe of the fp8 tensor-core accumulation that the mma.sync kernels use (tools/accumulation.py):
// every warp computes D = C + A B^T for one 16 x 8 tile with `steps` chained
// mma.sync.m16n8k32 e4m3 instructions (K = 32 steps), as the kernels chain four over a 128-byte key.
// A: [groups, 16, 32 steps] e4m3, B: [groups, 8, 32 steps] e4m3, C and D: [groups, 16, 8] fp32.
// The kernels' own wrapper of the instruction (pasted into every mma.sync kernel).
#include "../templates/common/primitives.cuh"
#include <cuda_fp16.h>

// A warp's share of the probe: its group's A and B (rows of 32 * steps e4m3), the lane's place (g, t)
// in the 16 x 8 tile and the group's first of its 128 results.
struct Warp {
    const uint8_t* A;
    const uint8_t* B;
    int k_len, g, t;
    size_t at;

    __device__ Warp(const uint8_t* a, const uint8_t* b, int steps)
        : k_len(32 * steps), g(int(threadIdx.x) >> 2), t(int(threadIdx.x) & 3), at((size_t)blockIdx.x * 128) {
        A = a + (size_t)blockIdx.x * 16 * k_len;
        B = b + (size_t)blockIdx.x * 8 * k_len;
    }
    // The lane's fragments of A (rows g, g + 8) and B (column g) for the 32 products from k0.
    __device__ void fragments(int k0, uint32_t (&fa)[4], uint32_t (&fb)[2]) const {
        fa[0] = *reinterpret_cast<const uint32_t*>(A + g * k_len + k0 + 4 * t);
        fa[1] = *reinterpret_cast<const uint32_t*>(A + (g + 8) * k_len + k0 + 4 * t);
        fa[2] = *reinterpret_cast<const uint32_t*>(A + g * k_len + k0 + 16 + 4 * t);
        fa[3] = *reinterpret_cast<const uint32_t*>(A + (g + 8) * k_len + k0 + 16 + 4 * t);
        fb[0] = *reinterpret_cast<const uint32_t*>(B + g * k_len + k0 + 4 * t);
        fb[1] = *reinterpret_cast<const uint32_t*>(B + g * k_len + k0 + 16 + 4 * t);
    }
};

__global__ void probe_kernel(const uint8_t* a, const uint8_t* b, const float* c, float* d, int steps) {
    const Warp w(a, b, steps);
    const int g = w.g, t = w.t;
    const float* C = c + w.at;
    float acc[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    for (int s = 0; s < steps; ++s) {
        uint32_t fa[4], fb[2];
        w.fragments(32 * s, fa, fb);
        prim::mma_e4m3_16x8x32(acc, fa, fb[0], fb[1]);
    }
    float* D = d + w.at;
    D[g * 8 + 2 * t] = acc[0];
    D[g * 8 + 2 * t + 1] = acc[1];
    D[(g + 8) * 8 + 2 * t] = acc[2];
    D[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

extern "C" int mma_probe(const void* a, const void* b, const float* c, float* d, int groups, int steps, void* stream) {
    probe_kernel<<<groups, 32, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint8_t*>(a),
                                                                       static_cast<const uint8_t*>(b), c, d, steps);
    return static_cast<int>(cudaGetLastError());
}

// The same with fp16 accumulators (mma.sync m16n8k32 .f16.e4m3.e4m3.f16, sm_89+): how the tensor core
// rounds an fp16 accumulation, which bounds a scan epilogue gated in fp16 (tools/half_gate.py).
// C and D: [groups, 16, 8] fp16.
__global__ void probe_f16_kernel(const uint8_t* a, const uint8_t* b, const __half* c, __half* d, int steps) {
    const Warp w(a, b, steps);
    const int g = w.g, t = w.t;
    const __half* C = c + w.at;
    __half2 acc[2] = {__halves2half2(C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1]),
                      __halves2half2(C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1])};
    uint32_t* acc_bits = reinterpret_cast<uint32_t*>(acc);
    for (int s = 0; s < steps; ++s) {
        uint32_t fa[4], fb[2];
        w.fragments(32 * s, fa, fb);
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
            : "+r"(acc_bits[0]), "+r"(acc_bits[1])
            : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]), "r"(fb[1]));
    }
    __half* D = d + w.at;
    D[g * 8 + 2 * t] = __low2half(acc[0]);
    D[g * 8 + 2 * t + 1] = __high2half(acc[0]);
    D[(g + 8) * 8 + 2 * t] = __low2half(acc[1]);
    D[(g + 8) * 8 + 2 * t + 1] = __high2half(acc[1]);
}

extern "C" int mma_probe_f16(const void* a, const void* b, const void* c, void* d, int groups, int steps, void* stream) {
    probe_f16_kernel<<<groups, 32, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), static_cast<const __half*>(c),
        static_cast<__half*>(d), steps);
    return static_cast<int>(cudaGetLastError());
}
