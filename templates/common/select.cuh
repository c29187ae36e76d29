// Exact top-k selection over a candidate list in shared memory, by the whole CTA.
//
// Candidates are (score code, key) pairs; codes are order-preserving uint32 (prim::score_code), so
// the k-th largest code is found by four 8-bit radix passes over a 256-bin histogram. The top k are
// taken in one total order, code descending then key ascending (README.md, "Same answer every
// time"): every code above the k-th's, and of the codes equal to it the smallest keys, found by four
// more passes over those keys where the k-th's code is shared by more entries than the rank takes
// (kth_entries, Cut). So the set a list yields depends on its entries alone, not on the order they
// are laid in or met. The writers below put a row's keys anywhere in its answer (their slots are
// reserved by atomics); write_ascending then gives the answer its one order, ascending keys.
//
// Barrier discipline: call with every thread of the group (threads Sync::kFirstThread .. + kThreads-1,
// whole warps; `Sync` is its barrier: the whole CTA by default, or a named barrier when a producer warp
// runs apart or spare warps select beside the math warps), after a barrier that published the list;
// every function returns after a barrier, so the caller may reuse the list and the scratch at once.
#pragma once

namespace sel {

struct CtaSync {
    static constexpr int kFirstThread = 0;
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// This thread's index in the group that Sync synchronises (threadIdx.x read again at each call:
// prim::thread_index; hoisted out of the gated kernel's persistent loop, what derives from it spilled
// in the selector warps: 72 -> 40 bytes stored, experiment log, "2026-11-30: tail split").
template <typename Sync>
__device__ __forceinline__ int group_thread() { return prim::thread_index() - Sync::kFirstThread; }

// Scratch for selecting in kRows lists at once (one histogram each); Scratch is the one-list case.
template <int kRows>
struct RadixScratch {
    uint32_t hist[kRows][256];
    uint32_t prefix[kRows];     // the k-th code's bits found so far
    uint32_t remaining[kRows];  // its rank among the codes that share those bits
    int slot_counter[kRows];    // next output slot
    uint32_t equal[kRows];      // entries whose code is the k-th's (an exact select's last pass)
    uint32_t slack[kRows];      // codes past the rank a loose select may settle with (kth_largest_codes)
};
using Scratch = RadixScratch<1>;

// The candidate lists the multi-list functions below read, as objects: for_each(r, f) calls
// f(code, live) for every candidate of list r (live false for padding), by every thread of the group
// in rounds that keep whole warps together, so f may use warp votes (and only warp-level ones: warps
// may run different numbers of rounds). write_top_k_rows also needs the keys: for_each_keyed(r,
// min_code, f) calls f(make_uint2(code, key), live) the same way, the key read where code >= min_code.
// write_top_k_rows_binned also asks kPassesReadMemory: whether each pass reads the list from memory.

// One list, code_at(i), i < n, dealt to the group's threads in turn; key_at(i) its keys (for_each_keyed).
struct NoKeys {
    __device__ __forceinline__ uint32_t operator()(int) const { return 0u; }
};
template <int kThreads, typename CodeAt, typename KeyAt = NoKeys>
struct DealtList {
    CodeAt code_at;
    int n;
    KeyAt key_at = {};
    template <typename F>
    __device__ __forceinline__ void for_each(int, F f) const {
        const int lane = threadIdx.x & 31;
        for (int base = int(threadIdx.x) - lane; base < n; base += kThreads) {
            const int i = base + lane;
            f(i < n ? code_at(i) : 0u, i < n);
        }
    }
    template <typename F>
    __device__ __forceinline__ void for_each_keyed(int, uint32_t min_code, F f) const {
        const int lane = threadIdx.x & 31;
        for (int base = int(threadIdx.x) - lane; base < n; base += kThreads) {
            const int i = base + lane;
            const uint32_t c = i < n ? code_at(i) : 0u;
            f(make_uint2(c, i < n && c >= min_code ? key_at(i) : 0u), i < n);
        }
    }
};

// Lists kept as per-warp segments of (score bits, key) pairs in global memory (the writer stores the
// fp32 score as is; its code is made here, once per entry read), each written by one warp with no
// atomics (prim::warp_fill): list r's segment w is items[r * row_stride + w * kSegment + i],
// i < filled[r * kWarps + w] (capped at kSegment: a larger count means the segment overflowed).
// Warp w reads its own segment. load() brings each lane's first kCached codes of every list into
// registers with all the loads in flight at once, so a radix pass costs no memory round trip (the
// passes were L2-latency bound when each one read the slabs again); entries past 32 kCached in a
// segment are read again by every pass. for_each_keyed also hands f the keys, loading them, all at
// once, only for the cached entries whose code is at least `min_code` (the ones a write keeps).
template <int kWarps, int kRows, int kSegment, int kCached>
struct WarpSegments {
    static constexpr bool kPassesReadMemory = false;  // (past 32 kCached entries a segment they do)
    const uint2* items;
    int row_stride;
    int n[kRows];                     // this warp's entries in each list
    uint32_t code[kRows][kCached];    // code of entry 32 u + lane of this warp's segment of list r

