// Exact top-k selection over a candidate list in shared memory, by the whole CTA.
//
// Candidates are (score code, key) pairs; codes are order-preserving uint32 (prim::score_code), so
// the k-th largest code is found by four 8-bit radix passes over a 256-bin histogram, and the
// top k are every code above it plus as many codes equal to it as the rank needs (which of several
// equal boundary keys is kept is arbitrary, as the contract allows).
//
// Barrier discipline: call with every thread of the group (threads 0 .. kThreads-1; `Sync` is its
// barrier: the whole CTA by default, or a named barrier when a producer warp runs apart), after a
// barrier that published the list; every function returns after a barrier, so the caller may reuse
// the list and the scratch at once.
#pragma once

namespace sel {

struct CtaSync {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

struct Scratch {
    uint32_t hist[256];
    uint32_t prefix;     // the k-th code's bits found so far
    uint32_t remaining;  // its rank among the codes that share those bits
    int slot_counter;    // next output slot
    int equal_taken;     // codes equal to the k-th code kept so far
};

// The k-th largest of code_at(0), ..., code_at(n - 1), 1 <= k <= n; *take_equal receives how many
// codes equal to it belong to the top k. code_at may read shared or global memory (four passes).
template <int kThreads, typename CodeAt, typename Sync = CtaSync>
__device__ uint32_t kth_largest_code(CodeAt code_at, int n, int k, Scratch& s, uint32_t* take_equal, Sync sync = {}) {
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    uint32_t prefix = 0;
    uint32_t remaining = static_cast<uint32_t>(k);
#pragma unroll 1
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kThreads) s.hist[i] = 0;
        sync();
        const uint32_t known_bits = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
        for (int i = tid; i < n; i += kThreads) {
            const uint32_t c = code_at(i);
            if (((c ^ prefix) & known_bits) == 0) atomicAdd(&s.hist[(c >> shift) & 255u], 1u);
        }
        sync();
        if (tid < 32) {
            // Lane l owns bins 255-8l down to 248-8l; a scan over lanes finds the bin holding rank
            // `remaining`, counted from the top.
            uint32_t counts[8];
            uint32_t lane_total = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                counts[j] = s.hist[255 - 8 * lane - j];
                lane_total += counts[j];
            }
            uint32_t inclusive = lane_total;
#pragma unroll
            for (int offset = 1; offset < 32; offset <<= 1) {
                const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
                if (lane >= offset) inclusive += v;
            }
            uint32_t above = inclusive - lane_total;
            if (above < remaining && remaining <= inclusive) {
                bool found = false;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if (!found && above + counts[j] >= remaining) {
                        found = true;
                        s.prefix = prefix | (static_cast<uint32_t>(255 - 8 * lane - j) << shift);
                        s.remaining = remaining - above;
                    }
                    if (!found) above += counts[j];
                }
            }
        }
        sync();
        prefix = s.prefix;
        remaining = s.remaining;
    }
    *take_equal = remaining;
    return prefix;
}

// Calls emit(slot, code, key) once for each of the top min(k, n) candidates of codes/keys[0, n),
// with distinct slots in [0, min(k, n)). Candidates are staged in registers behind a barrier before
// any emit, so emit may overwrite the list itself (in-place compaction). Returns the k-th largest
// code when n > k (0 otherwise).
template <int kThreads, int kCapacity, typename Emit, typename Sync = CtaSync>
__device__ uint32_t select_top_k(const uint32_t* codes, const int* keys, int n, int k, Scratch& s, Emit emit,
                                 Sync sync = {}) {
    static_assert(kCapacity % kThreads == 0, "candidate capacity must be a multiple of the CTA size");
    constexpr int kPerThread = kCapacity / kThreads;
    const int tid = threadIdx.x;
    uint32_t kth = 0;               // with n <= k every candidate is kept
    uint32_t take_equal = 0xFFFFFFFFu;
    if (n > k) kth = kth_largest_code<kThreads>([&](int i) { return codes[i]; }, n, k, s, &take_equal, sync);

    uint32_t my_codes[kPerThread];
    int my_keys[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid + j * kThreads;
        my_codes[j] = i < n ? codes[i] : 0u;
        my_keys[j] = i < n ? keys[i] : 0;
    }
    if (tid == 0) {
        s.slot_counter = 0;
        s.equal_taken = 0;
    }
    sync();

#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid + j * kThreads;
        const bool live = i < n;
        // Codes equal to the k-th: admit the first take_equal of them.
        const bool equal = live && my_codes[j] == kth;
        const int rank = prim::warp_append(&s.equal_taken, equal);
        const bool keep = (live && my_codes[j] > kth) || (equal && static_cast<uint32_t>(rank) < take_equal);
        const int slot = prim::warp_append(&s.slot_counter, keep);
        if (keep) emit(slot, my_codes[j], my_keys[j]);
    }
    sync();
    return kth;
}

// Streaming top-k compaction: keeps the top k of codes/keys[0, n) (n > k) in their first k places and
// returns the admission threshold for what follows: just above the k-th code (codes equal to it can
// only tie with what is kept, so they need not enter again).
template <int kThreads, int kCapacity, typename Sync = CtaSync>
__device__ uint32_t compact_to_top_k(uint32_t* codes, int* keys, int n, int k, Scratch& s, Sync sync = {}) {
    const uint32_t kth = select_top_k<kThreads, kCapacity>(
        codes, keys, n, k, s,
        [&](int slot, uint32_t code, int key) {
            codes[slot] = code;
            keys[slot] = key;
        },
        sync);
    return kth == 0xFFFFFFFFu ? kth : kth + 1;
}

// A row's answer: the top k of its n candidates as key - key_base in out_row[0, min(n, k)), then -1.
template <int kThreads, int kCapacity, typename Sync = CtaSync>
__device__ void write_top_k(const uint32_t* codes, const int* keys, int n, int k, Scratch& s, int* out_row,
                            int key_base, Sync sync = {}) {
    select_top_k<kThreads, kCapacity>(codes, keys, n, k, s, [&](int slot, uint32_t, int key) { out_row[slot] = key - key_base; },
                                      sync);
    for (int i = min(n, k) + int(threadIdx.x); i < k; i += kThreads) out_row[i] = -1;
}

}  // namespace sel
