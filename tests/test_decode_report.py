"""The decode report (generator/decode_report.py, `decode --report --serving`): ours against the serving
path's times on the same steps, without a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.decode_report import paired, read_steps, report, summary

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
], ids=["03c30d2", "b5b943e"])
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
