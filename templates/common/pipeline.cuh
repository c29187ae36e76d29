// The persistent, warp-specialised TMA + wgmma pipeline, written once for every Hopper kernel here
// (the gated and the streaming fused kernels, the dense logits kernel). A kernel is a set of roles on it:
//
//   pipe::Shape    the CTA: kMathWarps math warps (4 a warpgroup) and kOtherWGs more warpgroups (the
//                  first holds the producer warp), the register split setmaxnreg makes, the tiles' bytes;
//   pipe::Layout   shared memory from a 1024-byte aligned base: the Q ring, the K ring, the scale ring,
//                  the kernel's own region, its state, then the barriers (the rings' full/empty pairs
//                  and the kernel's own). kSmemBytes is what the library exports (mqa_topk_smem_bytes);
//   pipe::Pipeline one CTA's view of it: stage addresses, barriers, the producer's loads;
//   pipe::run      the start every kernel shares: the barriers initialised, then the threads past the
//                  math warpgroups give registers up and run the kernel's other roles (its thread
//                  kMathThreads is the producer), the math warpgroups take them and run its math role.
//
// The roles themselves stay the kernel's: which row blocks and tiles the producer loads
// (blocks::produce_row_blocks for the persistent row-block kernels), what the math warpgroups make of
// a tile's products, and any role of its own (the gated kernel's selector warps).
#pragma once

namespace pipe {

template <int kRows_, int kHeads_, int kKeyTile_, int kMathWarps_, int kStages_, int kQStages_ = 2, int kOtherWGs = 1,
          int kProducerMin = sm90::kMinProducerRegisters>
struct Shape {
    static constexpr int kRows = kRows_;          // query rows per block
    static constexpr int kHeads = kHeads_;
    static constexpr int kKeyTile = kKeyTile_;    // keys per K stage
    static constexpr int kMathWarps = kMathWarps_;
    static constexpr int kStages = kStages_;      // K tiles in flight
    static constexpr int kQStages = kQStages_;    // Q tiles in flight
    static constexpr int kDim = 128;
    static constexpr int kN = kRows * kHeads;     // wgmma N: (row, head) columns
    static constexpr int kMathWGs = kMathWarps / 4;
    static constexpr int kMathThreads = kMathWarps * 32;
    static constexpr int kThreads = kMathThreads + 128 * kOtherWGs;
    static constexpr int kLaunchRegisters = sm90::launch_registers(kThreads);
    static constexpr int kMathRegisters = sm90::math_registers(kThreads, kMathThreads, kProducerMin);
    static constexpr int kProducerRegisters = sm90::producer_registers(kThreads, kMathThreads, kProducerMin);
    static constexpr int kQTileBytes = kN * kDim;
    static constexpr int kKTileBytes = kKeyTile * kDim;
    static constexpr int kScaleTileBytes = kKeyTile * 4;
    static_assert(kMathWarps % 4 == 0, "math warps come in warpgroups");
    static_assert(kHeads % 8 == 0 && kN % 64 == 0 && kN <= 256, "wgmma N must be a multiple of 64, at most 256");
    static_assert(kQTileBytes % 1024 == 0 && kKTileBytes % 1024 == 0, "128-byte swizzle needs 1024-byte tiles");
};

template <class S, int kRegionBytes, int kStateBytes, int kExtraBarriers = 0>
struct Layout {
    static constexpr int kQRingOffset = 0;
    static constexpr int kKRingOffset = kQRingOffset + S::kQStages * S::kQTileBytes;
    static constexpr int kScaleRingOffset = kKRingOffset + S::kStages * S::kKTileBytes;
    static constexpr int kRegionOffset = kScaleRingOffset + S::kStages * S::kScaleTileBytes;  // the kernel's own
    static constexpr int kStateOffset = kRegionOffset + kRegionBytes;
    static constexpr int kBarrierOffset = (kStateOffset + kStateBytes + 7) / 8 * 8;
    static constexpr int kBarriers = 2 * (S::kQStages + S::kStages) + kExtraBarriers;
    static constexpr int kSmemBytes = kBarrierOffset + 8 * kBarriers + 1024;  // + the base's alignment slack
};

template <class S, class L>
struct Pipeline {
    uint8_t* smem;  // the 1024-byte aligned base
    uint64_t* full_q;
    uint64_t* empty_q;
    uint64_t* full_kv;
    uint64_t* empty_kv;

