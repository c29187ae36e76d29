"""`python -m generator check`: build, verify against the reference, and time, in one call.

The GPU machine is lent by the minute, so one command does everything: build the variants (or
reuse the carried cache), run every workload family through each variant and verify it with the
reference (poisoned outputs, so unwritten elements show), spot-check large chunks, and time fused
against dense on causal chunks. A table goes to stdout; JSON lines to --log.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

import torch

from runtime.dense import dense_mqa_topk, run_dense
from runtime.fused import launch_variant
from runtime.scoring import logits_window
from runtime.verify import verify_topk
from runtime.workloads import FAMILIES, make_workload

from .arch import arch_for_capability
from .dense_variant import DenseVariant
from .space import AXES, default_variants
from .timing import median_ms, scoring_tflops, visible_pairs
from .variant import Variant

POISON = -7  # what the output holds before a run: never a valid index nor the -1 pad


@dataclass
class Check:
    what: str
    ok: bool
    detail: str
    stats: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.what:60s} {self.detail}"


def run_poisoned(variant: Variant, wl, stats: dict | None = None) -> torch.Tensor:
    """The variant's output for wl, written over an output buffer pre-filled with POISON."""
    out = torch.full((wl.rows, wl.top_k), POISON, dtype=torch.int32, device=wl.q.device)
    launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, out=out, stats=stats)
    torch.cuda.synchronize()
    return out


def sampled_rows(rows: int, count: int, seed: int) -> list[int]:
    """`count` random rows (seeded) and the first and last: what a sampled verification checks."""
    g = torch.Generator().manual_seed(seed)
    return sorted(set(torch.randint(0, rows, (count,), generator=g).tolist()) | {0, rows - 1})


def verify_variant(variant: Variant, family: str, rows: int, keys: int, seed: int, sample_rows: int | None = None,
                   tail_rows: bool = False) -> Check:
    """Runs the variant on a fresh workload over a poisoned output and verifies every row (or
    sample_rows random rows and the first and last; with tail_rows, also every row of the four
    lightest blocks, where a split tail's answers land)."""
    wl = make_workload(family, rows, keys, variant.heads, variant.top_k, seed=seed, device="cuda")
    stats: dict = {}
    out = run_poisoned(variant, wl, stats)
    rows_to_check = None
    if sample_rows is not None and sample_rows < rows:
        rows_to_check = set(sampled_rows(rows, sample_rows, seed))
        if tail_rows:  # blocks are claimed heaviest first: a causal chunk's tail is its first rows
            rows_to_check |= set(range(0, min(rows, 4 * variant.rows)))
        rows_to_check = sorted(rows_to_check)
    poisoned = int((out == POISON).sum())
    report = verify_topk(out, *wl.args(), rows=rows_to_check)
    detail = report.summary() + (f"; {poisoned} unwritten" if poisoned else "")
    if "rescan_blocks" in stats:
        blocks = -(-rows // variant.rows)
        detail += f"; rescanned {stats['rescan_blocks']}/{blocks} row blocks, {stats['split_blocks']} split"
    return Check(f"{variant.name} {family} M={rows} N={keys}", report.ok and not poisoned, detail, stats)


def verify_dense(heads: int, top_k: int, family: str, rows: int, keys: int, seed: int,
                 variant: DenseVariant | None = None, told_longest_row: int | None = None) -> Check:
    """The dense path (our kernels: `variant`, or the default) over a poisoned output, in pieces of
    8 MiB of logits so that a check covers several pieces. Its logits windows and top-k kernel follow
    the longest row: the one measured, or `told_longest_row` as a caller would promise it (the
    short-row kernel where its window is at most the variant's short_row_keys). A row longer than told
    is answered from its first keys, as many as the window holds: verified as a row that sees those."""
    wl = make_workload(family, rows, keys, heads, top_k, seed=seed, device="cuda")
    out = torch.full((rows, top_k), POISON, dtype=torch.int32, device="cuda")
    longest = told_longest_row if told_longest_row is not None else wl.longest_row()
    run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, top_k, longest, 8 << 20, variant, out)
    torch.cuda.synchronize()
    poisoned = int((out == POISON).sum())
    if told_longest_row is not None:  # the ranges as the window cuts them
        wl = replace(wl, ke=torch.minimum(wl.ke, wl.ks + logits_window(told_longest_row, keys)))
    report = verify_topk(out, *wl.args())
    name = variant.name if variant else f"dense h{heads} k{top_k}"
    told = f" told {told_longest_row}" if told_longest_row is not None else ""
    return Check(f"{name} {family} M={rows} N={keys}{told}", report.ok and not poisoned,
                 report.summary() + (f"; {poisoned} unwritten" if poisoned else ""))


def split_tail_rows(variant: Variant, tail_blocks: int = 3) -> int:
    """Rows whose blocks fill one round of this GPU's CTAs and leave `tail_blocks` more: the tail a
    selector-warp kernel cuts into parts of their keys."""
    return (torch.cuda.get_device_properties(0).multi_processor_count + tail_blocks) * variant.rows


