"""Which merge balance the paged split rule should take, from a sweep of parts per request (no GPU).

`tools/compare_paged_builds.py --parts P ... --log sweep.jsonl` times decode steps at several splits.
This reads such logs and, for each (heads, top-k, next_n), finds the constant `at_128k` of
runtime.paged.parts_per_request (the parts at 128K tokens and top-2048, scaled as sqrt(capacity /
top_k)) whose splits give the least geometric-mean time over the swept steps. A step's time at a split
is read off its measured curve: log-log interpolation between the swept splits, the nearest one
outside them. A step's capacity is its context rounded up to whole 64-token blocks (random_step's
block table). Prints, per step, the best swept split and the times at the rule's split with today's
constant and with the fitted one.

    python tools/paged_split_fit.py sweep.jsonl [...] [--build rows] [--sms 132]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CANDIDATES = range(4, 129)  # constants tried


def time_at(curve: dict[int, float], parts: int) -> float:
    """The step's time at `parts`, from its measured {parts: ms} (log-log interpolation)."""
    xs = sorted(curve)
    if parts <= xs[0]:
        return curve[xs[0]]
    if parts >= xs[-1]:
        return curve[xs[-1]]
    hi = next(x for x in xs if x >= parts)
    lo = max(x for x in xs if x <= parts)
    if hi == lo:
        return curve[lo]
    f = (math.log(parts) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp(math.log(curve[lo]) + f * (math.log(curve[hi]) - math.log(curve[lo])))


def read_curves(paths, build: str | None) -> dict:
    """{(heads, top_k, next_n): {(batch, capacity): {parts: ms}}} from compare_paged_builds logs."""
    curves: dict = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            ms = row["ms"][build] if build else min(row["ms"].values())
            capacity = -(-row["context"] // 64) * 64
            curves[(row["heads"], row["top_k"], row["next_n"])][(row["batch"], capacity)][row["parts"]] = ms
    return curves


def mean_at(steps: dict, top_k: int, sms: int, at_128k: int) -> float:
    """The steps' geometric-mean time (ms) at the splits the rule takes with constant at_128k."""
    from runtime.paged import parts_per_request

    logs = [math.log(time_at(curve, parts_per_request(b, cap, top_k, sms, at_128k))) for (b, cap), curve in steps.items()]
    return math.exp(sum(logs) / len(logs))


def fit(steps: dict, top_k: int, sms: int) -> tuple[int, float]:
    """(the constant whose splits give the least geometric-mean time, that mean in ms)."""
    best = min(CANDIDATES, key=lambda c: (round(mean_at(steps, top_k, sms, c), 9), c))
    return best, mean_at(steps, top_k, sms, best)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", nargs="+")
    p.add_argument("--build", help="the build whose times to fit (default: the fastest build of each line)")
    p.add_argument("--sms", type=int, default=132)
    args = p.parse_args()

    from runtime.paged import PARTS_AT_128K_TOP_2048, parts_per_request

    for (heads, top_k, next_n), steps in sorted(read_curves(args.log, args.build).items()):
        best, best_ms = fit(steps, top_k, args.sms)
        today = mean_at(steps, top_k, args.sms, PARTS_AT_128K_TOP_2048)
        print(f"H = {heads}, top-{top_k}, next_n {next_n}: at_128k {PARTS_AT_128K_TOP_2048} -> {best}, "
              f"geometric mean {today * 1e3:.1f} -> {best_ms * 1e3:.1f} us ({best_ms / today:.3f}x) over {len(steps)} steps")
        for (batch, capacity), curve in sorted(steps.items()):
            swept = min(curve, key=curve.get)
            now, then = (parts_per_request(batch, capacity, top_k, args.sms, c) for c in (PARTS_AT_128K_TOP_2048, best))
            print(f"  {batch:>4} x {capacity:>8}: best swept {swept} parts {curve[swept] * 1e3:.1f} us; rule {now} parts "
                  f"{time_at(curve, now) * 1e3:.1f} us, fitted {then} parts {time_at(curve, then) * 1e3:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