    __device__ __forceinline__ explicit Pipeline(uint8_t* smem_raw) : smem(sm90::aligned_shared_base(smem_raw)) {
        full_q = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);
        empty_q = full_q + S::kQStages;
        full_kv = empty_q + S::kQStages;
        empty_kv = full_kv + S::kStages;
    }
    // The kernel's barriers, after the rings'.
    __device__ __forceinline__ uint64_t* own_barriers() const { return empty_kv + S::kStages; }
    template <typename T>
    __device__ __forceinline__ T* at(int offset) const { return reinterpret_cast<T*>(smem + offset); }
    __device__ __forceinline__ uint8_t* q_tile(int stage) const { return smem + L::kQRingOffset + stage * S::kQTileBytes; }
    __device__ __forceinline__ uint8_t* k_tile(int stage) const { return smem + L::kKRingOffset + stage * S::kKTileBytes; }
    __device__ __forceinline__ uint8_t* scale_tile(int stage) const {
        return smem + L::kScaleRingOffset + stage * S::kScaleTileBytes;
    }
    // Producer: the kv_iter-th K tile of the launch (keys tile .. + kKeyTile and their scales) into
    // its ring stage, once that stage is free. (Counter: int or unsigned, as the kernel counts: with
    // unsigned, stage and phase are a mask and a shift.)
    template <typename Counter>
    __device__ __forceinline__ void load_key_tile(const CUtensorMap* k_map, const CUtensorMap* scale_map, Counter kv_iter,
                                                  int tile) const {
        const int s = kv_iter % S::kStages;
        sm90::load_key_tile(full_kv, empty_kv, s, kv_iter / S::kStages, k_tile(s), scale_tile(s), k_map, scale_map, tile,
                            S::kKeyTile);
    }
};

// Every kernel's start. init_own() runs in every thread before the CTA's barrier (thread kMathThreads
// initialises the rings' barriers right after it); then the threads past the math warpgroups lower
// their registers to kProducerRegisters and run others(), the math warpgroups raise theirs to
// kMathRegisters and run math().
template <class S, class P, typename InitOwn, typename Others, typename Math>
__device__ __forceinline__ void run(const P& pipe, const CUtensorMap* q_map, const CUtensorMap* k_map,
                                    const CUtensorMap* scale_map, InitOwn init_own, Others others, Math math) {
    init_own();
    if (threadIdx.x == S::kMathThreads)
        sm90::init_pipeline(pipe.full_q, pipe.empty_q, S::kQStages, pipe.full_kv, pipe.empty_kv, S::kStages,
                            S::kMathThreads, q_map, k_map, scale_map);
    __syncthreads();
    if (threadIdx.x >= S::kMathThreads) {
        sm90::setmaxnreg_dec<S::kProducerRegisters>();
        others();
        return;
    }
    sm90::setmaxnreg_inc<S::kMathRegisters>();
    math();
}

}  // namespace pipe

namespace pipe_host {

// Once per device: the kernel's shared memory opted into and its registers checked
// (sm90_host::setup_persistent); *sms receives the SM count.
template <class S, typename Kernel>
inline cudaError_t setup(Kernel kernel, int smem_bytes, int (&sms_by_device)[64], int* sms) {
    return sm90_host::setup_persistent(kernel, smem_bytes, S::kLaunchRegisters, sms_by_device, sms);
}

// The tensor maps of q (a row block's Q tile a box), k and k_scale (a key tile a box).
template <class S>
inline cudaError_t tensor_maps(sm90_host::OperandMaps* maps, const void* q, const void* k, const float* k_scale, int rows,
                               int keys) {
    return sm90_host::operand_maps(maps, q, k, k_scale, rows, S::kHeads, S::kRows, keys, S::kKeyTile);
}

// A persistent launch of `kernel` over min(units, SMs) CTAs of S::kThreads threads and `smem_bytes`
// of shared memory on `s`, with the tensor maps and `p`, its block counter at `counter` zeroed first:
// the host side of a row-block kernel whose workspace is that counter. rows <= 0 launches nothing.
template <class S, typename Kernel, typename Params>
inline cudaError_t launch_persistent(Kernel kernel, int smem_bytes, int (&sms_by_device)[64], const void* q,
                                     const void* k, const float* k_scale, int rows, int keys, int units, int* counter,
                                     const Params& p, cudaStream_t s) {
    int sms = 0;
    cudaError_t err = setup<S>(kernel, smem_bytes, sms_by_device, &sms);
    if (err != cudaSuccess || rows <= 0) return err;
    sm90_host::OperandMaps maps;
    if ((err = tensor_maps<S>(&maps, q, k, k_scale, rows, keys)) != cudaSuccess) return err;
    if ((err = cudaMemsetAsync(counter, 0, sizeof(int), s)) != cudaSuccess) return err;
    kernel<<<min(units, sms), S::kThreads, smem_bytes, s>>>(maps.q, maps.k, maps.scales, p);
    return cudaGetLastError();
}

}  // namespace pipe_host
