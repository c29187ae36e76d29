// The persistent, warp-specialised TMA + wgmma pipeline's frame, written once for every Hopper kernel
// here (the gated and the streaming fused kernels, the paged decode kernel, the dense logits kernel):
//
//   pipeline::Shape        the CTA: kMathWarps math warps (4 a warpgroup) and kOtherWGs more warpgroups
//                          (the first holds the producer warp), the register split setmaxnreg makes, the
//                          tiles' bytes;
//   pipeline::Layout       shared memory from a 1024-byte aligned base: the Q ring, the K ring, the scale
//                          ring, the kernel's own region, its state, then the barriers (the rings'
//                          full/empty pairs, then the kernel's own). kSmemBytes is what a library exports
//                          (its *_smem_bytes);
//   pipeline::other_roles  the role split after the CTA's barrier (setmaxnreg down for the producer's
//                          warpgroup and any other, up for the math warpgroups);
//   pipeline::SpaceAgrees  the variant space's figures for the kernel's shared memory and its math warps'
//                          registers (runtime/*variant.py, rendered into the kernel) checked against
//                          Layout's and Shape's: a sum that drifts fails the build;
//   pipeline_host::setup   the host's once-per-device setup of a persistent kernel.
//
// (Not `pipe`: <unistd.h>'s pipe() is in the global namespace of every host compilation.)
//
// A kernel names its Shape and Layout, forms its barrier pointers from Layout::kBarrierOffset in the
// rings' order (full_q, empty_q, full_kv, empty_kv, then its own), and runs its roles: which work the
// producer claims and loads, what the math warpgroups make of a tile's products, and any role of its
// own (the gated kernel's selector warps).
//
// Every kernel on it compiles to the machine code it had when written out by hand (tools/compare_sass.py:
// SAME). That rules some forms out: the barrier pointers read from a struct (a "ring" object) or
// through accessor functions, and the roles passed to a common run() as lambdas, each changed how nvcc
// numbered and folded values, and ptxas scheduled whole kernels differently (experiment log,
// "2026-12-04: one skeleton, instruction for instruction").
#pragma once

namespace pipeline {

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

// Python decides which points of the variant space fit (shared memory, registers) before anything is
// compiled, so it keeps its own sums of the same layout; a kernel renders them into
// `static_assert(pipeline::SpaceAgrees<Shape, Layout, smem, registers>::value)`, and a point the space would
// admit or reject by a wrong figure does not build.
template <class S, class L, int kSpaceSmemBytes, int kSpaceMathRegisters>
struct SpaceAgrees {
    static_assert(L::kSmemBytes == kSpaceSmemBytes, "the variant space's shared-memory sum differs from pipeline::Layout's");
    static_assert(S::kMathRegisters == kSpaceMathRegisters, "the variant space's register split differs from pipeline::Shape's");
    static constexpr bool value = true;
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

}  // namespace pipeline

namespace pipeline_host {

// Once per device: the kernel's shared memory opted into and its registers checked
// (sm90_host::setup_persistent); *sms receives the SM count.
template <class S, class L, typename Kernel>
inline cudaError_t setup(Kernel kernel, int (&sms_by_device)[64], int* sms) {
    return sm90_host::setup_persistent(kernel, L::kSmemBytes, S::kLaunchRegisters, sms_by_device, sms);
}

}  // namespace pipeline_host
