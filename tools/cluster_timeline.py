"""Where the dense paged build's top-k spends a decode step: clock marks from inside it.

The cluster top-k (templates/dense_mqa_topk_sm90.cu.j2, paged builds: a few long rows, each over a
cluster of CTAs) compiled with -DFUSED_MQA_TOPK_TIMELINE marks, in each CTA, the phases

    gate (the shared sample and its loose select) | gather (the slice's keys past the gate) |
    counts (the cluster barrier that publishes them and the codes' largest and smallest) | rank (the
    k-th code: the radix passes) | ties (the k-th code's keys, where they straddle its place) |
    places (the answer's counts and each CTA's offset) | answer (the slice's keys, ascending, and the
    cluster barrier before the CTAs leave)

and, where a slice fits its shared memory (the resident route, which marks 8 as well),

    load (the slice read into shared memory and counted into bins) | sums (the cluster's counts: two
    barriers) | bin (the k-th's bin found) | scan (the slice's keys above it into the bitmap, its
    entries of the bin copied to rank 0) | barrier (the third) | select (rank 0 ranks the bin's
    entries, marks those taken and sends each CTA its place: a barrier) | answer (the bitmap's keys,
    ascending)

and where a step has more rows than the cluster top-k's clusters fit the SMs at once, the one-CTA-a-row
top-k (dense_topk_kernel, its sampled route; the kernel's own mark 9):

    sample (its sample read, in runs) | gate (the sample's rank-r code) | gather (the row's keys past the
    gate into shared memory: one pass) | select (the top-k among them) | stage (the answer read back
    into shared memory) | answer (written in ascending order)

    python tools/timeline.py build mqa_dense_..._pb64 --out .ablate          # here: nvcc
    python tools/cluster_timeline.py run mqa_dense_..._pb64 --out .ablate --shape 1x32768 [--next-n 1]  # GPU

A shape is BATCHxCONTEXT (random_step's data, generator/paged_bench.py, by --distribution). Each step's answer is
checked by the two-sided rule. Figures: microseconds, medians over the launch's
CTAs and over --launches launches (and the slowest CTA's span: the launch waits for it), at the SM clock measured from each CTA's global-timer span.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.cli import variant_tool_parser  # noqa: E402
from generator.distributions import DISTRIBUTIONS  # noqa: E402
from tools.timeline import GLOBAL_END, GLOBAL_START, Marks, cmd_build, library_path  # noqa: E402

PHASES = ("gate", "gather", "counts", "rank", "ties", "places", "answer")  # between marks 0..7 of event 0
RESIDENT_PHASES = ("load", "sums", "bin", "scan", "barrier", "select", "answer")  # between marks 0..7
RESIDENT_MARK = 8
ROW_PHASES = (("sample", 0, 1), ("gate", 1, 2), ("gather", 2, 3), ("select", 3, 4), ("stage", 4, 5), ("answer", 5, 7))
ROW_MARK = 9  # (dense_topk_kernel's)


def cta_phases(marks, ctas: int) -> list[dict]:
    """Per CTA that marked: its route, its phases in microseconds and its span by the global timer."""
    found = []
    for cta in range(min(ctas, marks.shape[0])):
        m = [int(x) for x in marks[cta, 0, :8]]
        span_ns = int(marks[cta, 0, GLOBAL_END]) - int(marks[cta, 0, GLOBAL_START])
        row = int(marks[cta, 0, ROW_MARK]) != 0
        marked = all(m[i] for _, a, b in ROW_PHASES for i in (a, b)) if row else 0 not in m
        if not marked or span_ns <= 0 or m[7] <= m[0]:
            continue  # (a CTA of a row shorter than top_k leaves at once; a row off the sampled route)
        ns_per_cycle = span_ns / (m[7] - m[0])
        if row:
            found.append({"route": "row", "span_us": span_ns / 1e3,
                          **{p: (m[b] - m[a]) * ns_per_cycle / 1e3 for p, a, b in ROW_PHASES}})
            continue
        resident = int(marks[cta, 0, RESIDENT_MARK]) != 0
        phases = RESIDENT_PHASES if resident else PHASES
        found.append({"route": "resident" if resident else "gate", "span_us": span_ns / 1e3,
                      **{p: (m[i + 1] - m[i]) * ns_per_cycle / 1e3 for i, p in enumerate(phases)}})
    return found


def cmd_run(args) -> int:
    import torch

    from generator.paged_bench import random_step
    from generator.verify import verify_topk
    from runtime.build import spec_from_name
    from runtime.dense import DEFAULT_LOGITS_BUDGET, run_dense_paged
    from runtime.loader import DenseLibrary
    from runtime.paged import decode_layout, gather_paged
    from runtime.scoring import window_pieces

    for name in args.variant:
        variant = spec_from_name(name)
        path = library_path(args.out, name)
        lib, marks = DenseLibrary(variant, str(path)), Marks(path)
        for shape in args.shape or ["1x32768"]:
            batch, context = (int(x) for x in shape.split("x"))
            q, cache, weights, lens, table, top_k = random_step(batch, context, args.next_n, variant.heads, variant.top_k,
                                                                distribution=args.distribution)
            layout = decode_layout(lens, table, args.next_n, cache.shape[1], cache.shape[0])
            rows, capacity = batch * args.next_n, table.shape[1] * cache.shape[1]
            window, piece_rows = window_pieces(rows, layout.keys, capacity, DEFAULT_LOGITS_BUDGET)
            flat_q = q.reshape(rows, variant.heads, 128)
            out = torch.empty(rows, top_k, dtype=torch.int32, device="cuda")
            ctas = lib.cluster_topk_ctas(window, piece_rows) or 1  # (1: the one-CTA-a-row kernel)
            if piece_rows < rows or window <= lib.short_row_keys:
                print(f"{name} {shape}: not one piece, or the short-row top-k's (no marks)")
                continue
            per_launch = []
            for _ in range(args.launches + 1):  # (the first: warm-up)
                marks.clear()
                run_dense_paged(variant, flat_q, cache, weights, layout, top_k, capacity, out=out, lib=lib)
                torch.cuda.synchronize()
                per_launch.append(cta_phases(marks.read(), rows * ctas))
            k_fp8, k_scale, ks, ke = gather_paged(cache, lens, table, args.next_n)
            report = verify_topk(out, flat_q, (k_fp8, k_scale), weights, ks, ke, top_k)
            assert report.ok, report.summary()
            routes = sorted({c["route"] for launch in per_launch[1:] for c in launch})
            phases = {"resident": RESIDENT_PHASES, "gate": PHASES, "row": tuple(p[0] for p in ROW_PHASES)}.get(
                routes[0], ()) if len(routes) == 1 else ()
            medians = {p: statistics.median(statistics.median(c[p] for c in launch) for launch in per_launch[1:])
                       for p in ("span_us", *phases)}
            print(f"{name} {shape} next_n {args.next_n} {args.distribution} ({ctas} CTAs a row, {' and '.join(routes)} "
                  "route, answers verified): " + ", ".join(f"{p} {medians[p]:.2f}" for p in ("span_us", *phases))
                  + f"; the slowest CTA: span {statistics.median(max(c['span_us'] for c in launch) for launch in per_launch[1:]):.2f}",
                  flush=True)
    return 0


def main() -> int:
    p = variant_tool_parser(__doc__, ("build", "run"))
    p.add_argument("--next-n", type=int, default=1)
    p.add_argument("--launches", type=int, default=5)
    p.add_argument("--distribution", default="positive", choices=list(DISTRIBUTIONS), help="the step's data (DISTRIBUTIONS)")
    args = p.parse_args()
    return cmd_build(args) if args.what == "build" else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