    // Call with every thread of the group after a barrier that published `filled` ([kRows][kWarps],
    // shared memory).
    __device__ __forceinline__ void load(const int* filled) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
#pragma unroll
        for (int r = 0; r < kRows; ++r) n[r] = min(filled[r * kWarps + warp], kSegment);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const uint2* segment = items + size_t(r) * row_stride + warp * kSegment;
#pragma unroll
            for (int u = 0; u < kCached; ++u) code[r][u] = 32 * u + lane < n[r] ? code_of(segment[32 * u + lane].x) : 0u;
        }
    }
    template <typename F>
    __device__ __forceinline__ void for_each(int r, F f) const {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int u = 0; u < kCached; ++u)
            if (32 * u < n[r]) f(code[r][u], 32 * u + lane < n[r]);  // (warp-uniform test)
        for_each_uncached<false>(r, [&](uint2 c, bool live) { f(c.x, live); });
    }
    template <typename F>
    __device__ __forceinline__ void for_each_keyed(int r, uint32_t min_code, F f) const {
        const int lane = threadIdx.x & 31;
        const uint2* segment = my_segment(r);
        uint32_t key[kCached];
#pragma unroll
        for (int u = 0; u < kCached; ++u) {
            const int i = 32 * u + lane;
            key[u] = i < n[r] && code[r][u] >= min_code ? segment[i].y : 0u;
        }
#pragma unroll
        for (int u = 0; u < kCached; ++u)
            if (32 * u < n[r]) f(make_uint2(code[r][u], key[u]), 32 * u + lane < n[r]);
        for_each_uncached<true>(r, f);
    }

  private:
    static __device__ __forceinline__ uint32_t code_of(uint32_t score_bits) {
        return prim::score_code(__uint_as_float(score_bits));
    }
    __device__ __forceinline__ const uint2* my_segment(int r) const {
        return items + size_t(r) * row_stride + (threadIdx.x / 32) * kSegment;
    }
    // The entries past the cached ones, four loads in flight per lane (their keys too if kKeys).
    template <bool kKeys, typename F>
    __device__ __forceinline__ void for_each_uncached(int r, F f) const {
        constexpr int kBatch = 4;
        const int lane = threadIdx.x & 31;
        const uint2* segment = my_segment(r);
#pragma unroll 1  // (unrolled, it costs registers the warpgroups do not have)
        for (int base = 32 * kCached; base < n[r]; base += kBatch * 32) {
            uint2 c[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                const int i = base + u * 32 + lane;
                c[u] = make_uint2(i < n[r] ? code_of(segment[i].x) : 0u, kKeys && i < n[r] ? segment[i].y : 0u);
            }
#pragma unroll
            for (int u = 0; u < kBatch; ++u) f(c[u], base + u * 32 + lane < n[r]);
        }
    }
};

// The same per-warp segments read by a group of kReaders warps that did not write them (threads
// kFirstThread ..), `segments` of them a list (kWriters, or more: the gated kernel's split blocks lay
// the lists of several parts side by side): the readers take the segments in turn, kBatch loads of 32
// entries in flight a round (a cursor that carried a round's loads on into the next segment made the
// passes' loops half as long again: 204 -> 134 instructions a round of the histogram's). The turns
// run on from list to list (a block's rows' segments as one sequence), so that where kReaders does
// not divide `segments` (8 on 3 readers) no reader walks the extra segment of every list while the
// others wait at the pass's barrier. No codes are kept in registers and every pass reads the list
// again (from L2, ld.cg: other warps, or other CTAs, wrote it): the readers are the gated kernel's
// selector warps, which select one block's rows while the math warpgroups scan the next, with few
// registers and time to spare.
template <int kWriters, int kReaders, int kRows, int kSegment, int kBatch, int kFirstThread>
struct StripedSegments {
    static constexpr bool kPassesReadMemory = true;
    const uint2* items;
    int row_stride;
    const int* filled;  // [kRows][segments], shared memory, published before the readers start
    int segments = kWriters;

    template <typename F>
    __device__ __forceinline__ void for_each(int r, F f) const {
        walk<false>(r, [&](const uint2 (&c)[kBatch], const bool (&live)[kBatch], int u) { f(c[u].x, live[u]); });
    }
    template <typename F>
    __device__ __forceinline__ void for_each_keyed(int r, uint32_t, F f) const {
        walk<true>(r, [&](const uint2 (&c)[kBatch], const bool (&live)[kBatch], int u) { f(c[u], live[u]); });
    }
    // f(c, live) once a round of kBatch x 32 entries (c[u], live[u]: this lane's u-th; dead past the
    // segment's end), for callers that reserve output slots once a round.
    template <typename F>
    __device__ __forceinline__ void for_each_keyed_batch(int r, F f) const {
        walk<true>(r, [&](const uint2 (&c)[kBatch], const bool (&live)[kBatch], int u) {
            if (u == 0) f(c, live);
        });
    }

