"""The decode report (generator/decode_report.py, `decode --report --serving`): ours against the serving
path's times on the same steps, without a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.decode_report import FP8_RATE, paired, products_ms, read_steps, report, summary

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"


def step(batch, context, next_n, **times):
    return {"batch": batch, "context": context, "next_n": next_n, "heads": 64, "top_k": 2048, **times}


def test_ratios_are_theirs_over_ours_and_count_where_ours_is_slower(tmp_path):
    ours = [step(1, 8192, 1, graph_ms=2.0, layout_graph_ms=1.0, layout_eager_ms=4.0, floor_ms=0.5),
            step(64, 8192, 1, graph_ms=1.0, layout_graph_ms=1.0, layout_eager_ms=1.0, floor_ms=0.5),
            step(4, 8192, 4, graph_ms=1.0, layout_graph_ms=1.0, layout_eager_ms=1.0, floor_ms=0.5)]
    theirs = [step(1, 8192, 1, graph_ms=1.0, eager_ms=2.0), step(64, 8192, 1, graph_ms=4.0, eager_ms=1.0)]
    (tmp_path / "ours.jsonl").write_text("\n".join(json.dumps(r) for r in [{"copy_rate_bytes_per_s": 1.0}] + ours))
    (tmp_path / "theirs.jsonl").write_text("\n".join(json.dumps(r) for r in theirs))
    pairs = paired(read_steps(tmp_path / "ours.jsonl"), read_steps(tmp_path / "theirs.jsonl"))
    assert len(pairs) == 2  # (the step only ours timed is left out)
    table = summary(pairs)
    assert table["graph-replayed, as called"]["all"] == pytest.approx(2 ** 0.5)  # 0.5 and 4
    assert table["graph-replayed, layout given"]["all"] == pytest.approx(2.0)  # 1 and 4
    assert table["eager, layout given"]["slower"] == 1 and table["eager, layout given"]["all"] == pytest.approx(0.5 ** 0.5)
    text = report(tmp_path / "ours.jsonl", tmp_path / "theirs.jsonl")
    assert "| 1, B 1 | 1.00 |" in text and "| 1, B 64 | 4.00 |" in text and "floor" in text


@pytest.mark.parametrize(("folder", "summary_line", "table_line"), [
    ("h200-2026-12-03-serving", "| graph-replayed, layout given | 0.74 | 0.70 | 1.17 | 0.85 | 201 of 300 |",
     "| 4, B 64 | 1.39 | 1.27 | 2.32 | 2.28 | 2.30 |"),
    ("h200-2026-12-03-cluster", "| graph-replayed, as called | 0.84 | 0.84 | 1.36 | 0.99 | 197 of 300 |",
     "| 1, B 1 | 0.94 | 0.64 | 0.68 | 0.92 | 0.97 |"),
    ("h200-2026-12-05-decode/side", "| graph-replayed, as called | 0.95 | 0.99 | 1.67 | 1.16 | 142 of 300 |",
     "| eager, layout given | 0.76 | 0.79 | 1.30 | 0.92 | 218 of 300 |"),
], ids=["03c30d2", "b5b943e", "7d7ae57"])
def test_the_recorded_runs_read_as_benchmarks_gives_them(folder, summary_line, table_line):
    """BENCHMARKS.md's "Decode against the serving path" figures from their raw files, by the command."""
    results = RESULTS / folder
    done = subprocess.run([sys.executable, "-m", "generator", "decode", "--report", str(results / "decode.jsonl"),
                           "--serving", str(results / "decode-serving.jsonl")], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert summary_line in done.stdout and table_line in done.stdout
    benchmarks = (REPO / "BENCHMARKS.md").read_text()
    assert table_line in benchmarks


def test_report_and_serving_go_together():
    done = subprocess.run([sys.executable, "-m", "generator", "decode", "--report", "x.jsonl"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--serving" in done.stderr


def test_the_bound_is_the_products_where_they_take_longer_than_the_floor(tmp_path):
    """With the run's fp8 rate in its head line the report adds each step's share of its bound, the larger of
    the HBM floor and the products at that rate; without it, only the floor's share (as older runs read)."""
    # 256 x 2K at next_n 4, H = 64: 256 x (4 x 2048 - 6) visible pairs x 2 x 64 x 128 FLOPs = 34.3 GFLOP, 0.137 ms
    # at 250 TFLOP/s, above its floor of 0.1 ms; at next_n 1 about a quarter of that, under it.
    ours = [step(256, 524288 // 256, 4, graph_ms=0.4, layout_graph_ms=0.2, layout_eager_ms=1.0, floor_ms=0.1),
            step(256, 524288 // 256, 1, graph_ms=0.4, layout_graph_ms=0.2, layout_eager_ms=1.0, floor_ms=0.1)]
    theirs = [step(256, 524288 // 256, 4, graph_ms=0.5, eager_ms=1.0), step(256, 524288 // 256, 1, graph_ms=0.5, eager_ms=1.0)]
    assert products_ms(ours[0], 1000.0) == pytest.approx(256 * (4 * 2048 - 6) * 2 * 64 * 128 / 1e15 * 1e3)
    (tmp_path / "theirs.jsonl").write_text("\n".join(json.dumps(r) for r in theirs))
    for head, bound in [({"copy_rate_bytes_per_s": 1.0}, False), ({"copy_rate_bytes_per_s": 1.0, FP8_RATE: 250.0}, True)]:
        (tmp_path / "ours.jsonl").write_text("\n".join(json.dumps(r) for r in [head] + ours))
        text = report(tmp_path / "ours.jsonl", tmp_path / "theirs.jsonl")
        assert "next_n 4: ours 0.50 / 0.50, theirs 0.20 / 0.20" in text  # the HBM floor's share either way
        assert ("Share of the step's bound" in text) == bound
    products = products_ms(ours[0], 250.0)
    assert products > 0.1 > products_ms(ours[1], 250.0)
    bound_line = text.split("Share of the step's bound")[1]
    assert f"next_n 4: ours {products / 0.2:.2f} / {products / 0.2:.2f}, theirs {products / 0.5:.2f}" in bound_line
    assert "next_n 1: ours 0.50 / 0.50, theirs 0.20 / 0.20" in bound_line  # (the floor, where it is the larger)
