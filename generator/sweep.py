"""`python -m generator bench --sweep`: the chunks a server sends, AUTO against our dense path (GPU).

The grid: rows {1, 64, 512, 2048, 8192, 16384} x keys {8K, 32K, 128K, 512K} x {1, 8} requests, for
each heads and top-k asked (default H = 32 and 64, top-512 and top-2048). A chunk of R rows over Q
requests holds Q requests of keys / Q tokens each, R / Q rows of each (its last tokens, each row
seeing its own request's prefix); shapes with fewer rows than requests, or more rows than keys, are
left out. Per shape, in one run: AUTO as a server calls it (`fused_mqa_topk`, validate=False, the
answer written into a buffer made once, as a server's persistent index buffer) and our dense path
alike (and the installed serving ops), timed in turn (timing.interleaved_ms: the median of
event-timed calls, the host's work inside), and AUTO's GPU time alone (the host's launch hidden:
timing.event_ms); the share of the fp8 floor at `_scaled_mm`'s sustained rate measured at the start
of the run; both answers verified with the two-sided verifier
on sampled rows. With --serving (generator/serving_path.py): the serving engines' dense path on the
same shapes, the speed-up over it and the geometric mean; either a file of its times (JSON lines
{"requests", "rows", "keys", "heads", "top_k", "ms"}, best timed in the same run by the same method:
CONTRIBUTING.md, "Working with the lent GPU machine") or `installed`: vLLM's and DeepGEMM's own ops,
where this machine has them, timed here by the same method as AUTO and verified on sampled rows.
docs/results/h200-2026-12-01-abb3266/serving.jsonl holds that path's times on an H200 (all 168 shapes;
DeepGEMM's sm90 MQA-logits kernel in vLLM v0.33.0's pieces, then vLLM's per-row top-k), timed in
the run of docs/results/h200-2026-12-01-abb3266/sweep.jsonl.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .serving_path import InstalledServing
from .timing import geometric_mean  # (its summaries' mean; also imported from here)

SWEEP_ROWS = (1, 64, 512, 2048, 8192, 16384)
SWEEP_KEYS = (8192, 32768, 131072, 524288)
SWEEP_REQUESTS = (1, 8)


@dataclass(frozen=True)
class Shape:
    requests: int
    rows: int
    keys: int
    heads: int
    top_k: int

    @property
    def key(self) -> tuple:
        return (self.requests, self.rows, self.keys, self.heads, self.top_k)


def sweep_shapes(heads: list[int], top_ks: list[int]) -> list[Shape]:
    return [Shape(q, r, n, h, k) for h in heads for k in top_ks for q in SWEEP_REQUESTS for n in SWEEP_KEYS
            for r in SWEEP_ROWS if r >= q and r % q == 0 and r <= n]


def chunk(shape: Shape, seed: int = 0, device="cuda"):
    """The shape's workload: random data, `requests` requests side by side, causal rows in each."""
    from .workloads import packed_workload

    return packed_workload(shape.rows, shape.keys, shape.heads, shape.top_k, shape.requests, seed=seed, device=device)


