"""`python -m generator check`: build, verify against the reference, and time, in one call.

The GPU machine is lent by the minute, so one command does everything: build the variants (or
reuse the carried cache), run every workload family through each variant and verify it with the
reference (poisoned outputs, so unwritten elements show), spot-check large chunks, and time fused
against dense on causal chunks. A table goes to stdout; JSON lines to --log.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import torch

from runtime.dense import dense_mqa_topk
from runtime.fused import launch_variant
from runtime.verify import verify_topk
from runtime.workloads import FAMILIES, make_workload

from .arch import arch_for_capability
from .space import AXES, default_variants
from .timing import median_ms, scoring_tflops, visible_pairs
from .variant import Variant

POISON = -7  # what the output holds before a run: never a valid index nor the -1 pad


@dataclass
class Check:
    what: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.what:60s} {self.detail}"


def run_poisoned(variant: Variant, wl, stats: dict | None = None) -> torch.Tensor:
    """The variant's output for wl, written over an output buffer pre-filled with POISON."""
    out = torch.full((wl.rows, wl.top_k), POISON, dtype=torch.int32, device=wl.q.device)
    launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, out=out, stats=stats)
    torch.cuda.synchronize()
    return out


def verify_variant(variant: Variant, family: str, rows: int, keys: int, seed: int, sample_rows: int | None = None) -> Check:
    wl = make_workload(family, rows, keys, variant.heads, variant.top_k, seed=seed, device="cuda")
    stats: dict = {}
    out = run_poisoned(variant, wl, stats)
    rows_to_check = None
    if sample_rows is not None and sample_rows < rows:
        g = torch.Generator().manual_seed(seed)
        rows_to_check = sorted(set(torch.randint(0, rows, (sample_rows,), generator=g).tolist()) | {0, rows - 1})
    poisoned = int((out == POISON).sum())
    report = verify_topk(out, *wl.args(), rows=rows_to_check)
    detail = report.summary() + (f"; {poisoned} unwritten" if poisoned else "")
    if "rescan_blocks" in stats:
        blocks = -(-rows // variant.rows)
        detail += f"; rescanned {stats['rescan_blocks']}/{blocks} row blocks, {stats['split_blocks']} split"
    return Check(f"{variant.name} {family} M={rows} N={keys}", report.ok and not poisoned, detail)


def verify_dense(heads: int, top_k: int, family: str, rows: int, keys: int, seed: int) -> Check:
    wl = make_workload(family, rows, keys, heads, top_k, seed=seed, device="cuda")
    report = verify_topk(dense_mqa_topk(*wl.args()), *wl.args())
    return Check(f"dense h{heads} k{top_k} {family} M={rows} N={keys}", report.ok, report.summary())


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
