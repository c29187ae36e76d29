// The fp16 gate's inputs (variants _g16): runtime/gate16.py's gate_inputs in two kernels, one pass over
// q and one over the keys, where the torch ops that define them take a dozen passes over q in fp32.
// Same arithmetic, so q_gate and w_gate come out byte for byte as gate_inputs makes them (its sums may
// add in another order: row_bounds and key_norms agree to fp32 rounding, which FP32_SLACK covers);
// runtime/gate16.py says what each input is and derives the bound, tests/test_gpu.py compares the two.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace gate16_inputs {

constexpr int kHeads = 64;
constexpr int kDim = 128;
constexpr int kChain = 16;                 // gate16.CHAIN: heads a chain, four chains a row
constexpr int kThreads = 128;              // a row's CTA: a thread a dim
constexpr double kU = 1.0 / 2048;          // gate16.U
constexpr double kGamma8 = 8 * kU / (1 - 8 * kU);
constexpr double kGamma = kGamma8 + kU * (1 + kGamma8);  // gate16.GAMMA
constexpr double kStepError = 1.25 * kU;
constexpr double kStepAccumulation = kStepError * (1 + kStepError) * (1 + kStepError) * (1 + kStepError);
constexpr double kSlack = 1.0 / 16384;     // gate16.FP32_SLACK
constexpr double kTiny = 1.0 / 33554432;   // gate16.TINY
constexpr float kHeadLimit = float(65504.0 / 1.01 / 448.0);
static_assert(kThreads == kDim, "a thread a dim");

// gate16.power_of_two_to: 2^e with x / 2^e in (limit / 2, limit] (1 where x is 0), from x / limit's
// exponent (exact: frexp, not a logarithm).
__device__ __forceinline__ float power_of_two_to(float x, float limit) {
    if (!(x > 0.f)) return 1.f;
    int e = 0;
    const float m = frexpf(x / limit, &e);  // x / limit = m 2^e, m in [1/2, 1)
    return ldexpf(1.f, m == 0.5f ? e - 1 : e);
}

__device__ __forceinline__ float fp8_value(uint8_t bits) {
    const __half h = __half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), __NV_E4M3));
    return __half2float(h);
}

__device__ __forceinline__ uint8_t to_fp8(float x) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float block_max(float x, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
    __syncthreads();
    x = fmaxf(fmaxf(scratch[0], scratch[1]), fmaxf(scratch[2], scratch[3]));
    __syncthreads();
    return x;
}

