"""What a paged-kernel change costs: two builds of the paged decode defaults, timed in one call (GPU).

For each decode step (BATCHxCONTEXT at each --heads, --top-k and --next-n; random_step's data, every
request's blocks shuffled, block size 64) the default variant (runtime/paged_variant.py) built twice
as .ablate/<variant>/<BUILD>.so (`tools/ablate.py build VARIANT --as BUILD`, at the commit before
the change and after it). With --dense, the dense kernels' paged build the runtime takes for the step
instead (runtime.paged.dense_paged_build: its logits and top-k kernels, the step's layout given, as
dispatch runs them with a layout), and --parts does not apply. A build named LABEL:FIELD=VALUE[,...]
is LABEL's build of the step's variant with those fields changed (.ablate/<that variant>/LABEL.so):
`new:rows=2` a dense build of two rows a block, `new:columns=128,warps=8` a paged variant whose
products take 128 columns with two math warpgroups, to time a point of the space beside the default.
Both builds run the step at the
runtime's split (--parts: at each of these splits instead), and their answers must be the same bytes at every split (both are exact with
one tie-break and one order; the scan's arithmetic is theirs alike, except a build whose products take
other columns: it adds a row's heads in another order, and its bytes may differ where scores nearly
tie at the k-th place); the last build's is also checked
by the two-sided rule on up to 64 rows. Each build is captured once in a CUDA graph and its replays timed in rounds that alternate the builds (a single
pair can be off by a few percent), the median of each build's rounds kept. A line per step, and
JSON lines to --log.

    python3 tools/compare_paged_builds.py --shape 1x8192 --shape 64x131072 --heads 64 --top-k 2048 \\
        --next-n 1 --next-n 2 --build base --build new [--rounds 3] [--log cost.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", required=True, metavar="BATCHxCONTEXT")
    p.add_argument("--heads", type=int, action="append", default=[])
    p.add_argument("--top-k", dest="top_k", type=int, action="append", default=[])
    p.add_argument("--next-n", dest="next_n", type=int, action="append", default=[])
    p.add_argument("--build", action="append", required=True,
                   help="build names, .ablate/<variant>/<BUILD>.so (--dense: LABEL:rows=R, see above)")
    p.add_argument("--out", default=".ablate")
    p.add_argument("--parts", type=int, action="append", default=[],
                   help="time each step at these parts per request (default: the runtime's split, parts_for)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--distribution", default="positive")
    p.add_argument("--log")
    p.add_argument("--dense", action="store_true", help="time the dense kernels' paged build (see above)")
    args = p.parse_args()

    import torch

    from generator.paged_bench import random_step
    from generator.paged_workloads import PagedWorkload, verify_paged
    from generator.timing import geometric_mean, median_ms
    from runtime.dense import run_dense_paged
    from runtime.loader import PagedLibrary
    from runtime.paged import decode_layout, dense_paged_build, parts_for
    from runtime.paged_variant import default_paged_variant

    log = open(args.log, "w") if args.log else None  # noqa: SIM115 -- closed below
    ratios = []
    for shape in args.shape:
        batch, context = (int(x) for x in shape.split("x"))
        for heads in args.heads or [64]:
            for next_n in args.next_n or [1]:
                step = random_step(batch, context, next_n, heads, 512, distribution=args.distribution)
                q, cache, weights, lens, table, _ = step
                capacity = table.shape[1] * cache.shape[1]
                for top_k in args.top_k or [2048]:
                    if args.dense:
                        variant = dense_paged_build(q.device, heads, top_k, capacity, cache.shape[1], next_n)
                        libs = [dense_build(variant, b, args.out) for b in args.build]
                        layout = decode_layout(lens, table, next_n, cache.shape[1], cache.shape[0])
                        flat_q = q.reshape(batch * next_n, heads, 128)
                    else:
                        variant = default_paged_variant(heads, top_k, next_n, cache.shape[1])
                        libs = [PagedLibrary(*built(variant, b, args.out)) for b in args.build]
                    first = None  # the first split's answer: every split's must be the same bytes
                    for parts in [0] if args.dense else args.parts or [parts_for(batch, capacity, top_k, q.device)]:
                        outs, graphs = [], []
                        for lib in libs:
                            out = torch.full((batch * next_n, top_k), -7, dtype=torch.int32, device="cuda")
                            if args.dense:  # (the logits are allocated in the call, as the runtime's are)
                                ws = None
                                launch = lambda lib=lib, out=out: run_dense_paged(  # noqa: E731
                                    lib.variant, flat_q, cache, weights, layout, top_k, capacity, out=out, lib=lib)
                            else:
                                ws = torch.empty(lib.workspace_bytes(batch, parts), dtype=torch.uint8, device="cuda")
                                launch = lambda lib=lib, out=out, ws=ws: lib.launch(  # noqa: E731
                                    q.data_ptr(), cache.data_ptr(), weights.data_ptr(), lens.data_ptr(), table.data_ptr(),
                                    out.data_ptr(), ws.data_ptr(), batch, table.shape[1], cache.shape[0], parts,
                                    torch.cuda.current_stream().cuda_stream)
                            launch()
                            torch.cuda.synchronize()
                            outs.append(out.clone())
                            graph = torch.cuda.CUDAGraph()
                            with torch.cuda.graph(graph):
                                launch()
                            graphs.append((graph, out, ws))
                        first = outs[0] if first is None else first
                        same = all(torch.equal(first, o) for o in outs)
                        wl = PagedWorkload(args.distribution, q, cache, weights, lens, table, top_k)
                        rows = torch.randperm(batch * next_n, device="cpu")[:64].tolist()
                        report = verify_paged(outs[-1], wl, rows=rows)
                        times = {b: [] for b in args.build}
                        for _ in range(args.rounds):
                            for b, (graph, _, _) in zip(args.build, graphs):
                                times[b].append(median_ms(graph.replay, warmup=3, reps=20, hide_launch=True))
                        ms = {b: statistics.median(t) for b, t in times.items()}
                        ratio = ms[args.build[-1]] / ms[args.build[0]]
                        ratios.append(ratio)
                        row = {"batch": batch, "context": context, "heads": heads, "top_k": top_k, "next_n": next_n,
                               "variant": variant.name, "variants": {b: lib.variant.name for b, lib in zip(args.build, libs)},
                               "parts": parts, "ms": ms, "rounds": times,
                               "same_bytes": same, "verified": report.ok, "ratio": ratio}
                        split = "dense path" if args.dense else f"parts {parts:>3}"
                        print(f"{batch:>4} x {context:>8} h{heads} k{top_k} n{next_n} {split}: "
                              + "  ".join(f"{b} {ms[b] * 1e3:8.1f} us" for b in args.build)
                              + f"  {args.build[-1]}/{args.build[0]} {ratio:.3f}  same bytes {same}  verified {report.ok}",
                              flush=True)
                        if log:
                            print(json.dumps(row), file=log, flush=True)
                        if not (same and report.ok):
                            print(report.summary(), flush=True)
                        del graphs, outs
                    del first
                del step, q, cache, weights, lens, table
                torch.cuda.empty_cache()
    print(f"{args.build[-1]}/{args.build[0]}: geometric mean {geometric_mean(ratios):.3f} over {len(ratios)} steps, "
          f"best {min(ratios):.3f}, worst {max(ratios):.3f}")
    if log:
        log.close()
    return 0


def built(variant, build: str, folder: str):
    """(variant, library path) of `build` (LABEL, or LABEL:FIELD=VALUE[,FIELD=VALUE...]: `variant` with
    those integer fields changed) for a step whose variant is `variant`."""
    from dataclasses import replace

    label, _, changes = build.partition(":")
    fields = dict(change.split("=") for change in changes.split(",")) if changes else {}
    variant = replace(variant, **{name: int(value) for name, value in fields.items()})
    # (a paged point says what is wrong with it; a dense one's build says so: pipeline::SpaceAgrees)
    reason = variant.invalid_reason() if hasattr(variant, "invalid_reason") else None
    if reason:
        raise SystemExit(f"{build}: {variant.name}: {reason}")
    return variant, str(Path(folder) / variant.name / f"{label}.so")


def dense_build(variant, build: str, folder: str):
    """The library of `build` (built's forms) for a step whose dense paged build is `variant`."""
    from runtime.loader import DenseLibrary

    return DenseLibrary(*built(variant, build, folder))


if __name__ == "__main__":
    sys.exit(main())
