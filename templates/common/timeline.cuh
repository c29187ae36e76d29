// Phase timestamps of the gated kernel for tools/timeline.py (one thread of each role marks: `leader`):
// where a CTA's time goes, block by block (the sample, its gate, the scan, the hand-over; the selector
// warps' busy and idle spans), which ablations can only infer by difference. Compiled in only with
// -DFUSED_MQA_TOPK_TIMELINE, which the tool passes; otherwise the marks are no-ops (`(void)(leader)`)
// and the kernel is unchanged.
#ifdef FUSED_MQA_TOPK_TIMELINE
namespace timeline {
constexpr int kCtas = 256;    // CTAs recorded (blockIdx.x below this)
constexpr int kEvents = 128;  // work items a CTA records (its math warps' and its selector warps' each)
constexpr int kMarks = 24;    // marks per event: 0..11 the math warps', 12..19 the selector warps'
// SM clock (clock64) at each mark; the CTA's first and last global-timer readings (ns) at [cta][0][22]
// and [cta][0][23], so that CTAs can be put on one time axis.
__device__ unsigned long long marks[kCtas][kEvents][kMarks];

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void mark(int event, int m) {
    if (blockIdx.x < kCtas && event >= 0 && event < kEvents) marks[blockIdx.x][event][m] = clock64();
}
__device__ __forceinline__ void global_mark(int m) {
    if (blockIdx.x < kCtas) marks[blockIdx.x][0][m] = global_ns();
}
}  // namespace timeline
#define TIMELINE_MARK(leader, event, m) \
    do {                                \
        if (leader) timeline::mark(event, m); \
    } while (0)
#define TIMELINE_GLOBAL(leader, m) \
    do {                           \
        if (leader) timeline::global_mark(m); \
    } while (0)
// Exported: the marks' size, and a copy of them to host memory (a cudaError_t).
#define TIMELINE_EXPORTS                                                                                 \
    size_t mqa_topk_timeline_bytes() { return sizeof(timeline::marks); }                                 \
    int mqa_topk_timeline_read(void* host) {                                                             \
        return static_cast<int>(cudaMemcpyFromSymbol(host, timeline::marks, sizeof(timeline::marks))); \
    }                                                                                                    \
    int mqa_topk_timeline_clear() {                                                                      \
        void* p = nullptr;                                                                               \
        cudaError_t e = cudaGetSymbolAddress(&p, timeline::marks);                                       \
        return static_cast<int>(e != cudaSuccess ? e : cudaMemset(p, 0, sizeof(timeline::marks)));      \
    }
#else
#define TIMELINE_MARK(leader, event, m) (void)(leader)
#define TIMELINE_GLOBAL(leader, m) (void)(leader)
#define TIMELINE_EXPORTS
#endif