// One row a CTA: q [rows, 64, 128] e4m3, weights [rows, 64] -> q_gate [rows, 64, 128] e4m3 (columns in the
// kernel's chain order), w_gate [rows, 64] fp16, row_bounds [rows, 8].
__global__ void __launch_bounds__(kThreads) row_kernel(const uint8_t* __restrict__ q, const float* __restrict__ weights,
                                                       uint8_t* __restrict__ q_gate, __half* __restrict__ w_gate,
                                                       float* __restrict__ row_bounds) {
    __shared__ uint8_t q_row[kHeads * kDim];
    __shared__ float head_scale[kHeads], head_inverse[kHeads], w_full[kHeads], scratch[4];
    __shared__ int head_of[kHeads];      // sorted position -> head (weights largest first, ties by head)
    __shared__ int chain_of_head[kHeads];
    __shared__ float chain_scale, w_gate_max;
    __shared__ int mixed_chain;
    const int row = blockIdx.x, t = threadIdx.x, lane = t % 32, warp = t / 32;
    const uint8_t* const src = q + size_t(row) * kHeads * kDim;
    for (int i = t; i < kHeads * kDim / 16; i += kThreads)
        reinterpret_cast<uint4*>(q_row)[i] = reinterpret_cast<const uint4*>(src)[i];
    __syncthreads();
    // Each head's sum_d |q_hd| (a warp a head, four dims a lane) and its power of two.
    for (int h = warp; h < kHeads; h += kThreads / 32) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) s += fabsf(fp8_value(q_row[h * kDim + 4 * lane + i]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
        if (lane == 0) {
            head_scale[h] = power_of_two_to(s, kHeadLimit);
            head_inverse[h] = 1.f / head_scale[h];  // (exact: dividing by a power of two is multiplying by this)
            w_full[h] = weights[size_t(row) * kHeads + h] * head_scale[h];
        }
    }
    __syncthreads();
    // Heads sorted by weight, largest first (a stable sort: ties in head order). A NaN weight ranks with
    // nothing: head_of keeps a head in every slot, whatever the weights.
    if (t < kHeads) head_of[t] = t;
    __syncthreads();
    if (t < kHeads) {
        const float w = w_full[t];
        int rank = 0;
        for (int j = 0; j < kHeads; ++j) rank += (w_full[j] > w) || (w_full[j] == w && j < t);
        head_of[rank] = t;
        chain_of_head[t] = rank / kChain;
    }
    __syncthreads();
    if (t == 0) {
        float largest = 0.f;
        mixed_chain = -1;
        for (int c = 0; c < kHeads / kChain; ++c) {
            float sum = 0.f;
            bool pos = false, neg = false;
            for (int i = 0; i < kChain; ++i) {
                const float w = w_full[head_of[c * kChain + i]];
                sum += fabsf(w);
                pos |= w > 0.f;
                neg |= w < 0.f;
            }
            largest = fmaxf(largest, sum);
            if (pos && neg && mixed_chain < 0) mixed_chain = c;
        }
        chain_scale = power_of_two_to(largest, 1.f);
        w_gate_max = 0.f;
    }
    __syncthreads();
    // Column col of the gate's query holds sorted head (col % 4) x 16 + col / 4 (gate16.chain_positions).
    if (t < kHeads) {
        const int head = head_of[(t % 4) * kChain + t / 4];
        const float w = w_full[head] / chain_scale;
        w_gate[size_t(row) * kHeads + t] = __float2half_rn(w);
        atomicMax(reinterpret_cast<int*>(&w_gate_max), __float_as_int(fabsf(w)));  // (non-negative floats order as ints)
    }
    uint8_t* const dst = q_gate + size_t(row) * kHeads * kDim;
    for (int i = t; i < kHeads * kDim / 16; i += kThreads) {
        const int col = i / (kDim / 16), piece = i % (kDim / 16);
        const int head = head_of[(col % 4) * kChain + col / 4];
        uint8_t out[16];
#pragma unroll
        for (int b = 0; b < 16; ++b) out[b] = to_fp8(fp8_value(q_row[head * kDim + 16 * piece + b]) * head_inverse[head]);
        reinterpret_cast<uint4*>(dst)[i] = *reinterpret_cast<const uint4*>(out);
    }
    // Thread t's dim: c_d, and the mixed chain's sums of either sign.
    float c = 0.f, pos = 0.f, neg = 0.f;
    for (int h = 0; h < kHeads; ++h) {
        const float scaled = fp8_value(q_row[h * kDim + t]) * head_inverse[h];
        const float rounded = fabsf(fp8_value(to_fp8(scaled)));
        const float rounding = fabsf(fabsf(scaled) - rounded);
        const float w = fabsf(w_full[h]);
        c += w * (float(kStepAccumulation) * rounded + rounding + float(kSlack) * fabsf(scaled));
        if (chain_of_head[h] == mixed_chain) {
            if (w_full[h] > 0.f) pos += w * rounded;
            if (w_full[h] < 0.f) neg += w * rounded;
        }
    }
    c = block_max(c, scratch);
    pos = block_max(pos, scratch);
    neg = block_max(neg, scratch);
    if (t == 0) {
        const float minority = float((1 + kU) * (1 + 4 * kStepAccumulation)) * fminf(pos, neg);
        const float alpha = float((kGamma + 2 * kU) / (1 - kGamma) + kSlack);
        const float beta = float(2 * (kGamma + 2 * kU) / (1 - kGamma)) * minority + float(1 + kSlack) * c;
        const float w16_max = w_gate_max * float(1 + kU);
        const float absolute = (float(kHeads * kTiny) * (2.f * w16_max + 1.f) + float(2 * kChain * kTiny)) * chain_scale;
        float* const out = row_bounds + size_t(row) * 8;
        out[0] = chain_scale;
        out[1] = alpha * chain_scale;
        out[2] = beta;
        out[3] = absolute;
        out[4] = float(mixed_chain);
        out[5] = out[6] = out[7] = 0.f;
    }
}

// sum_d (4 - d / 32) |k_d| a key (gate16.STEP_WEIGHTS): a thread a key.
__global__ void __launch_bounds__(256) key_norm_kernel(const uint8_t* __restrict__ k, int keys, float* __restrict__ norms) {
    for (int key = blockIdx.x * blockDim.x + threadIdx.x; key < keys; key += gridDim.x * blockDim.x) {
        const uint4* const src = reinterpret_cast<const uint4*>(k + size_t(key) * kDim);
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kDim / 16; ++i) {
            const uint4 v = src[i];
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
            const float weight = float(4 - i / 2);  // 16 dims a piece, 32 a k-step
#pragma unroll
            for (int b = 0; b < 16; ++b) sum += weight * fabsf(fp8_value(uint8_t(words[b / 4] >> (8 * (b % 4)))));
        }
        norms[key] = sum;
    }
}

inline cudaError_t launch(const void* q, const float* weights, const void* k, int rows, int keys, void* q_gate, void* w_gate,
                          float* row_bounds, float* key_norms, cudaStream_t stream) {
    if (rows > 0)
        row_kernel<<<rows, kThreads, 0, stream>>>(static_cast<const uint8_t*>(q), weights, static_cast<uint8_t*>(q_gate),
                                                  static_cast<__half*>(w_gate), row_bounds);
    if (keys > 0)
        key_norm_kernel<<<(keys + 255) / 256 < 4096 ? (keys + 255) / 256 : 4096, 256, 0, stream>>>(
            static_cast<const uint8_t*>(k), keys, key_norms);
    return cudaGetLastError();
}

}  // namespace gate16_inputs