  private:
    template <bool kKeys, typename F>
    __device__ __forceinline__ void walk(int r, F f) const {
        const int tid = prim::thread_index(), lane = tid & 31, reader = (tid - kFirstThread) / 32;
#pragma unroll 1
        for (int w = (reader + kReaders - r * segments % kReaders) % kReaders; w < segments; w += kReaders) {
            const int n = min(filled[r * segments + w], kSegment);
            const uint2* entry = items + size_t(r) * row_stride + w * kSegment + lane;
#pragma unroll 1
            for (int base = 0; base < n; base += 32 * kBatch, entry += 32 * kBatch) {
                uint2 c[kBatch];
                bool live[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    live[u] = base + 32 * u + lane < n;
                    c[u].x = live[u] ? prim::score_code(__uint_as_float(__ldcg(&entry[32 * u].x))) : 0u;
                    c[u].y = kKeys && live[u] ? __ldcg(&entry[32 * u].y) : 0u;
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
                    if (base + 32 * u < n) f(c, live, u);  // (warp-uniform test)
            }
        }
    }
};

// For each list r of `lists` with rank[r] >= 1 (at most its length): kth[r] = its rank[r]-th largest
// code, take_equal[r] = how many codes equal to it belong to its top rank[r], and s.equal[r] how many
// entries have that code (exact selects). Lists with rank[r] == 0 are skipped (kth 0, take_equal
// all). One set of four passes serves every list: warp w scans the histograms of lists w, w +
// kThreads / 32, ...
// kSlackDivisor > 0 makes the select loose, for thresholds that need only be at or below the exact one
// (the gate's: lower keeps a few more candidates, never fewer): a list settles as soon as the bin of
// the pass that holds its rank[r]-th code (its top 8, 16 or 24 bits) holds at most rank[r] /
// kSlackDivisor codes past that one. kth[r] is then that bin's floor (take_equal all), which at most
// rank[r] (1 + 1 / kSlackDivisor) codes reach, and the passes stop once every list has settled. Spread
// scores settle after two passes, of the four; a large common offset needs all four.
template <int kThreads, int kRows, int kSlackDivisor = 0, typename Lists, typename Sync = CtaSync>
__device__ __forceinline__ void kth_largest_codes(const Lists& lists, const int (&rank)[kRows], RadixScratch<kRows>& s,
                                                  uint32_t (&kth)[kRows], uint32_t (&take_equal)[kRows], Sync sync = {}) {
    const int tid = group_thread<Sync>();
    const int lane = tid & 31, warp = tid / 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {  // (rank[tid] would put rank in local memory)
        if (tid == r) {
            s.prefix[r] = 0;
            s.remaining[r] = static_cast<uint32_t>(rank[r]);
            s.slack[r] = kSlackDivisor > 0 ? static_cast<uint32_t>(rank[r] / kSlackDivisor) : 0u;
        }
    }
#pragma unroll 1
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < kRows * 256; i += kThreads) (&s.hist[0][0])[i] = 0;
        sync();
        const uint32_t known_bits = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            if (rank[r] == 0 || (kSlackDivisor > 0 && s.remaining[r] == 0)) continue;  // (settled: loose only)
            const uint32_t prefix = s.prefix[r];
            lists.for_each(r, [&](uint32_t c, bool live) {
                const bool hit = live && ((c ^ prefix) & known_bits) == 0;
                prim::warp_histogram_add(s.hist[r], (c >> shift) & 255u, hit);
            });
        }
        sync();
        // Warp w scans list w's histogram (and w + kThreads / 32's, ...: the loop only where there are
        // more lists than warps: as a loop for one list per warp it slowed the dense top-k down).
        const auto scan = [&](int r) {
            if (s.remaining[r] == 0) return;  // lists with rank 0 have nothing to find
            // Lane l owns bins 255-8l down to 248-8l; a scan over lanes finds the bin holding rank
            // `remaining`, counted from the top.
            const uint32_t remaining = s.remaining[r];
            uint32_t counts[8];
            uint32_t lane_total = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                counts[j] = s.hist[r][255 - 8 * lane - j];
                lane_total += counts[j];
            }
            const uint32_t inclusive = prim::warp_inclusive_sum(lane_total);
            uint32_t above = inclusive - lane_total;
            __syncwarp();  // every lane has read s.remaining before the owner lane rewrites it
            if (above < remaining && remaining <= inclusive) {
                bool found = false;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if (!found && above + counts[j] >= remaining) {
                        found = true;
                        s.prefix[r] |= static_cast<uint32_t>(255 - 8 * lane - j) << shift;
                        // (remaining 0: settled, loose only; an exact select's stays at least 1)
                        const bool settle = kSlackDivisor > 0 && above + counts[j] - remaining <= s.slack[r];
                        s.remaining[r] = settle ? 0u : remaining - above;
                        s.equal[r] = counts[j];  // (at shift 0: the entries of the k-th's code)
                    }
                    if (!found) above += counts[j];
                }
            }
        };
        if constexpr (kRows <= kThreads / 32) {
            if (warp < kRows) scan(warp);
        } else {
            for (int r = warp; r < kRows; r += kThreads / 32) scan(r);
        }
        sync();
        if constexpr (kSlackDivisor > 0) {
            bool open = false;
#pragma unroll
            for (int r = 0; r < kRows; ++r) open |= s.remaining[r] != 0;
            if (!open) break;  // (every thread reads the same values: the barrier above published them)
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        kth[r] = rank[r] > 0 ? s.prefix[r] : 0u;
        take_equal[r] = rank[r] > 0 && s.remaining[r] > 0 ? s.remaining[r] : 0xFFFFFFFFu;
    }
    sync();  // the scratch may be reused at once
}

// Raises largest[r] (shared memory, zeroed before) to list r's largest code, for every list: complete
// after the group's next barrier.
template <int kRows, typename Lists>
__device__ __forceinline__ void largest_codes(const Lists& lists, uint32_t* largest) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        uint32_t m = 0;
        lists.for_each(r, [&](uint32_t c, bool live) { m = live ? max(m, c) : m; });
        m = __reduce_max_sync(0xFFFFFFFFu, m);
        if ((threadIdx.x & 31) == 0 && m > 0) atomicMax(&largest[r], m);
    }
}

// The k-th largest of code_at(0), ..., code_at(n - 1), 1 <= k <= n; *take_equal receives how many
// codes equal to it belong to the top k. code_at may read shared or global memory (four passes).
template <int kThreads, typename CodeAt, typename Sync = CtaSync>
__device__ uint32_t kth_largest_code(CodeAt code_at, int n, int k, Scratch& s, uint32_t* take_equal, Sync sync = {}) {
    const DealtList<kThreads, CodeAt> list{code_at, n};
    const int ranks[1] = {k};
    uint32_t kth[1], equal[1];
    kth_largest_codes<kThreads, 1>(list, ranks, s, kth, equal, sync);
    *take_equal = equal[0];
    return kth[0];
}

// ---- the tie-break: the k-th entry in (code descending, key ascending) order ----------------------

// A list's k-th entry in the contract's order: code descending, then key ascending. Its top k are
// exactly the entries at or above it (keeps): every code above `code`, and of the entries of that
// code those whose key is at most `key` (the smallest keys). Keys compare as the lists hold them
// (absolute or relative to a row's first key: within a list, one of the two).
struct Cut {
    uint32_t code;
    uint32_t key;
    __device__ __forceinline__ bool keeps(uint32_t c, uint32_t k) const { return c > code || (c == code && k <= key); }
};
constexpr Cut kKeepAll = {0u, 0xFFFFFFFFu};