def run(heads: list[int], top_ks: list[int], serving: dict[tuple, float] | InstalledServing, log_path: Path | None,
        sustain_s: float = 3.0) -> int:
    """serving: the serving path's ms by shape key (serving_path.read_serving), or the installed ops to
    time in this run."""
    import torch

    from runtime import dense_mqa_topk, explain, fused_mqa_topk

    from .timing import interleaved_ms, median_ms, scaled_mm_tflops, scoring_floor_ms, visible_pairs
    from .verify import verify_topk

    rate = scaled_mm_tflops(seconds=sustain_s)
    print(f"{torch.cuda.get_device_name()}: _scaled_mm sustained {rate:.0f} TFLOP/s over {sustain_s:.0f} s", flush=True)
    if isinstance(serving, InstalledServing):
        print(f"serving path: {serving.describe()}, timed in this run", flush=True)
    log = open(log_path, "a") if log_path else None
    rows_out, ratios, bad = [], [], 0
    for i, shape in enumerate(sweep_shapes(heads, top_ks)):
        wl = chunk(shape, seed=i)
        args = wl.args()
        longest = shape.keys // shape.requests  # what a server knows of its requests (max_seqlen_k)
        answer = torch.empty(shape.rows, shape.top_k, dtype=torch.int32, device="cuda")  # (the serving path's too)

        def auto():
            fused_mqa_topk(*args, validate=False, max_visible_keys=longest, out=answer)
        calls = {"auto": auto, "dense": lambda: dense_mqa_topk(*args, validate=False, max_visible_keys=longest, out=answer)}
        if isinstance(serving, InstalledServing):
            calls["serving"] = lambda: serving(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, shape.top_k, answer)
        timed = interleaved_ms(calls, warmup=3, max_seconds=2.0 * len(calls))  # (the same clocks for each)
        auto_ms, dense_ms = timed["auto"].ms, timed["dense"].ms
        auto_gpu_ms = median_ms(auto, warmup=3, reps=15, max_seconds=2.0, hide_launch=True)  # (the host's work outside)
        sample = range(0, shape.rows, max(1, shape.rows // 32))
        ok = all(verify_topk(path(*args, validate=False, max_visible_keys=longest), *args, rows=sample, strict=True).ok
                 for path in (fused_mqa_topk, dense_mqa_topk))  # (what was timed)
        bad += not ok
        floor_ms = scoring_floor_ms(visible_pairs(wl.ks, wl.ke), shape.heads, rate)
        decision = explain(*args, max_visible_keys=longest)  # (what AUTO ran, for reading the times)
        result = {**asdict(shape), "auto_path": decision.variant.name if decision.variant else "dense",
                  "auto_ms": auto_ms, "auto_gpu_ms": auto_gpu_ms, "dense_ms": dense_ms, "floor_ms": floor_ms,
                  "auto_floor_share": floor_ms / auto_ms, "auto_gpu_floor_share": floor_ms / auto_gpu_ms, "verified": ok,
                  **{f"{name}_spread": t.spread for name, t in timed.items()}}
        if "serving" in timed:
            result["serving_ms"] = timed["serving"].ms
            answer.fill_(-7)
            calls["serving"]()  # (vLLM's top-k leaves the order and ties open: the plain rule, not the strict one)
            result["serving_verified"] = verify_topk(answer, *args, rows=sample).ok
            bad += not result["serving_verified"]
        elif shape.key in serving:
            result["serving_ms"] = serving[shape.key]
        if "serving_ms" in result:
            result["vs_serving"] = result["serving_ms"] / auto_ms
            ratios.append(result["vs_serving"])
        rows_out.append(result)
        print(_line(result), flush=True)
        if log:
            log.write(json.dumps(result) + "\n")
            log.flush()
    if ratios:
        print(f"\nAUTO vs serving: geometric mean {geometric_mean(ratios):.2f}x over {len(ratios)} shapes; slower on "
              f"{sum(r < 1 for r in ratios)}")
    print(f"{len(rows_out) - bad}/{len(rows_out)} shapes verified")
    return 1 if bad else 0


def markdown(results: list[dict]) -> str:
    """A sweep's JSON lines (with serving times) as BENCHMARKS.md's tables: per heads and top-k,
    serving ms / AUTO ms (the ratio; the share of the sustained floor; d where AUTO took the dense
    path) by requests and rows against keys."""
    out = []
    for heads, top_k in sorted({(r["heads"], r["top_k"]) for r in results}):
        mine = {(r["requests"], r["rows"], r["keys"]): r for r in results
                if (r["heads"], r["top_k"]) == (heads, top_k) and "vs_serving" in r}
        if not mine:
            continue
        ratios = [r["vs_serving"] for r in mine.values()]
        keys = sorted({k for _, _, k in mine})
        out += [f"H = {heads}, top-{top_k}: serving ms / AUTO ms (AUTO vs serving; share of the sustained floor; d: "
                f"AUTO took the dense path); geometric mean {geometric_mean(ratios):.2f}x, slower on "
                f"{sum(x < 1 for x in ratios)} of {len(ratios)}", "",
                "| requests, rows | " + " | ".join(f"{k // 1024}K" for k in keys) + " |",
                "| --- |" + " --- |" * len(keys)]
        for q, m in sorted({(q, m) for q, m, _ in mine}):
            cells = []
            for k in keys:
                r = mine.get((q, m, k))
                cells.append("-" if r is None else f"{r['serving_ms']:.3f} / {r['auto_ms']:.3f} ({r['vs_serving']:.2f}x; "
                             f"{r['auto_floor_share']:.2f}{' d' if r['auto_path'] == 'dense' else ''})")
            out.append(f"| {q}, {m} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _line(r: dict) -> str:
    vs = f"  vs serving {r['vs_serving']:.2f}x" if "vs_serving" in r else ""
    return (f"{'OK ' if r['verified'] else 'BAD'} q{r['requests']} {r['rows']:>6} x {r['keys']:>7} h{r['heads']} "
            f"k{r['top_k']}: AUTO {r['auto_ms']:.3f} ms ({'dense' if r.get('auto_path') == 'dense' else 'fused'}), "
            f"dense {r['dense_ms']:.3f}, floor share {r['auto_floor_share']:.2f} "
            f"(AUTO's GPU time {r['auto_gpu_ms']:.3f}: {r['auto_gpu_floor_share']:.2f}){vs}")
