"""How much of a fused call's time is not the kernel? One shape, timed four ways on the GPU.

`bench` and `ablate` time each call alone: CUDA events around launch_variant, synchronised between
calls. That counts whatever the GPU waits for while Python prepares the launch (the workspace, the
tensor maps, the kernel launches), which matters for short chunks. This tool separates it:

    alone        events around one call, synchronised before it (what bench reports)
    queued       20 calls back to back, events around all, divided by 20 (the host runs ahead
                 unless it is slower than the GPU)
    graph        the same 20 calls captured in a CUDA graph and replayed (GPU time only)
    order        the block order alone (the library's, as a launch makes it), graph-replayed

and the dense path's call alone and graph-replayed, for comparison (its pieces launch two kernels
each).

With --entry it times the public entries instead, per shape: fused_mqa_topk (AUTO) with
validate=False and True, the same as a server calls it (validate=False, max_visible_keys, the answer
into a buffer made once: out=), and dense_mqa_topk with validate=False, each

    alone        events around one call, synchronised before it: the end-to-end latency
    host         wall time of the Python call itself (perf_counter, GPU idle before it)
    graph        GPU time only: 20 calls captured and replayed (validate=False)

then the host time of one CUDA allocation of the dense path's logits for that chunk (what each call
of it makes), and a cProfile of AUTO's host side as served (the functions that cost most, per call).

With --paged it times the decode entry instead, per step (BATCHxCONTEXT at --next-n; random_step's
data, block size 64): paged_mqa_topk (AUTO, validate=False) as called and with the step's layout
given, each alone / host / graph as above, and a cProfile of the call with the layout given.

With --python it needs no GPU: the Python part of an AUTO call that takes our dense kernels, as a
server calls it (validate=False, max_visible_keys, out=), on CPU tensors with what needs the GPU
stubbed (the library call launches nothing, the stream handle is 0, the dense variant is the one
the chunk's longest row picks on Hopper): the host work a change to the entry, its checks, the
dispatch or the planning moves, timed (the median of 20 rounds of 1,000 calls) and profiled. The
library's own host work and the launches are not in it, and the logits' allocation is the host's
(a large one costs there what CUDA's caching allocator does not).

    python3 tools/overhead.py VARIANT --shape 4096x32768 [--shape ...]     # on the GPU
    python3 tools/overhead.py --entry --heads 32 --top-k 2048 --shape 1x8192 [--shape ...]
    python3 tools/overhead.py --paged --heads 64 --top-k 2048 --next-n 1 --shape 1x8192 [--shape ...]
    python3 tools/overhead.py --python --heads 64 --top-k 2048 --shape 64x8192 [--shape ...]   # no GPU
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CALLS = 20


def per_call_ms(fn, graph: bool = False) -> float:
    """Median over 5 timings of CALLS calls of fn, each timing divided by CALLS."""
    import torch

    from generator.timing import median_ms

    if not graph:
        return median_ms(lambda: [fn() for _ in range(CALLS)], warmup=1, reps=5) / CALLS
    fn()  # (loads, allocations and the workspace's first use outside the capture)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CALLS):
            fn()
    return median_ms(g.replay, warmup=1, reps=5) / CALLS


def host_ms(fn, reps: int = 50) -> float:
    """Median wall time of the Python call fn() alone, the GPU idle before each (synchronised)."""
    import statistics
    import time

    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def print_profile(fn, calls: int = 200) -> None:
    """The host functions that cost most over `calls` calls of fn (cProfile, by own time)."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    print("\n".join("    " + line for line in text.getvalue().splitlines() if line.strip()), flush=True)


def time_calls(calls: dict) -> None:
    """Each call alone, its host time and (validate=False) its graph-replayed time, a line each."""
    from generator.timing import median_ms

    for name, fn in calls.items():
        alone = median_ms(fn, warmup=5, reps=50)
        host = host_ms(fn)
        try:
            graph = f"{per_call_ms(fn, graph=True) * 1e3:.1f} us" if "validate=False" in name else "-"
        except RuntimeError as e:
            graph = f"not capturable ({str(e).splitlines()[0]})"
        print(f"  {name:28s} alone {alone * 1e3:7.1f} us, host {host * 1e3:7.1f} us, graph {graph}", flush=True)


def paged_costs(shapes: list[str], heads: int, top_k: int, next_n: int) -> int:
    from generator.paged_bench import random_step
    from runtime.paged import decode_layout, explain_paged, paged_mqa_topk

    for spec in shapes:
        batch, context = (int(x) for x in spec.split("x"))
        q, cache, weights, lens, table = random_step(batch, context, next_n, heads, top_k)[:5]
        args = (q, cache, weights, lens, table, top_k)
        layout = decode_layout(lens, table, next_n, cache.shape[1], cache.shape[0])
        print(f"h{heads} k{top_k} {batch}x{context} next_n {next_n}: {explain_paged(*args).path} as called, "
              f"{explain_paged(*args, layout=layout).path} with the layout given", flush=True)
        time_calls({"AUTO validate=False": lambda: paged_mqa_topk(*args, validate=False),
                    "layout validate=False": lambda: paged_mqa_topk(*args, validate=False, layout=layout)})
        print_profile(lambda: paged_mqa_topk(*args, validate=False, layout=layout))
    return 0