// The entries of list r whose code is code[r], each as the code ~key (so the largest is the smallest
// key), the others dead: the second select of kth_entries.
template <typename Lists, int kRows>
struct KeysOfCode {
    const Lists& lists;
    const uint32_t (&code)[kRows];
    template <typename F>
    __device__ __forceinline__ void for_each(int r, F f) const {
        const uint32_t of = code[r];
        lists.for_each_keyed(r, of, [&](uint2 c, bool live) { f(~c.y, live && c.x == of); });
    }
};

// cut[r] = the rank[r]-th entry of list r (1 <= rank[r] <= its length; rank 0: kKeepAll, every entry
// kept). Four radix passes find the k-th code; where more entries share it than the rank takes (a tie
// straddles the k-th place), four more over those entries' keys find the key. The key passes run only
// then (random scores never tie there; a plateau of equal scores, or duplicate keys, do).
template <int kThreads, int kRows, typename Lists, typename Sync = CtaSync>
__device__ __forceinline__ void kth_entries(const Lists& lists, const int (&rank)[kRows], RadixScratch<kRows>& s,
                                            Cut (&cut)[kRows], Sync sync = {}) {
    uint32_t kth[kRows], take[kRows];
    kth_largest_codes<kThreads, kRows>(lists, rank, s, kth, take, sync);
    int key_rank[kRows];
    bool split = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        // (s.equal is read behind kth_largest_codes' last barrier, and written again only after the
        // next call's first barrier)
        key_rank[r] = rank[r] > 0 && take[r] < s.equal[r] ? int(take[r]) : 0;
        split |= key_rank[r] > 0;
        cut[r] = rank[r] > 0 ? Cut{kth[r], 0xFFFFFFFFu} : kKeepAll;
    }
    if (!split) return;  // (uniform)
    uint32_t key_code[kRows], unused[kRows];
    kth_largest_codes<kThreads, kRows>(KeysOfCode<Lists, kRows>{lists, kth}, key_rank, s, key_code, unused, sync);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        if (key_rank[r] > 0) cut[r].key = ~key_code[r];
}

// Calls emit(slot, code, key) once for each of the top min(k, n) candidates of codes/keys[0, n) (in
// the order of Cut), with distinct slots in [0, min(k, n)) (which candidate gets which slot depends
// on the warps' timing). Candidates are staged in registers behind a barrier before any emit, so
// emit may overwrite the list itself (in-place compaction). Returns the k-th entry's code when n > k
// (0 otherwise).
template <int kThreads, int kCapacity, typename Emit, typename Sync = CtaSync>
__device__ uint32_t select_top_k(const uint32_t* codes, const int* keys, int n, int k, Scratch& s, Emit emit,
                                 Sync sync = {}) {
    static_assert(kCapacity % kThreads == 0, "candidate capacity must be a multiple of the CTA size");
    constexpr int kPerThread = kCapacity / kThreads;
    const int tid = group_thread<Sync>();
    Cut cut = kKeepAll;  // with n <= k every candidate is kept
    if (n > k) {
        const auto code_at = [&](int i) { return codes[i]; };
        const auto key_at = [&](int i) { return uint32_t(keys[i]); };
        const DealtList<kThreads, decltype(code_at), decltype(key_at)> list{code_at, n, key_at};
        const int ranks[1] = {k};
        Cut cuts[1];
        kth_entries<kThreads, 1>(list, ranks, s, cuts, sync);
        cut = cuts[0];
    }

    uint32_t my_codes[kPerThread];
    int my_keys[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid + j * kThreads;
        my_codes[j] = i < n ? codes[i] : 0u;
        my_keys[j] = i < n ? keys[i] : 0;
    }
    if (tid == 0) s.slot_counter[0] = 0;
    sync();

#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid + j * kThreads;
        const bool keep = i < n && cut.keeps(my_codes[j], uint32_t(my_keys[j]));
        const int slot = prim::warp_append(&s.slot_counter[0], keep);
        if (keep) emit(slot, my_codes[j], my_keys[j]);
    }
    sync();
    return n > k ? cut.code : 0u;
}

// Streaming top-k compaction: keeps the top k of codes/keys[0, n) (n > k) in their first k places and
// returns the admission threshold for what follows: just above the k-th code. An entry of that code
// met later has a larger key than every kept one (the streaming kernels meet keys in ascending
// order), so it ranks below the k-th entry and need not enter.
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

// ---- answers in ascending key order, through bitmaps ----------------------------------------------
// A row's answer is put in order through a bitmap in shared memory: each key sets its bit, then the
// words are read in order, 128 bits a lane (uint4: 16-byte aligned, a multiple of four words), each
// warp a contiguous run of them placed by one count per warp: a few instructions per 4,096 keys of
// the row's span, most of it zero words. The keys go to the output as placed, or to a staging row in
// shared memory where the caller has one spare, then to the output in 16-byte stores.

// Writes the keys of a word's set bits (key0 + bit) at dst[at ..] (none past k); returns the next place.
__device__ __forceinline__ int emit_bits(uint32_t word, int key0, int at, int* dst, int k) {
    for (; word != 0; word &= word - 1, ++at)
        if (at < k) dst[at] = key0 + (__ffs(word) - 1);
    return at;
}

