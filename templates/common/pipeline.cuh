// The persistent, warp-specialised TMA + wgmma pipeline, written once for every Hopper kernel here (the
// gated and the streaming fused kernels, the paged decode kernel, the dense logits kernel). A kernel is
// a set of roles on it:
//
//   pipe::Shape   the CTA: kMathWarps math warps (4 a warpgroup) and kOtherWGs more warpgroups (the
//                 first holds the producer warp), the register split setmaxnreg makes, the tiles' bytes;
//   pipe::Layout  shared memory from a 1024-byte aligned base: the Q ring, the K ring, the scale ring,
//                 the kernel's own region, its state, then the barriers (the rings' full/empty pairs,
//                 then the kernel's own). kSmemBytes is what a library exports (its *_smem_bytes);
//   pipe::Ring    one CTA's view of it: the stage addresses and barriers, the producer's key loads;
//   pipe::run     the start every kernel shares: the rings' barriers initialised (with the kernel's
//                 own), the kernel's state set, then the threads past the math warpgroups give
//                 registers up and run the kernel's other roles (thread kMathThreads is the producer),
//                 the math warpgroups take them and run its math role.
//
// Host side (pipe_host): the once-per-device setup and a persistent launch.
//
// The roles stay the kernel's: which work the producer claims and loads, what the math warpgroups make
// of a tile's products, and any role of its own (the gated kernel's selector warps).
//
// Written so that a kernel on it compiles to the machine code it had written out by hand
// (tools/compare_sass.py: SAME): every address is formed from the aligned base as before (`base +
// offset + stage * bytes`), and nothing here runs in an order of its own.
#pragma once

namespace pipe {

template <int kRows_, int kHeads_, int kKeyTile_, int kMathWarps_, int kStages_, int kOtherWGs_ = 1,
          int kProducerMin = sm90::kMinProducerRegisters, int kQStages_ = 2>
struct Shape {
    static constexpr int kRows = kRows_;        // query rows a Q tile holds
    static constexpr int kHeads = kHeads_;
    static constexpr int kKeyTile = kKeyTile_;  // keys a K stage holds
    static constexpr int kMathWarps = kMathWarps_;
    static constexpr int kStages = kStages_;    // K tiles in flight
    static constexpr int kQStages = kQStages_;  // Q tiles in flight
    static constexpr int kOtherWGs = kOtherWGs_;
    static constexpr int kDim = 128;
    static constexpr int kN = kRows * kHeads;  // wgmma N: (row, head) columns
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
    static_assert(kProducerRegisters >= kProducerMin &&
                      kMathRegisters * kMathThreads + kProducerRegisters * 128 * kOtherWGs <= kLaunchRegisters * kThreads,
                  "the register split must fit the launch allocation");
};

template <class S, int kRegionBytes, int kStateBytes, int kOwnBarriers = 0>
struct Layout {
    static constexpr int kQRingOffset = 0;
    static constexpr int kKRingOffset = kQRingOffset + S::kQStages * S::kQTileBytes;
    static constexpr int kScaleRingOffset = kKRingOffset + S::kStages * S::kKTileBytes;
    static constexpr int kRegionOffset = kScaleRingOffset + S::kStages * S::kScaleTileBytes;  // the kernel's own
    static constexpr int kStateOffset = kRegionOffset + kRegionBytes;
    static constexpr int kBarrierOffset = (kStateOffset + kStateBytes + 7) / 8 * 8;
    static constexpr int kBarriers = 2 * (S::kQStages + S::kStages) + kOwnBarriers;
    static constexpr int kSmemBytes = kBarrierOffset + 8 * kBarriers + 1024;  // + the base's alignment slack

    // A ring stage's tile from the aligned base.
    static __device__ __forceinline__ uint8_t* q_tile(uint8_t* smem, int stage) { return smem + kQRingOffset + stage * S::kQTileBytes; }
    static __device__ __forceinline__ uint8_t* k_tile(uint8_t* smem, int stage) { return smem + kKRingOffset + stage * S::kKTileBytes; }
    static __device__ __forceinline__ uint8_t* scale_tile(uint8_t* smem, int stage) {
        return smem + kScaleRingOffset + stage * S::kScaleTileBytes;
    }
    // Producer: the use-th fill of K stage `stage` (keys first_key .. + kKeyTile and their scales), once the
    // stage is free.
    static __device__ __forceinline__ void load_key_tile(uint8_t* smem, uint64_t* full_kv, uint64_t* empty_kv, int stage, int use,
                                                         const CUtensorMap* k_map, const CUtensorMap* scale_map, int first_key) {
        sm90::load_key_tile(full_kv, empty_kv, stage, use, k_tile(smem, stage), scale_tile(smem, stage), k_map, scale_map,
                            first_key, S::kKeyTile);
    }
};

// A CTA's view of the layout: the aligned base and the rings' barriers (the kernel's own follow them).
// Kernels copy these into locals at their start and use those: reading them through the struct in the
// roles (or through accessor functions) made nvcc number and fold things differently, enough to change
// the machine code (experiment log, "2026-12-04: one skeleton, instruction for instruction").
template <class S, class L>
struct Ring {
    uint8_t* smem;  // the 1024-byte aligned base
    uint64_t* full_q;
    uint64_t* empty_q;
    uint64_t* full_kv;
    uint64_t* empty_kv;
    uint64_t* own;  // the kernel's barriers

    __device__ __forceinline__ explicit Ring(uint8_t* smem_raw) : smem(sm90::aligned_shared_base(smem_raw)) {
        full_q = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);
        empty_q = full_q + S::kQStages;
        full_kv = empty_q + S::kQStages;
        empty_kv = full_kv + S::kStages;
        own = empty_kv + S::kStages;
    }
};

// The role split, after the CTA's barrier: the threads past the math warpgroups lower their registers
// to kProducerRegisters and return true (they run the kernel's other roles; thread kMathThreads is the
// producer), the math warpgroups raise theirs to kMathRegisters and return false.
template <class S>
__device__ __forceinline__ bool other_roles() {
    if (threadIdx.x >= S::kMathThreads) {
        sm90::setmaxnreg_dec<S::kProducerRegisters>();
        return true;
    }
    sm90::setmaxnreg_inc<S::kMathRegisters>();
    return false;
}

}  // namespace pipe

namespace pipe_host {

// Once per device: the kernel's shared memory opted into and its registers checked
// (sm90_host::setup_persistent); *sms receives the SM count.
template <class S, class L, typename Kernel>
inline cudaError_t setup(Kernel kernel, int (&sms_by_device)[64], int* sms) {
    return sm90_host::setup_persistent(kernel, L::kSmemBytes, S::kLaunchRegisters, sms_by_device, sms);
}

}  // namespace pipe_host
