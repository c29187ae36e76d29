"""README.md's plot: our speed over the serving path's, per chunk and per decode step, from the raw runs
that BENCHMARKS.md cites (no GPU). Left: every prefill chunk of a `bench --sweep --serving` run (AUTO as a
server calls it), against the keys a row sees, one colour per rows in the chunk. Right: every decode
step of a `decode` run against the serving path's times of the same run (graph-replayed, the layout
given), against the tokens a step reads, one colour per next_n. Above the line at 1, ours is faster.

    python3 tools/headline_plot.py --sweep docs/results/h200-2026-12-01-62cecfd/sweep-run2.jsonl \
        --decode docs/results/h200-2026-12-05-decode/side/decode.jsonl \
        --decode-serving docs/results/h200-2026-12-05-decode/side/decode-serving.jsonl --out docs/headline.png

Needs matplotlib (`pip install -e .[report]`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generator.decode_report import WAYS, paired, read_steps  # noqa: E402
from generator.timing import geometric_mean  # noqa: E402


def sweep_points(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "vs_serving" in r]


def plot(sweep: list[dict], steps: list[tuple[dict, dict]], title: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for rows in sorted({r["rows"] for r in sweep}):
        mine = [r for r in sweep if r["rows"] == rows]
        left.scatter([r["keys"] // r["requests"] for r in mine], [r["vs_serving"] for r in mine], s=14,
                     label=f"{rows} rows", alpha=0.8)
    left.set_title(f"prefill: {len(sweep)} chunks, geometric mean "
                   f"{geometric_mean([r['vs_serving'] for r in sweep]):.2f}x")
    left.set_xlabel("keys a row sees (longest request)")
    left.set_ylabel("serving path time / ours")
    ratio = WAYS["graph-replayed, layout given"]
    for next_n in sorted({o["next_n"] for o, _ in steps}):
        mine = [(o, t) for o, t in steps if o["next_n"] == next_n]
        right.scatter([o["batch"] * o["context"] for o, _ in mine], [ratio(o, t) for o, t in mine], s=14,
                      label=f"next_n {next_n}", alpha=0.8)
    right.set_title(f"decode: {len(steps)} steps, geometric mean {geometric_mean([ratio(o, t) for o, t in steps]):.2f}x")
    right.set_xlabel("tokens a step reads (requests x context)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", type=Path, required=True, help="a `bench --sweep --serving` run's JSON lines")
    p.add_argument("--decode", type=Path, required=True, help="a `decode` run's JSON lines")
    p.add_argument("--decode-serving", type=Path, required=True, help="the serving path's times of the same steps")
    p.add_argument("--title", default="NVIDIA H200: the serving path (DeepGEMM's logits + vLLM's top-k) over ours, "
                                      "both timed in the same run")
    p.add_argument("--out", type=Path, default=Path("docs/headline.png"))
    args = p.parse_args()
    steps = paired(read_steps(args.decode), read_steps(args.decode_serving))
    plot(sweep_points(args.sweep), steps, args.title, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