// For each row r < live of kRows bitmaps (row r's `words` words at bits + r * stride, bit i: key lo +
// i): its keys in ascending order to dst + r * k from place `at` on (none past k), clearing the words
// it read, so the bitmaps are all zero after; returns row 0's count. totals: kRows * kThreads / 32
// words of shared memory. Every thread of the group calls it; two barriers for all the rows, the
// last at its end. (The rows in a loop, not unrolled: per-row registers made the selector warps
// spill more.)
template <int kThreads, int kRows, typename Sync>
__device__ __forceinline__ int place_bitmaps(uint32_t* bits, int stride, int words, int live, int lo, int at, int* dst, int k,
                                             uint32_t* totals, Sync sync) {
    constexpr int kWarps = kThreads / 32;
    const int tid = group_thread<Sync>(), lane = tid & 31, warp = tid / 32;
    const int quads = words / 4, per_warp = (quads + kWarps - 1) / kWarps;
    const int first = min(warp * per_warp, quads), last = min(first + per_warp, quads);
#pragma unroll 1
    for (int r = 0; r < min(live, kRows); ++r) {
        const uint4* row = reinterpret_cast<const uint4*>(bits + r * stride);
        uint32_t count = 0;
        for (int i = first + lane; i < last; i += 32) {
            const uint4 v = row[i];
            count += __popc(v.x) + __popc(v.y) + __popc(v.z) + __popc(v.w);
        }
        count = __reduce_add_sync(0xFFFFFFFFu, count);
        if (lane == 0) totals[r * kWarps + warp] = count;
    }
    sync();
    int first_row_count = 0;
#pragma unroll 1
    for (int r = 0; r < min(live, kRows); ++r) {
        int pos = at, all = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const int t = int(totals[r * kWarps + w]);
            pos += w < warp ? t : 0;
            all += t;
        }
        first_row_count = r == 0 ? all : first_row_count;
        uint4* row = reinterpret_cast<uint4*>(bits + r * stride);
        int* const dst_row = dst + r * k;
        for (int base = first; base < last; base += 32) {  // (the same rounds in every lane of the warp)
            const int i = base + lane;
            const uint4 v = i < last ? row[i] : make_uint4(0u, 0u, 0u, 0u);
            const uint32_t c = __popc(v.x) + __popc(v.y) + __popc(v.z) + __popc(v.w);
            const uint32_t inclusive = prim::warp_inclusive_sum(c);
            if (c != 0) {
                row[i] = make_uint4(0u, 0u, 0u, 0u);
                const int key0 = lo + 128 * i;
                int p = pos + int(inclusive - c);
                p = emit_bits(v.x, key0, p, dst_row, k);
                p = emit_bits(v.y, key0 + 32, p, dst_row, k);
                p = emit_bits(v.z, key0 + 64, p, dst_row, k);
                emit_bits(v.w, key0 + 96, p, dst_row, k);
            }
            pos += int(__shfl_sync(0xFFFFFFFFu, inclusive, 31));
        }
    }
    sync();  // (totals, the bitmaps and dst are read at once)
    return first_row_count;
}

// out[i] = stage[i] for i < count, -1 up to k (16-byte stores where out is aligned; stage is). No barrier.
template <int kThreads, typename Sync>
__device__ __forceinline__ void copy_answer(const int* stage, int count, int* out, int k) {
    const int tid = group_thread<Sync>();
    if ((reinterpret_cast<uintptr_t>(out) & 15) == 0 && k % 4 == 0) {
        for (int i = tid; i < k / 4; i += kThreads) {
            int4 v = reinterpret_cast<const int4*>(stage)[i];
            v.x = 4 * i < count ? v.x : -1;
            v.y = 4 * i + 1 < count ? v.y : -1;
            v.z = 4 * i + 2 < count ? v.z : -1;
            v.w = 4 * i + 3 < count ? v.w : -1;
            reinterpret_cast<int4*>(out)[i] = v;
        }
    } else {
        for (int i = tid; i < k; i += kThreads) out[i] = i < count ? stage[i] : -1;
    }
}

// Zeroes words [0, words) (a multiple of four, 16-byte aligned); complete after the group's next barrier.
template <int kThreads, typename Sync>
__device__ __forceinline__ void zero_words(uint32_t* words_at, int words) {
    uint4* p = reinterpret_cast<uint4*>(words_at);
    for (int i = group_thread<Sync>(); i < words / 4; i += kThreads) p[i] = make_uint4(0u, 0u, 0u, 0u);
}

// Words a bitmap of `keys` bits takes: whole uint4s.
__device__ __forceinline__ int bitmap_words(int keys) { return (max(keys, 0) + 127) / 128 * 4; }

// Writes the keys key_at(i), i < n, of a row's answer to out[0, ..) in ascending order, then -1 up to
// k, and returns how many it wrote. The keys are distinct and in [0, span) (one outside, or a
// repeat, is dropped: only inputs outside the contract make them). `bits` ([words], any contents,
// 16-byte aligned) is the bitmap they are sorted through, a window of 32 * words keys at a time (words
// rounded down to whole uint4s): a row that spans more takes several, reading its keys again for
// each. `stage`: k ints of shared memory (16-byte aligned) the answer is put together in, or nullptr
// (written to out as placed). `totals`: kThreads / 32 words of shared memory. Every thread of the
// group calls it; it returns after a barrier. The order is that of the keys alone, whatever order the
// writers above left them in.
template <int kThreads, typename KeyAt, typename Sync = CtaSync>
__device__ int write_ascending(KeyAt key_at, int n, int span, uint32_t* bits, int words, uint32_t* totals, int* stage, int* out,
                               int k, Sync sync = {}) {
    words = words / 4 * 4;
    zero_words<kThreads, Sync>(bits, min(words, bitmap_words(span)));  // (each window's read clears what it set)
    sync();
    int at = 0;
    for (int lo = 0; lo < span; lo += 32 * words) {
        const uint32_t window = uint32_t(min(32 * words, span - lo));  // keys
#pragma unroll 4
        for (int i = group_thread<Sync>(); i < n; i += kThreads) {
            const uint32_t x = uint32_t(key_at(i)) - uint32_t(lo);
            if (x < window) atomicOr(&bits[x / 32], 1u << (x % 32));
        }
        sync();
        at += place_bitmaps<kThreads, 1>(bits, 0, bitmap_words(int(window)), 1, lo, at, stage ? stage : out, k, totals, sync);
    }
    if (stage) {
        copy_answer<kThreads, Sync>(stage, min(at, k), out, k);
        sync();
    } else {
        for (int i = min(at, k) + group_thread<Sync>(); i < k; i += kThreads) out[i] = -1;
    }
    return at;
}

