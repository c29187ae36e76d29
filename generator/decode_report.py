"""Decode timings set against the serving path's, as BENCHMARKS.md's "Decode against the serving path"
gives them: from the JSON lines `python -m generator decode` writes (ours: paged_bench.time_step's
rows) and a file of the serving path's times on the same steps ({"batch", "context", "next_n",
"heads", "top_k", "graph_ms", "eager_ms"} a line), the ratios by step, by next_n and over all, and
the share of the HBM floor and, where the run recorded its fp8 rate, of the step's bound (the larger of
the HBM floor and its products at that rate: at next_n 4 and H = 64 the products take longer than the
cache's bytes). No GPU needed: `python -m generator decode --report OURS --serving THEIRS`."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .timing import geometric_mean

STEP = ("batch", "context", "next_n", "heads", "top_k")
FLOOR_FROM_TOKENS = 512 * 1024  # the steps whose floor share is reported: at least 64 MiB of cache read
FP8_RATE = "fp8_tflops_sustained"  # the head line's key for torch._scaled_mm's sustained rate of the run


def read_head(path: str | Path) -> dict:
    """A file's first line that is not a step (the run's copy rate, GPU, fp8 rate), or {}."""
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if not all(k in row for k in STEP):
                return row
    return {}


def read_steps(path: str | Path) -> dict[tuple, dict]:
    """A file's rows by step (lines without a step, such as the copy rate's, are skipped)."""
    rows = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if all(k in row for k in STEP):
                rows[tuple(row[k] for k in STEP)] = row
    return rows


def paired(ours: dict, theirs: dict) -> list[tuple[dict, dict]]:
    """The steps both files timed (theirs with a time: a step it failed on has none)."""
    return [(ours[k], theirs[k]) for k in sorted(ours) if k in theirs and "graph_ms" in theirs[k]]


# Ours against theirs, three ways: above 1, ours faster.
WAYS = {
    "graph-replayed, as called": lambda o, t: t["graph_ms"] / o["graph_ms"],
    "graph-replayed, layout given": lambda o, t: t["graph_ms"] / o["layout_graph_ms"],
    "eager, layout given": lambda o, t: t["eager_ms"] / o["layout_eager_ms"],
}


def summary(pairs: list[tuple[dict, dict]]) -> dict[str, dict]:
    """Per way: the geometric mean over all steps and per next_n, and how many steps ours is slower."""
    out = {}
    for way, ratio in WAYS.items():
        ratios = [(o["next_n"], ratio(o, t)) for o, t in pairs]
        by_n = defaultdict(list)
        for n, r in ratios:
            by_n[n].append(r)
        out[way] = {"all": geometric_mean([r for _, r in ratios]), "slower": sum(r < 1 for _, r in ratios),
                    "steps": len(ratios), **{f"next_n {n}": geometric_mean(v) for n, v in sorted(by_n.items())}}
    return out


def floor_shares(pairs: list[tuple[dict, dict]]) -> dict[int, tuple[float, float, float, float]]:
    """Per next_n, over the steps of at least FLOOR_FROM_TOKENS tokens: the geometric mean and best share
    of the HBM floor, ours (layout given) and theirs."""
    by_n = defaultdict(list)
    for o, t in pairs:
        if o["batch"] * o["context"] >= FLOOR_FROM_TOKENS:
            by_n[o["next_n"]].append((o["floor_ms"] / o["layout_graph_ms"], o["floor_ms"] / t["graph_ms"]))
    return {n: (geometric_mean([a for a, _ in v]), max(a for a, _ in v), geometric_mean([b for _, b in v]),
                max(b for _, b in v)) for n, v in sorted(by_n.items())}


def products_ms(row: dict, tflops: float) -> float:
    """The time a step's products take at `tflops`: each of a request's next_n rows scores the keys it
    sees (row j of B x context: context - next_n + j + 1) over every head, 2 x 128 FLOPs a (head, key)."""
    n = row["next_n"]
    pairs = row["batch"] * (n * row["context"] - n * (n - 1) // 2)
    return 2 * row["heads"] * 128 * pairs / (tflops * 1e12) * 1e3


def bound_shares(pairs: list[tuple[dict, dict]], tflops: float) -> dict[int, tuple[float, float, float, float]]:
    """floor_shares against each step's bound: the larger of its HBM floor and products_ms at `tflops`."""
    return floor_shares([({**o, "floor_ms": max(o["floor_ms"], products_ms(o, tflops))}, t) for o, t in pairs])


def markdown(pairs: list[tuple[dict, dict]], tflops: float | None = None) -> str:
    """The step table (theirs over ours, graph-replayed with the layout given, geometric mean over heads
    and top-k), the summary and the floor shares (and, given the run's fp8 rate, the bound's), as markdown."""
    if not pairs:
        return "no step is in both files\n"
    cells = defaultdict(list)
    for o, t in pairs:
        cells[(o["next_n"], o["batch"], o["context"])].append(WAYS["graph-replayed, layout given"](o, t))
    contexts = sorted({c for _, _, c in cells})
    label = lambda c: f"{c >> 20}M" if c >= 1 << 20 else f"{c >> 10}K"  # noqa: E731
    lines = ["Theirs over ours (graph-replayed, the layout given; geometric mean over heads and top-k; above 1: "
             "ours faster):", "", "| next_n, B | " + " | ".join(label(c) for c in contexts) + " |",
             "| --- " * (len(contexts) + 1) + "|"]
    for n, b in sorted({(n, b) for n, b, _ in cells}):
        lines.append(f"| {n}, B {b} | " + " | ".join(f"{geometric_mean(cells[(n, b, c)]):.2f}" if cells.get((n, b, c))
                                                     else "-" for c in contexts) + " |")
    table = summary(pairs)
    columns = [k for k in next(iter(table.values())) if k.startswith("next_n")]
    lines += ["", "| geometric mean | " + " | ".join(columns) + " | all | ours slower |",
              "| --- " * (len(columns) + 3) + "|"]
    for way, row in table.items():
        lines.append(f"| {way} | " + " | ".join(f"{row[c]:.2f}" for c in columns) +
                     f" | {row['all']:.2f} | {row['slower']} of {row['steps']} |")
    shares = floor_shares(pairs)
    if shares:
        lines += ["", f"Share of the HBM floor, steps of at least {FLOOR_FROM_TOKENS >> 10}K tokens (geometric mean / "
                  "best): " + "; ".join(f"next_n {n}: ours {a:.2f} / {b:.2f}, theirs {c:.2f} / {d:.2f}"
                                         for n, (a, b, c, d) in shares.items())]
    if shares and tflops:
        lines += ["", f"Share of the step's bound, the larger of the HBM floor and the products at {tflops:,.0f} TFLOP/s "
                  "(the run's sustained fp8 rate), the same steps: " + "; ".join(
                      f"next_n {n}: ours {a:.2f} / {b:.2f}, theirs {c:.2f} / {d:.2f}"
                      for n, (a, b, c, d) in bound_shares(pairs, tflops).items())]
    return "\n".join(lines) + "\n"


def report(ours_path: str | Path, theirs_path: str | Path) -> str:
    return markdown(paired(read_steps(ours_path), read_steps(theirs_path)), read_head(ours_path).get(FP8_RATE))
