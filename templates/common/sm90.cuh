// Hopper (sm_90a) primitives: mbarriers, TMA tile loads, wgmma operand descriptors and fences,
// register reconfiguration. Each is a thin wrapper over one PTX instruction (or a wait loop).
// Pairs with common/wgmma.cuh.j2, which renders the wgmma instruction for the variant's N.
#pragma once
#include <cstdint>
#include <cuda.h>  // CUtensorMap

namespace sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A float from shared memory through its shared-window address (an LDS, where a generic pointer into
// a runtime-aligned buffer would compile to a generic LD).
__device__ __forceinline__ float ld_shared_f32(const void* p) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(smem_addr(p)) : "memory");
    return v;
}

// ---- mbarriers ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
}
// Makes initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Blocks until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_AGAIN:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_AGAIN;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

// ---- TMA ---------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Loads the box at (x, y) of a 2-D tensor map into shared memory; completion is counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            smem_addr(smem_dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(x), "r"(y)
        : "memory");
}
// Loads the query tile of rows row0 .. row0 + kRows - 1 through sm90_host::query_map (a 4-D view of
// q whose box puts the columns in sm90::LaneTotals order); completion is counted on `bar`.
__device__ __forceinline__ void tma_load_query_tile(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int row0) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %3, %4, %3}], [%2];\n" ::"r"(
            smem_addr(smem_dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(0), "r"(row0)
        : "memory");
}

// ---- wgmma -------------------------------------------------------------------------------------
// Shared-memory matrix descriptors for a K-major operand whose rows are 128 bytes (128 fp8 dims)
// stored with the 128-byte swizzle TMA applies: 8-row core groups 1024 bytes apart. The tile must
// start 1024-byte aligned; a k-step of 32 fp8 advances the start address by 32 bytes.
// The descriptor's high word is the same for every such tile (kKmajorSw128High); its low word is the
// start address field, in 16-byte units, which byte offsets into a ring of tiles move by offset / 16
// (shared addresses are below 256 KiB, so the 14-bit field never carries). Callers compute a ring's
// start once and add offsets: recomputed from the pointer before every product, the descriptors cost
// uniform-datapath instructions in the scan loop (not what limits it; experiment log, "2026-11-30:
// loose sample select").
constexpr uint64_t kKmajorSw128High = ((uint64_t(1024) >> 4) << 32)  // 1024 bytes between 8-row groups
                                      | (1ull << 62);                // layout type 1: 128-byte swizzle
__device__ __forceinline__ uint32_t kmajor_sw128_start(const void* smem_ptr) { return (smem_addr(smem_ptr) & 0x3FFFFu) >> 4; }

// Orders this thread's generic-proxy writes to shared memory (st.shared, completed cp.async) before
// later async-proxy reads of it (wgmma operands, TMA stores).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across wgmma fences.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// A fresh, undefined value for r, at no cost: ends its old value's live range where the register's
// next reader (an accumulating product) ignores what it holds.
__device__ __forceinline__ void discard_operand(float& r) { asm volatile("" : "=f"(r)); }
// (The same for fp16 accumulator pairs.)
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void discard_operand(uint32_t& r) { asm volatile("" : "=r"(r)); }

// ---- the TMA ring: full/empty barrier pairs, one stage per slot ---------------------------------
// full[i] completes when the producer's loads into slot i have landed; empty[i] when all `consumers`
// threads have finished with it.
__device__ __forceinline__ void init_ring(uint64_t* full, uint64_t* empty, int stages, int consumers) {
    for (int i = 0; i < stages; ++i) {
        mbar_init(&full[i], 1);
        mbar_init(&empty[i], consumers);
    }
}

