"""A decode step served by a prefill kernel: the gated (or streaming) fused kernel's paged build run over
the step's decode_layout, where each request's next_n rows see its own keys, timed beside what
decode dispatch runs today (GPU).

runtime.decode_layout lays a decode step out as a chunk the prefill kernels' paged builds read, and
our dense kernels serve most decode steps that way. The fused prefill kernels' paged builds take the
same layout (runtime.paged_prefill.launch_paged_prefill): a row block of a request's next_n rows
reads the request's keys once, the sampled gate keeps the candidates, and a launch of fewer row
blocks than SMs splits the blocks' keys over the SMs (the tail's parts). Whether that beats the
dense path on decode steps was never measured; the 64-row prefill buckets of the shipped table (the
gated kernel 1.4-2.6x the dense path's time at 8K-128K keys) suggest not at small steps.

Each step (random_step's positive-weight data, block size 64) is timed graph-replayed, with the step's
layout made once outside the timed call: automatic dispatch (the decode table's choice), our dense
path forced, and each candidate variant's paged build. Every candidate's answer is verified on its
first and last rows by the two-sided rule; the floor is the step's cache bytes over the copy rate of
the same run.

    python tools/decode_by_prefill.py --step 64x131072 --step 256x32768 --next-n 1 --next-n 2 \\
        [--heads 64] [--top-k 2048] [--variant NAME ...] [--log decode-by-prefill.jsonl]

Without --variant the candidates are the shipped table's choice for a 16,384-row chunk of the
step's context (the long-chunk shape) and that shape with each valid rows-per-block (1, 2, 4).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def candidates(heads: int, top_k: int, context: int, table: Path | None) -> list:
    """The variants tried on a step of `context` tokens: `table`'s choice for a 16,384-row chunk of
    that many keys (where it is a wgmma kernel; else, or without a table, the untuned gated default),
    then that shape with each other valid rows-per-block."""
    from generator.space import rejection_reason
    from runtime.defaults import default_variant
    from runtime.table import load_table, nearest
    from runtime.variant import Variant

    entry = nearest(load_table(table) or [], heads, top_k, 16384, context)
    first = Variant.from_name(entry.variant) if entry else None
    if first is None or first.mma != "wgmma":
        first = default_variant(heads, top_k)
    others = [replace(first, rows=r) for r in (1, 2, 4) if r != first.rows]
    return [first, *(v for v in others if rejection_reason(v) is None)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step", action="append", required=True, metavar="BATCHxCONTEXT")
    p.add_argument("--next-n", dest="next_n", type=int, action="append", default=[])
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--top-k", dest="top_k", type=int, default=2048)
    p.add_argument("--variant", action="append", default=[], help="a fused variant to try (default: candidates())")
    p.add_argument("--log", type=Path, help="append a JSON line a step here")
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("tools/decode_by_prefill.py times kernels on a GPU; none here.", file=sys.stderr)
        return 2
    from generator.paged_bench import copy_rate, graph_replay_ms, random_step
    from generator.paged_workloads import PagedWorkload, verify_paged
    from runtime.build import build
    from runtime.gpu import device_identity
    from runtime.paged import decode_layout, paged_mqa_topk
    from runtime.paged_prefill import launch_paged_prefill
    from runtime.paged_variant import CACHE_BYTES_PER_KEY
    from runtime.table import table_for
    from runtime.variant import Variant

    rate = copy_rate()
    print(f"{torch.cuda.get_device_name()}: device copy {rate / 1e12:.2f} TB/s moved", flush=True)
    steps = [(int(b), int(c)) for b, c in (s.split("x") for s in args.step)]
    table = table_for(device_identity(torch.cuda.current_device())).path
    tried = {c: [Variant.from_name(n) for n in args.variant] or candidates(args.heads, args.top_k, c, table)
             for _, c in steps}
    builds = sorted({v.paged_build(64) for vs in tried.values() for v in vs}, key=lambda v: v.name)
    build(builds)  # (in parallel, before anything is timed)
    wrong = 0
    for (batch, context), next_n in ((s, n) for s in steps for n in args.next_n or [1, 2]):
        step = random_step(batch, context, next_n, args.heads, args.top_k)
        q, cache, weights, lens, table, top_k = step
        layout = decode_layout(lens, table, next_n, cache.shape[1], cache.shape[0])
        flat_q = q.reshape(batch * next_n, args.heads, 128)
        floor_us = batch * context * CACHE_BYTES_PER_KEY / rate * 1e6
        row = {"batch": batch, "context": context, "next_n": next_n, "heads": args.heads, "top_k": top_k,
               "floor_us": floor_us,
               "auto_us": 1e3 * graph_replay_ms(lambda: paged_mqa_topk(*step, validate=False, layout=layout)),
               "dense_us": 1e3 * graph_replay_ms(lambda: paged_mqa_topk(*step, validate=False, variant="dense",
                                                                         layout=layout)),
               "fused": {}}
        workload = PagedWorkload("positive", q, cache, weights, lens, table, top_k)
        rows = [0, batch * next_n - 1]
        for v in tried[context]:
            paged = v.paged_build(64)
            call = lambda: launch_paged_prefill(paged, flat_q, cache, weights, layout, top_k)  # noqa: E731
            report = verify_paged(call(), workload, rows=rows, strict=True)
            wrong += not report.ok
            row["fused"][v.name] = {"us": 1e3 * graph_replay_ms(call), "verified": report.ok}
        best = min(row["fused"].items(), key=lambda kv: kv[1]["us"])
        print(f"{batch:4d} x {context:7d} next_n {next_n}: floor {floor_us:8.1f} us | auto {row['auto_us']:8.1f} | "
              f"dense {row['dense_us']:8.1f} | best fused {best[1]['us']:8.1f} ({best[0]}, dense / it "
              f"{row['dense_us'] / best[1]['us']:.2f}, floor share {floor_us / best[1]['us']:.2f})"
              + ("" if all(f["verified"] for f in row["fused"].values()) else "  WRONG"), flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
