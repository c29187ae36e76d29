"""BENCHMARKS.md's long-chunk tables from this folder's runs: per heads and top-k, over 32K-1M keys, the
fused kernel's share of the sustained fp8 floor and the serving path's time over ours, each the worst
of the three data distributions (and the best, in brackets), our dense path's time over the fused one,
and whether every answer verified. `python3 table.py` (no GPU)."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = (32768, 65536, 131072, 262144, 524288, 1048576)


def rows(pattern):
    return [json.loads(line) for p in sorted(HERE.glob(pattern)) for line in p.read_text().splitlines() if line.strip()]


fused = {(r["heads"], r["top_k"], r["keys"], r["distribution"]): r for r in rows("*/bench-*.jsonl") if r["kind"] == "fused"}
serving = {(r["heads"], r["top_k"], r["keys"], r["distribution"]): r for r in rows("*/serving-*.jsonl")}
assert set(fused) == set(serving) and len(fused) == 108, (len(fused), len(serving))
assert all(r["verified"] for r in fused.values()) and all(r["verified"] for r in serving.values())
label = lambda k: f"{k // 1024}K" if k < 1 << 20 else "1M"  # noqa: E731
for name, value in (("share of the sustained floor", lambda f, s: f["sustained_floor_fraction"]),
                    ("serving / fused", lambda f, s: s["ms"] / f["fused_ms"]),
                    ("our dense path / fused", lambda f, s: f["speedup"])):
    print(f"\n{name}, worst of three distributions (best):\n")
    print("| H, top-k | " + " | ".join(label(k) for k in KEYS) + " |")
    print("| --- |" + " --- |" * len(KEYS))
    for heads in (32, 64):
        for top_k in (512, 1024, 2048):
            cells = []
            for keys in KEYS:
                v = [value(fused[heads, top_k, keys, d], serving[heads, top_k, keys, d]) for d in ("positive", "signed", "indexer")]
                cells.append(f"{min(v):.2f} ({max(v):.2f})")
            print(f"| {heads}, {top_k} | " + " | ".join(cells) + " |")
print("\nfused ms, positive / signed / indexer-like:\n")
for heads in (32, 64):
    for top_k in (2048,):
        print(f"H = {heads}, top-{top_k}: " + "; ".join(
            f"{label(k)} " + " / ".join(f"{fused[heads, top_k, k, d]['fused_ms']:.2f}" for d in ("positive", "signed", "indexer"))
            for k in KEYS))
variants = sorted({r["variant"] for r in fused.values()})
print(f"\n{len(variants)} fused variants (the shipped table's); rescans: "
      f"{sum(r['rescan_blocks'] or 0 for r in fused.values())} blocks over the 108 runs")