// A row's answer from its n candidates codes/keys[0, n) in shared memory: the top min(n, k) as key -
// key_base (each below `span`, the row's visible keys) in ascending order at out_row, then -1. The
// list is compacted in place (its first min(n, k) keys are then the answer's) and its codes are
// overwritten: they are the bitmap write_ascending sorts through.
template <int kThreads, int kCapacity, typename Sync = CtaSync>
__device__ void write_top_k(uint32_t* codes, int* keys, int n, int k, Scratch& s, int* out_row, int key_base, int span,
                            Sync sync = {}) {
    if (n > k) compact_to_top_k<kThreads, kCapacity>(codes, keys, n, k, s, sync);
    write_ascending<kThreads>([&](int i) { return keys[i] - key_base; }, min(n, k), span, codes, kCapacity, &s.hist[0][0],
                              nullptr, out_row, k, sync);
}

// The answers of kRows rows at once from candidate lists that are not overwritten (WarpSegments,
// loaded): list r of `lists` holds n[r] candidates; its top k go to out + r * k as key -
// key_base[r], in any order, then -1 up to k. Rows r >= live_rows are not written.
template <int kThreads, int kRows, typename Lists, typename Sync = CtaSync>
__device__ __forceinline__ void write_top_k_rows(const Lists& lists, const int (&n)[kRows], int k, int live_rows,
                                                 const int (&key_base)[kRows], RadixScratch<kRows>& s, int* out,
                                                 Sync sync = {}) {
    int rank[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rank[r] = n[r] > k ? k : 0;  // rank 0: every candidate is kept
    Cut cut[kRows];
    kth_entries<kThreads, kRows>(lists, rank, s, cut, sync);
    const int tid = group_thread<Sync>();
    if (tid < kRows) s.slot_counter[tid] = 0;
    sync();
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r >= live_rows) continue;
        lists.for_each_keyed(r, cut[r].code, [&](uint2 c, bool live) {
            const bool keep = live && cut[r].keeps(c.x, c.y);
            const int slot = prim::warp_append(&s.slot_counter[r], keep);
            if (keep) out[r * k + slot] = int(c.y) - key_base[r];
        });
        for (int i = min(n[r], k) + tid; i < k; i += kThreads) out[r * k + i] = -1;
    }
    sync();
}

}  // namespace sel

namespace sel {

// ---- the answers of kRows rows in two passes over their candidates, for lists with a known floor ----
// write_top_k_rows makes five passes over the candidates (four radix passes, then the write), with a
// shared-memory atomic (a round trip) for every 32 candidates written. Here:
//  1. A histogram of each candidate's distance above its row's floor (every candidate's code is at
//     least the floor: the gate's threshold; 0 for an ungated row, whose floor is then its least code,
//     found by one more pass), on a log scale: 32 sub-bins for each power of two of the distance. The
//     bins are as fine relative to the k-th code's distance as anywhere, so one high outlier (a peaked
//     row) does not crowd the rest into one bin as linear bins over [floor, max] would. The distance
//     is the fp32 difference of the scores, not of their codes: codes are not linear in the score
//     across zero, and a gate just below zero with its k-th score above put a row's whole top in one
//     bin. The bins span 33 powers of two
//     around the distance of a `ceiling`: the row's largest code, or its sample's, which may lie far
//     below the k-th where scores trend along the keys (so the span reaches 2^17 times above it).
//  2. Every candidate in a bin above the one holding the k-th code is taken, and those in that
//     boundary bin are gathered in shared memory (tens of them in practice).
//  3. A gathered candidate's rank among the row's gathered ones (by code, then key: Cut's order, so
//     the gathering order does not matter) says whether it is taken; one warp per row, no barrier
//     between.
//  4. The answers in ascending key order. Where every row spans at most kDirectKeys keys (the
//     histograms' words, free after step 1, as one bitmap a row), steps 2 and 3 set the taken keys'
//     bits and one scan of the bitmaps writes every row (place_bitmaps). Longer rows are written
//     to `picks` first, at slots that each warp reserves (counted first in registers, one atomic a
//     row; lists whose every pass reads memory, Lists::kPassesReadMemory, reserve a round of loads
//     at a time instead, for one pass over memory, not two), then each row is put in order through
//     the histograms' words, a window at a time (write_ascending), each answer put together in the
//     gather arrays, then written in 16-byte stores.
// A boundary bin too full to gather (heavy ties: every candidate's code equal, say) sends the whole
// call back to write_top_k_rows (into picks, then in order), which rewrites every answer
// (kRadixFallback), or returns false with nothing written to out, for the caller to have the rows
// redone (the selector warps: inlined, the radix path made them spill at 56 registers). Otherwise
// out + r * k holds row r's top k as key - key_base[r] (each below span[r]), ascending, then -1, for
// r < live_rows, and it returns true.
constexpr int kDistanceBins = 33 * 32;

// The bins of a row: bin = (the fp32 distance's exponent and top five mantissa bits) - base, clamped
// to [0, kDistanceBins): a monotone map, as the selection needs. Bin 0 holds the floor (distance 0) and
// anything below 2^-15 of the ceiling's distance; the top bin anything from 2^17 times it up.
struct DistanceBins {
    uint32_t floor;
    float floor_score;
    int base;