def check_shipped(record, families, rows: int, keys: int) -> None:
    """Every variant a tuned table dispatches or a default names, and every dense variant: each on
    every family (all_equal overflows every slab: rescans), and each selector-warp variant on a
    launch whose tail is split (random scores: three blocks split; rising scores and all_equal:
    slabs may overflow and their blocks be rescanned)."""
    from .shipped import shipped_dense_variants, shipped_variants

    for v in shipped_variants():
        for i, fam in enumerate(families):
            record(verify_variant(v, fam, rows, max(keys, 4 * v.top_k) if fam == "short_rows" else keys, seed=400 + i))
        if v.select_warps:
            for fam in ("random", "increasing", "all_equal"):
                c = verify_variant(v, fam, split_tail_rows(v), 140_000, seed=7, sample_rows=48, tail_rows=True)
                split = fam != "random" or c.stats.get("split_blocks") == 3  # random rows: the tail is split
                record(Check(c.what + " (split tail)", c.ok and split, c.detail))
    for d in shipped_dense_variants():  # each top-k kernel: the histogram one (rows too long to hold), the short-row one
        short, long = min(keys, d.short_row_keys), max(keys, d.short_row_keys + 1000)
        for i, fam in enumerate(families):
            record(verify_dense(d.heads, d.top_k, fam, rows, long, seed=500 + i, variant=d))
            record(verify_dense(d.heads, d.top_k, fam, rows, short, seed=600 + i, variant=d, told_longest_row=short))
            # windows of 2 top_k keys (half of a full row is its answer): the short-row kernel's
            # smallest CTA, where the k-th score lies among the row's crowd
            record(verify_dense(d.heads, d.top_k, fam, rows, 2 * d.top_k, seed=650 + i, variant=d,
                                told_longest_row=2 * d.top_k))
        # rows longer than the caller promised: answered from their first keys
        record(verify_dense(d.heads, d.top_k, "random", rows, keys, seed=700, variant=d, told_longest_row=keys // 2))


def time_pair(variant: Variant, rows: int, keys: int, seed: int = 0) -> dict:
    wl = make_workload("random", rows, keys, variant.heads, variant.top_k, seed=seed, device="cuda")
    args = wl.args()
    fused_ms = median_ms(lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k))
    dense_ms = median_ms(lambda: dense_mqa_topk(*args, validate=False), reps=5)
    pairs = visible_pairs(wl.ks, wl.ke)
    return {"variant": variant.name, "rows": rows, "keys": keys, "fused_ms": fused_ms, "dense_ms": dense_ms,
            "speedup": dense_ms / fused_ms, "fused_tflops": scoring_tflops(pairs, variant.heads, fused_ms),
            "dense_tflops": scoring_tflops(pairs, variant.heads, dense_ms)}


def main(args) -> int:
    if not torch.cuda.is_available():
        print("check needs a CUDA GPU (it runs kernels); without one, run the CPU tests (README).")
        return 2
    arch = arch_for_capability(*torch.cuda.get_device_capability())
    variants = [Variant.from_name(n) for n in args.variant] or [
        v for h in AXES["heads"] for k in AXES["top_k"] for v in default_variants(h, k, arch.name)]
    log = open(args.log, "a") if args.log else None
    checks: list[Check] = []
    t0 = time.time()

    def record(c: Check):
        checks.append(c)
        print(c.line(), flush=True)
        if log:
            log.write(json.dumps({"check": c.what, "ok": c.ok, "detail": c.detail}) + "\n")

    families = args.family or list(FAMILIES)
    if args.shipped:
        check_shipped(record, families, args.rows, args.keys)
        variants = []
    for v in variants:
        for i, fam in enumerate(families):
            rows, keys = (args.rows, args.keys) if fam != "short_rows" else (args.rows, max(args.keys, 4 * v.top_k))
            record(verify_variant(v, fam, rows, keys, seed=100 + i))
    if args.dense:
        for i, fam in enumerate(families):
            record(verify_dense(32, 2048, fam, args.rows, args.keys, seed=200 + i))
    for spec in args.large:
        rows, keys = (int(x) for x in spec.split("x"))
        for v in variants:
            record(verify_variant(v, "random", rows, keys, seed=7, sample_rows=args.sample_rows))
    timings = []
    for spec in args.time:
        rows, keys = (int(x) for x in spec.split("x"))
        for v in variants:
            t = time_pair(v, rows, keys)
            timings.append(t)
            print(f"TIME  {v.name} M={rows} N={keys}: fused {t['fused_ms']:.3f} ms ({t['fused_tflops']:.0f} TFLOP/s), "
                  f"dense {t['dense_ms']:.3f} ms ({t['dense_tflops']:.0f} TFLOP/s), speedup {t['speedup']:.2f}x", flush=True)
            if log:
                log.write(json.dumps({"timing": t, "gpu": torch.cuda.get_device_name()}) + "\n")
    failed = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(failed)}/{len(checks)} checks passed in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}")
    for c in failed:
        print(c.line())
    return 1 if failed else 0
