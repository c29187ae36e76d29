"""How a recorded landscape's timings move within a point: per timing position, the median over points
of that timing over the point's median, for every point and for the fastest few; and how far apart a
point's timings lie (max - min over median), for every point and for the fastest few.

A study times a candidate right after verifying it (a warm-up, then 7 runs back to back), and the card
runs at its power cap: a point timed after a pause starts at a higher clock and slows as the cap bites
(experiment log, "2026-12-01: power cap"). Where the fastest points' timings rise along the positions and
spread wider than the gaps between those points, the landscape cannot rank them, and no search over it
can be held to a regret below that spread.

With --against FILE (a second recording of some of the same points: `generator regret --record
--fastest N --of LANDSCAPE`), how far the second moved each common point: the median and largest
change of a point's median, the rank correlation, and how far each recording's fastest point lies
from the other's fastest by the other's timings.

    python tools/landscape_drift.py docs/results/h200-2026-12-04-landscape/landscape*.jsonl [--top 50]
    python tools/landscape_drift.py FIRST.jsonl --against SECOND.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def drift(points: dict[str, list[float] | None], top: int) -> dict:
    """The profile of `points`' complete timings (those of the most common length: points the recorder
    stopped early keep two)."""
    timed = {n: t for n, t in points.items() if t}
    reps = statistics.mode(len(t) for t in timed.values())
    full = {n: t for n, t in timed.items() if len(t) == reps}
    median = {n: statistics.median(t) for n, t in full.items()}
    fastest = sorted(median, key=median.get)[:top]

    def profile(names):
        return [statistics.median(full[n][i] / median[n] for n in names) for i in range(reps)]

    def spread(names):
        return statistics.median((max(full[n]) - min(full[n])) / median[n] for n in names)

    best = median[fastest[0]]
    return {"points": len(full), "reps": reps, "profile": profile(full), "top": len(fastest),
            "top_profile": profile(fastest), "spread": spread(full), "top_spread": spread(fastest),
            "top_within": max(median[n] / best - 1 for n in fastest)}


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    for rank, i in enumerate(order):
        out[i] = float(rank)
    return out


def rerun(first: dict[str, list[float] | None], second: dict[str, list[float] | None]) -> dict | None:
    """How the second recording moved the points both timed (medians); None where they share none."""
    common = sorted(n for n in first if first[n] and second.get(n))
    if not common:
        return None
    a = [statistics.median(first[n]) for n in common]
    b = [statistics.median(second[n]) for n in common]
    moves = [y / x - 1 for x, y in zip(a, b)]
    best_a, best_b = min(range(len(a)), key=a.__getitem__), min(range(len(b)), key=b.__getitem__)
    return {"points": len(common), "median_move": statistics.median(moves),
            "median_abs_move": statistics.median(abs(m) for m in moves), "largest_move": max(moves, key=abs),
            "rank_correlation": statistics.correlation(ranks(a), ranks(b)) if len(common) > 2 else float("nan"),
            "first_best_in_second": b[best_a] / b[best_b] - 1, "second_best_in_first": a[best_b] / a[best_a] - 1}


def main_against(paths: list[Path], against: Path) -> int:
    from generator.regret import Landscape

    second = Landscape.read(against).points
    print("| bucket | points | median change | median size of change | largest | rank correlation | "
          "first's fastest, by the second | second's fastest, by the first |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in paths:
        for bucket, points in sorted(Landscape.read(path).points.items()):
            if bucket in second and (r := rerun(points, second[bucket])) is not None:
                print(f"| {bucket.name} | {r['points']} | {r['median_move']:+.1%} | {r['median_abs_move']:.1%} | "
                      f"{r['largest_move']:+.1%} | {r['rank_correlation']:.2f} | {r['first_best_in_second']:+.1%} | "
                      f"{r['second_best_in_first']:+.1%} |")
    return 0


def main() -> int:
    from generator.regret import Landscape

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("landscapes", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=50, help="the fastest points profiled apart (default 50)")
    p.add_argument("--against", type=Path, metavar="FILE", help="compare with a second recording (see above)")
    args = p.parse_args()
    if args.against:
        return main_against(args.landscapes, args.against)
    print("| bucket | points | timing / the point's median, by position: all points | the fastest | "
          "spread: all | the fastest | the fastest lie within |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path in args.landscapes:
        landscape = Landscape.read(path)
        for bucket in sorted(landscape.points):
            d = drift(landscape.points[bucket], args.top)
            print(f"| {bucket.name} | {d['points']} | {' '.join(f'{x:.3f}' for x in d['profile'])} | "
                  f"{d['top']}: {' '.join(f'{x:.3f}' for x in d['top_profile'])} | {d['spread']:.1%} | "
                  f"{d['top_spread']:.1%} | {d['top_within']:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