    __device__ __forceinline__ DistanceBins(uint32_t floor_code, uint32_t ceiling_code)
        : floor(floor_code), floor_score(prim::score_of_code(floor_code)) {
        const float span = prim::score_of_code(ceiling_code) - floor_score;
        base = (int((__float_as_uint(span) >> 23) & 255u) - 15) * 32;
    }
    // Branch-free. A code at or below the floor (below: a negative NaN, which every gate admits) goes
    // to bin 0 (fmaxf drops the NaN): it can only be the boundary bin's least, and is ordered exactly
    // there. A positive NaN (a code above +inf's) goes on top.
    __device__ __forceinline__ int operator()(uint32_t code) const {
        const float distance = fmaxf(prim::score_of_code(code) - floor_score, 0.f);
        const int bin = min(max(int(__float_as_uint(distance) >> 18) - base, 0), kDistanceBins - 1);
        return code > 0xFF800000u ? kDistanceBins - 1 : bin;
    }
};

// A row whose span fits its histogram's words as a bitmap is put in order without picks.
constexpr int kDirectKeys = kDistanceBins * 32;

template <int kRows, int kGather>
struct BinnedScratch {
    // The three arrays first and side by side (and 16-byte aligned where the scratch is: bitmaps are
    // read a uint4 at a time). In step 4 hist[r] is row r's bitmap (or all of hist one bitmap, for
    // rows written to picks) and the gather arrays the staging row of an answer (stage()).
    uint32_t hist[kRows][kDistanceBins];
    uint32_t gcode[kRows][kGather];
    uint32_t gkey[kRows][kGather];
    static constexpr int kStageInts = 2 * kRows * kGather;  // at least top_k (the kernels assert it)
    __device__ __forceinline__ int* stage() { return reinterpret_cast<int*>(&gcode[0][0]); }
    uint32_t floor[kRows];
    uint32_t ceiling[kRows];
    int boundary[kRows];  // the bin holding the k-th code (-1: every candidate is kept)
    int above[kRows];     // candidates in the bins above it
    int written[kRows];   // slots reserved for them so far
    int gathered[kRows];  // candidates met in the boundary bin (kept in gcode/gkey up to kGather)
    int key_base[kRows];
    int count[kRows];
    int span[kRows];      // keys the row sees: its answers' keys are below it
};

// Step 4 for rows written to picks (each row's min(count, k) keys, relative, any order): each row in
// ascending order to out + r * k, then -1, through the histograms' words as one bitmap (windows of
// kRows * kDirectKeys keys) and the gather arrays as the staging row.
template <int kThreads, int kRows, int kGather, typename Sync>
__device__ __forceinline__ void write_picks_ascending(BinnedScratch<kRows, kGather>& b, RadixScratch<kRows>& s, const int* picks,
                                                      int live_rows, int k, int* out, Sync sync) {
#pragma unroll 1
    for (int r = 0; r < live_rows; ++r) {
        const int* const row = picks + r * k;
        write_ascending<kThreads>([&](int i) { return __ldcg(row + i); }, min(b.count[r], k), b.span[r], &b.hist[0][0],
                                  kRows * kDistanceBins, &s.hist[0][0], b.stage(), out + r * k, k, sync);
    }
}

template <int kThreads, int kRows, int kGather, bool kRadixFallback, typename Lists, typename Sync = CtaSync>
__device__ __forceinline__ bool write_top_k_rows_binned(const Lists& lists, const int (&n)[kRows], const uint32_t (&floor)[kRows],
                                                        const uint32_t (&ceiling)[kRows], int k, int live_rows, const int (&key_base)[kRows],
                                                        const int (&span)[kRows], BinnedScratch<kRows, kGather>& b,
                                                        RadixScratch<kRows>& s, int* picks, int* out, Sync sync = {}) {
    const int tid = group_thread<Sync>();
    const int lane = tid & 31, warp = tid / 32;
    for (int i = tid; i < kRows * kDistanceBins; i += kThreads) (&b.hist[0][0])[i] = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {  // (n[tid] would put n in local memory)
        if (tid == r) {
            b.floor[r] = floor[r] > 0 ? floor[r] : 0xFFFFFFFFu;
            b.ceiling[r] = floor[r] > 0 ? ceiling[r] : 0u;
            b.boundary[r] = n[r] <= k ? -1 : 0;
            b.written[r] = 0;
            b.gathered[r] = 0;
            b.key_base[r] = key_base[r];
            b.count[r] = n[r];
            b.span[r] = span[r];
        }
    }
    sync();
    // From here on the arguments are read back from the scratch: kept in registers through the passes,
    // they made the selector warps (56 registers) spill.
    // The least and the largest code of each ungated row that must select.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (b.boundary[r] < 0 || b.floor[r] != 0xFFFFFFFFu) continue;
        uint32_t least = 0xFFFFFFFFu, largest = 0u;
        lists.for_each(r, [&](uint32_t c, bool live) {
            least = live ? min(least, c) : least;
            largest = live ? max(largest, c) : largest;
        });
        least = __reduce_min_sync(0xFFFFFFFFu, least);
        largest = __reduce_max_sync(0xFFFFFFFFu, largest);
        if (lane == 0) {
            atomicMin(&b.floor[r], least);
            atomicMax(&b.ceiling[r], largest);
        }
    }
    sync();
    // 1. The histograms.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (b.boundary[r] < 0) continue;
        const DistanceBins bin_of(b.floor[r], b.ceiling[r]);
        lists.for_each(r, [&](uint32_t c, bool live) {
            if (live) atomicAdd(&b.hist[r][bin_of(c)], 1u);
        });
    }
    sync();
    // The boundary bin: lane l of the row's warp sums bins 1055 - 33 l down to 1023 - 33 l, a scan over
    // the lanes finds the one holding rank k from the top, and that lane walks its bins.
    for (int r = warp; r < kRows; r += kThreads / 32) {
        if (b.boundary[r] < 0) continue;
        __syncwarp();  // every lane has read it before the owner lane rewrites it
        uint32_t lane_total = 0;
        for (int j = 0; j < 33; ++j) lane_total += b.hist[r][kDistanceBins - 1 - 33 * lane - j];
        const uint32_t inclusive = prim::warp_inclusive_sum(lane_total);
        uint32_t above = inclusive - lane_total;
        if (above < uint32_t(k) && uint32_t(k) <= inclusive) {
            for (int j = 0; j < 33; ++j) {
                const int bin = kDistanceBins - 1 - 33 * lane - j;
                const uint32_t c = b.hist[r][bin];
                if (above + c >= uint32_t(k)) {
                    b.boundary[r] = bin;
                    b.above[r] = int(above);
                    break;
                }
                above += c;
            }
        }
    }
    sync();
    // Step 4's way (uniform: read behind the barrier): bitmaps in the histograms' words, zeroed now.
    bool direct = true;