// Once per CTA, by one thread before a __syncthreads: the Q ring's and the K ring's barriers (each
// slot released by `consumers` threads), made visible to the TMA unit, and the three tensor maps
// prefetched.
__device__ __forceinline__ void init_pipeline(uint64_t* full_q, uint64_t* empty_q, int q_stages, uint64_t* full_kv,
                                              uint64_t* empty_kv, int kv_stages, int consumers, const CUtensorMap* q_map,
                                              const CUtensorMap* k_map, const CUtensorMap* scale_map) {
    init_ring(full_q, empty_q, q_stages, consumers);
    init_ring(full_kv, empty_kv, kv_stages, consumers);
    fence_mbar_init();
    tma_prefetch_descriptor(q_map);
    tma_prefetch_descriptor(k_map);
    tma_prefetch_descriptor(scale_map);
}

// Producer side: waits for slot `stage` (its use number `use` counted from 0) to be free, then loads
// `keys_in_box` keys from first_key on (and their scales) into it.
__device__ __forceinline__ void load_key_tile(uint64_t* full, uint64_t* empty, int stage, int use, void* keys_dst,
                                              void* scales_dst, const CUtensorMap* k_map, const CUtensorMap* scale_map,
                                              int first_key, int keys_in_box) {
    mbar_wait(&empty[stage], (use & 1) ^ 1);
    mbar_arrive_expect_tx(&full[stage], keys_in_box * (128 + 4));
    tma_load_2d(keys_dst, k_map, &full[stage], 0, first_key);
    tma_load_2d(scales_dst, scale_map, &full[stage], first_key, 0);
}

// ---- shared memory -------------------------------------------------------------------------------
// The dynamic shared memory from its first 1024-byte aligned shared address (what TMA's 128-byte
// swizzle and the wgmma descriptors need). Pointer arithmetic on the __shared__ array, never an
// integer cast, so the compiler knows every access through the result is to shared memory: LDS, STS
// and ATOMS with 32-bit addresses, not generic loads and GPU-scope generic atomics.
__device__ __forceinline__ uint8_t* aligned_shared_base(uint8_t* smem_raw) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
    return smem_raw + ((1024u - (addr & 1023u)) & 1023u);
}

// ---- registers, barriers, warps ----------------------------------------------------------------
// setmaxnreg moves registers between warpgroups inside the CTA's launch allocation: threads x the
// per-thread count ptxas gives under __launch_bounds__(threads, 1), i.e. 65536 / threads rounded
// down to 8, but at most 240: with one math warpgroup (256 threads) ptxas allocates only the largest
// setmaxnreg count, 240, and a launcher expecting 248 refused every launch. Asking for more than the
// other warpgroups free would block forever, so the math warpgroups' count is derived from that pool
// (and launchers check the compiled count: sm90_host.cuh): all it can take (at most 240) with the
// other warpgroups (the producer's; the gated kernel may add a selector warpgroup) at
// kMinProducerRegisters (at 32 the TMA address math spilled), or at `producer_min` where their warps
// do more than wait (the gated kernel's selector warps). They also get what the math count's rounding
// to 8 leaves over, up to 56 (or producer_min, if larger).
constexpr int kMinProducerRegisters = 40;
constexpr int launch_registers(int threads) { return (65536 / threads) / 8 * 8 > 240 ? 240 : (65536 / threads) / 8 * 8; }
constexpr int math_registers(int threads, int math_threads, int producer_min = kMinProducerRegisters) {
    const int count = (launch_registers(threads) * threads - (threads - math_threads) * producer_min) / math_threads / 8 * 8;
    return count > 240 ? 240 : count;
}
constexpr int producer_registers(int threads, int math_threads, int producer_min = kMinProducerRegisters) {
    const int cap = producer_min > 56 ? producer_min : 56;
    const int count = (launch_registers(threads) * threads - math_threads * math_registers(threads, math_threads, producer_min)) /
                      (threads - math_threads) / 8 * 8;
    return count > cap ? cap : count;
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters)); }
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters)); }

// This thread's warpgroup, broadcast from lane 0: the compiler then knows it is warp-uniform and
// keeps what derives from it (the products' shared-memory descriptors) in uniform registers, instead
// of moving it there before every wgmma.
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xFFFFFFFFu, int(threadIdx.x) / 128, 0); }

// A barrier among `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is
// __syncthreads): lets the math warpgroups synchronise without the producer warp.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace sm90
