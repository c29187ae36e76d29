"""A decode step's kernels one by one: each kernel's GPU time and the gaps between them, from the
profiler's kernel records of graph replays (GPU).

Runs the dense paged path with the step's layout given (runtime.paged_mqa_topk(variant="dense"), as
the decode table's dense_planned_ms times it) and, with --serving, the serving path built as
CONTRIBUTING.md says (DeepGEMM's paged logits kernel and vLLM's decode top-k, through
.serving-ref/side_by_side.py's ServingStep): which kernel of a step loses to which. Each step is
captured once in a CUDA graph and replayed; the figures are medians over --reps replays, in us.

    python tools/decode_kernels.py --shape 1x32768 --shape 64x8192 --heads 64 --top-k 2048 \\
        [--next-n 1] [--serving .serving-ref/side_by_side.py] [--log kernels.jsonl]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def kernel_times(fn, reps: int) -> dict:
    """fn() captured in a CUDA graph: its kernels' names and median times, the gaps between them and the
    span from the first's start to the last's end, over `reps` replays."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            graph.replay()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    per = len(events) // reps
    runs = [events[r * per:(r + 1) * per] for r in range(reps)]
    med = statistics.median
    return {"kernels": [[runs[0][i].name, round(med(run[i].time_range.elapsed_us() for run in runs), 2)] for i in range(per)],
            "gaps": [round(med(run[i + 1].time_range.start - run[i].time_range.end for run in runs), 2) for i in range(per - 1)],
            "span": round(med(run[-1].time_range.end - run[0].time_range.start for run in runs), 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", required=True, metavar="BATCHxCONTEXT")
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--top-k", dest="top_k", type=int, default=2048)
    p.add_argument("--next-n", dest="next_n", type=int, action="append", default=[])
    p.add_argument("--serving", type=Path, help="the serving reference's side_by_side.py (CONTRIBUTING.md)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--log")
    args = p.parse_args()

    import torch

    from generator.paged_bench import random_step
    from runtime import paged_mqa_topk
    from runtime.paged import decode_layout

    serving = None
    if args.serving:
        spec = importlib.util.spec_from_file_location("side_by_side", args.serving)
        serving = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(serving)
        lib = serving.load_library()
        workspace = torch.zeros(lib.sr_topk_workspace_bytes(), dtype=torch.uint8, device="cuda")
    log = open(args.log, "w") if args.log else None  # noqa: SIM115 -- closed below
    for shape in args.shape:
        batch, context = (int(x) for x in shape.split("x"))
        for next_n in args.next_n or [1]:
            made = random_step(batch, context, next_n, args.heads, args.top_k)
            step = (*made[:5], args.top_k)
            layout = decode_layout(made[3], made[4], next_n, made[1].shape[1], made[1].shape[0])
            sides = {"ours": lambda: paged_mqa_topk(*step, validate=False, variant="dense", layout=layout)}
            if serving:
                theirs = serving.ServingStep(lib, step, workspace)
                theirs.prepare()
                sides["serving"] = theirs
            row = {"batch": batch, "context": context, "next_n": next_n, "heads": args.heads, "top_k": args.top_k}
            for side, fn in sides.items():
                row[side] = times = kernel_times(fn, args.reps)
                print(f"{batch}x{context} n{next_n} H{args.heads} k{args.top_k} {side}: span {times['span']:.1f} us; "
                      + "; ".join(f"{name[:48]} {us:.1f}" for name, us in times["kernels"]) + f"; gaps {times['gaps']}",
                      flush=True)
            if log:
                print(json.dumps(row), file=log, flush=True)
            del made, step, layout, sides
            torch.cuda.empty_cache()
    if log:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