#pragma unroll
    for (int r = 0; r < kRows; ++r) direct &= r >= live_rows || b.span[r] <= kDirectKeys;
    if (direct) {
        zero_words<kThreads, Sync>(&b.hist[0][0], kRows * kDistanceBins);
        sync();
    }
    // Row r takes the key of relative index `key`: its bit, or at a pick slot.
    const auto take = [&](int r, int slot, int key) {
        if (!direct) picks[r * k + slot] = key;
        else if (uint32_t(key) < uint32_t(kDirectKeys)) atomicOr(&b.hist[r][key / 32], 1u << (key % 32));
    };
    // 2. Write what is above the boundary bin, gather what is in it.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r >= live_rows) continue;
        const int boundary = b.boundary[r];
        const DistanceBins bins(b.floor[r], b.ceiling[r]);
        const auto bin_of = [&](uint32_t c) { return boundary < 0 ? 0 : bins(c); };
        int slot = 0, edge = 0;  // this warp's next slot and gathering place (counted first, or reserved a round at a time)
        if constexpr (!Lists::kPassesReadMemory) {
            int keeps = 0, edges = 0;
            lists.for_each(r, [&](uint32_t c, bool live) {
                const int bin = bin_of(c);
                keeps += __popc(__ballot_sync(0xFFFFFFFFu, live && bin > boundary));
                edges += __popc(__ballot_sync(0xFFFFFFFFu, live && bin == boundary));
            });
            if (lane == 0) {
                slot = atomicAdd(&b.written[r], keeps);
                edge = atomicAdd(&b.gathered[r], edges);
            }
            slot = __shfl_sync(0xFFFFFFFFu, slot, 0);
            edge = __shfl_sync(0xFFFFFFFFu, edge, 0);
        }
        const int key_base_r = b.key_base[r];
        const auto write = [&](uint2 c, uint32_t keeps, uint32_t edges) {  // at this warp's slot / edge
            const uint32_t me = 1u << lane;
            const int before = __popc(keeps & prim::lanemask_lt()), edge_before = __popc(edges & prim::lanemask_lt());
            if (keeps & me) take(r, slot + before, int(c.y) - key_base_r);
            if ((edges & me) && edge + edge_before < kGather) {
                b.gcode[r][edge + edge_before] = c.x;
                b.gkey[r][edge + edge_before] = c.y;
            }
            slot += __popc(keeps);
            edge += __popc(edges);
        };
        if constexpr (Lists::kPassesReadMemory) {
            // Slots reserved as met, one shared atomic a batch of rounds: one pass over memory, not two.
            lists.for_each_keyed_batch(r, [&](const auto& c, const auto& live) {
                constexpr int kBatch = sizeof(live) / sizeof(live[0]);
                uint32_t keeps[kBatch], edges[kBatch];
                int kept = 0, edged = 0;
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int bin = bin_of(c[u].x);
                    keeps[u] = __ballot_sync(0xFFFFFFFFu, live[u] && bin > boundary);
                    edges[u] = __ballot_sync(0xFFFFFFFFu, live[u] && bin == boundary);
                    kept += __popc(keeps[u]);
                    edged += __popc(edges[u]);
                }
                slot = prim::warp_reserve(&b.written[r], kept);
                edge = edged > 0 ? prim::warp_reserve(&b.gathered[r], edged) : 0;  // (few: the boundary bin's)
#pragma unroll
                for (int u = 0; u < kBatch; ++u) write(c[u], keeps[u], edges[u]);
            });
        } else {
            lists.for_each_keyed(r, boundary < 0 ? 0u : bins.floor, [&](uint2 c, bool live) {
                const int bin = bin_of(c.x);
                write(c, __ballot_sync(0xFFFFFFFFu, live && bin > boundary), __ballot_sync(0xFFFFFFFFu, live && bin == boundary));
            });
        }
    }
    sync();
    bool overflow = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) overflow |= r < live_rows && b.gathered[r] > kGather;
    if (overflow && !kRadixFallback) return false;  // (uniform: read after the barrier)
    if (overflow) {
        int count[kRows], base[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            count[r] = b.count[r];
            base[r] = b.key_base[r];
        }
        write_top_k_rows<kThreads, kRows>(lists, count, k, live_rows, base, s, picks, sync);
        write_picks_ascending<kThreads, kRows>(b, s, picks, live_rows, k, out, sync);
        return true;
    }
    // 3. The boundary bin's best (k - above) by rank among its gathered candidates.
    for (int r = warp; r < live_rows; r += kThreads / 32) {
        if (b.boundary[r] < 0) continue;
        const int gathered = b.gathered[r], above = b.above[r];
        for (int i = lane; i < gathered; i += 32) {
            const uint32_t c = b.gcode[r][i], key = b.gkey[r][i];
            int rank = 0;
            for (int j = 0; j < gathered; ++j) {
                const uint32_t other = b.gcode[r][j];
                rank += other > c || (other == c && b.gkey[r][j] < key);
            }
            if (above + rank < k) take(r, above + rank, int(key) - b.key_base[r]);
        }
    }
    sync();
    // 4. The answers in ascending order.
    if (!direct) {
        write_picks_ascending<kThreads, kRows>(b, s, picks, live_rows, k, out, sync);
        return true;
    }
    // (Every row at once, straight to out: two barriers for the block. Staged a row at a time in
    // shared memory, two barriers a row, was no faster: experiment log, "2026-12-02: same answer
    // every time".)
    int longest = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) longest = r < live_rows ? max(longest, b.span[r]) : longest;
    place_bitmaps<kThreads, kRows>(&b.hist[0][0], kDistanceBins, bitmap_words(longest), live_rows, 0, 0, out, k,
                                   &s.hist[0][0], sync);
#pragma unroll 1
    for (int r = 0; r < live_rows; ++r)  // (each row took min(count, k) keys)
        for (int i = min(b.count[r], k) + tid; i < k; i += kThreads) out[r * k + i] = -1;
    return true;
}

}  // namespace sel