def entry_costs(shapes: list[str], heads: int, top_k: int) -> int:
    import torch

    from generator.workloads import make_workload
    from runtime import dense_mqa_topk, explain, fused_mqa_topk
    from runtime.dense import logits_bytes

    for spec in shapes:
        rows, keys = (int(x) for x in spec.split("x"))
        wl = make_workload("random", rows, keys, heads, top_k, seed=1, device="cuda")
        args = wl.args()
        out = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
        served = lambda: fused_mqa_topk(*args, validate=False, max_visible_keys=keys, out=out)  # noqa: E731
        print(f"h{heads} k{top_k} {rows}x{keys}: {explain(*args).path} ({explain(*args).why})", flush=True)
        time_calls({"AUTO validate=False": lambda: fused_mqa_topk(*args, validate=False),
                    "AUTO validate=True": lambda: fused_mqa_topk(*args),
                    "AUTO served, validate=False": served,
                    "dense validate=False": lambda: dense_mqa_topk(*args, validate=False)})
        nbytes = logits_bytes(rows, keys, keys)
        allocation = host_ms(lambda: torch.empty(nbytes // 4, dtype=torch.float32, device="cuda"))
        print(f"  the dense path's logits ({nbytes / 2**20:.1f} MiB), allocated: host {allocation * 1e3:.1f} us",
              flush=True)
        print_profile(served)
    return 0


def python_costs(shapes: list[str], heads: int, top_k: int) -> int:
    import contextlib
    import statistics
    import time
    from unittest import mock

    import torch

    from generator.workloads import make_workload
    from runtime import dense, fused, fused_mqa_topk
    from runtime.dense_kernels import hopper_dense_variant

    class Library:  # (in place of a DenseLibrary: its run launches nothing, and counts)
        calls = 0

        def __init__(self, variant):
            self.variant = variant

        def run(self, *args):
            Library.calls += 1
            return 0

    with mock.patch.object(fused, "choose_variant", lambda problem: None), \
            mock.patch.object(dense, "dense_variant_for", lambda device, *chunk: hopper_dense_variant(*chunk)), \
            mock.patch.object(dense, "load_or_warn", lambda variant, fallback: Library(variant)), \
            mock.patch.object(dense, "launch_on", lambda device: (contextlib.nullcontext(), 0)):
        for spec in shapes:
            rows, keys = (int(x) for x in spec.split("x"))
            args = make_workload("random", rows, keys, heads, top_k, seed=1).args()
            out = torch.empty((rows, top_k), dtype=torch.int32)
            call = lambda: fused_mqa_topk(*args, validate=False, max_visible_keys=keys, out=out)  # noqa: E731
            rounds = []
            for _ in range(21):
                t0 = time.perf_counter()
                for _ in range(1000):
                    call()
                rounds.append((time.perf_counter() - t0) * 1e3)
            if Library.calls < 21000:  # (what the stubs stand in for moved: this would time another path)
                raise RuntimeError(f"{spec}: the call did not reach the dense kernels' library; update the stubs")
            Library.calls = 0
            print(f"h{heads} k{top_k} {rows}x{keys}: the entry's Python, the dense kernels' call stubbed: "
                  f"{statistics.median(rounds[1:]):.1f} us a call", flush=True)
            print_profile(call, calls=2000)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant", nargs="?")
    p.add_argument("--shape", action="append", default=[], metavar="MxN")
    p.add_argument("--entry", action="store_true", help="time the public entries, not one variant's launch")
    p.add_argument("--paged", action="store_true", help="time the decode entry (paged_mqa_topk) on decode steps")
    p.add_argument("--python", action="store_true",
                   help="no GPU: the Python part of an AUTO call taking the dense kernels, the GPU's part stubbed")
    p.add_argument("--next-n", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--top-k", type=int, default=2048)
    args = p.parse_args()
    if args.entry:
        return entry_costs(args.shape or ["1x8192"], args.heads, args.top_k)
    if args.python:
        return python_costs(args.shape or ["64x8192"], args.heads, args.top_k)
    if args.paged:
        return paged_costs(args.shape or ["1x8192"], args.heads, args.top_k, args.next_n)
    if not args.variant:
        p.error("give a VARIANT, or --entry, or --paged")

    import torch

    from generator.timing import median_ms
    from generator.workloads import make_workload
    from runtime.build import spec_from_name
    from runtime.dense import dense_mqa_topk
    from runtime.fused import launch_variant
    from runtime.loader import load

    variant = spec_from_name(args.variant)
    for spec in args.shape or ["4096x32768"]:
        rows, keys = (int(x) for x in spec.split("x"))
        wl = make_workload("random", rows, keys, variant.heads, variant.top_k, seed=1, device="cuda")
        out = torch.empty((rows, variant.top_k), dtype=torch.int32, device="cuda")
        call = lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke,  # noqa: E731
                                      variant.top_k, out=out)
        alone = median_ms(call, warmup=2, reps=15)
        queued = per_call_ms(call)
        graph = per_call_ms(call, graph=True)
        lib = load(variant)
        scratch = torch.empty(8 * rows + 256, dtype=torch.uint8, device="cuda")
        order = per_call_ms(lambda: lib.block_order(wl.ks.data_ptr(), wl.ke.data_ptr(), rows, keys, scratch.data_ptr(),
                                                    torch.cuda.current_stream().cuda_stream), graph=True)
        print(f"{variant.name} {rows}x{keys}: alone {alone:.3f} ms, queued {queued:.3f}, graph {graph:.3f}, "
              f"block order {order * 1e3:.1f} us; not the kernels: {alone - graph:.3f} ms "
              f"({(alone - graph) / alone:.1%} of the call alone)", flush=True)
        dense = lambda: dense_mqa_topk(*wl.args(), validate=False)  # noqa: E731
        dense_alone = median_ms(dense, warmup=2, reps=15)
        try:
            dense_graph = f"{per_call_ms(dense, graph=True):.3f}"
        except RuntimeError as e:  # (a path that cannot be captured says why)
            dense_graph = f"not capturable ({str(e).splitlines()[0]})"
        print(f"  dense path: alone {dense_alone:.3f} ms, graph {dense_graph}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
