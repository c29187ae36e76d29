"""tools/timeline.py: the phase sums it reports from a launch's clock marks, and the marks compiled in
only on request (the shipped kernels carry none)."""

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import requires_nvcc

from runtime.build import nvcc_flags
from runtime.toolchain import nvcc_path
from runtime.defaults import default_variant
from runtime.render import render

REPO = Path(__file__).resolve().parent.parent


def load_tool():
    from tools import timeline

    return timeline


def synthetic_marks(tool):
    """One CTA at 2 GHz: a sampled item, an unsampled one, the end-of-work event; its selector warps'
    two items; its global timer over the same span."""
    m = np.zeros((tool.CTAS, tool.EVENTS, tool.MARKS), dtype=np.uint64)
    for e in range(2):
        o = 1000 + 1000 * e
        m[0, e, 0:9] = [o, o + 100, o + 200, o + 250, o + 300, o + 320, o + 400, o + 900, o + 1000]
    m[0, 1, 2:6] = 0  # no sample: its whole gate is "reload"
    m[0, 2, 0:2] = [3000, 3050]
    s = tool.SELECTOR
    m[0, 0, s:s + 3] = [1000, 2000, 2500]
    m[0, 1, s:s + 3] = [2500, 3000, 3400]
    m[0, 2, s:s + 2] = [3400, 3500]
    m[0, 0, tool.GLOBAL_START] = 500
    m[0, 0, tool.GLOBAL_END] = 500 + (3500 - 1000) // 2  # 2 cycles a ns
    return m


def test_summary_shares_and_times():
    tool = load_tool()
    report = tool.report([tool.launch_phases(synthetic_marks(tool))], "synthetic")
    lines = {line.split(":")[0].strip(): line for line in report.splitlines()}
    assert "SM clock 2.00 GHz" in report and "2 items" in report
    # The CTA's math span is 3050 - 1000 = 2050 cycles.
    assert "9.8%" in lines["wait"]  # 2 x 100
    assert "4.9%" in lines["sample"]  # 100, the sampled item only
    assert "18.5%" in lines["reload"]  # 80 + 300 (the unsampled item's whole gate)
    assert "48.8%" in lines["scan"]  # 2 x 500
    assert "busy 43.9%, idle 73.2%" in report  # (500 + 400), (1000 + 500)


def test_summary_without_marks_says_so():
    tool = load_tool()
    empty = np.zeros((tool.CTAS, tool.EVENTS, tool.MARKS), dtype=np.uint64)
    assert tool.launch_phases(empty) is None
    assert "no marks" in tool.report([None], "empty")


def exported(library: Path) -> str:
    return subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout


@requires_nvcc
def test_marks_only_where_asked_for(tmp_path):
    """timeline.py build exports the marks; the same source built as the shipped kernels are has none."""
    tool = load_tool()
    variant = default_variant(32, 2048, gated=True)
    assert subprocess.run([sys.executable, str(REPO / "tools" / "timeline.py"), "build", variant.name, "--out", str(tmp_path)],
                          cwd=REPO).returncode == 0
    marked = exported(tool.library_path(str(tmp_path), variant.name))
    for export in ("mqa_topk_timeline_read", "mqa_topk_timeline_clear", "mqa_topk_timeline_bytes"):
        assert export in marked
    # The shipped build's source as nvcc's preprocessor leaves it (for the host: what the library
    # exports), where compiling it again would take half a minute more.
    src = tmp_path / "plain.cu"
    src.write_text(render(variant))
    flags = [f for f in nvcc_flags(variant) if f not in ("-shared", "-Xptxas", "-v")]
    plain = subprocess.run([nvcc_path(), *flags, "-E", str(src)], check=True,
                           capture_output=True, text=True).stdout
    assert "mqa_topk_launch(" in plain and "mqa_topk_timeline" not in plain


@pytest.mark.parametrize("name", [default_variant(32, 2048, gated=False).name, "mqa_dense_sm90a_h32_k2048_r4_g2x2_q2_s4_t512_b8192_rc32"],
                         ids=["streaming", "dense, gathered"])
def test_timeline_refuses_variants_without_marks(tmp_path, name):
    tool = load_tool()
    with pytest.raises(SystemExit, match="the timeline marks are in the gated and paged kernels"):
        tool.cmd_build(argparse.Namespace(variant=[name], out=str(tmp_path)))


def test_cluster_phases_are_microseconds_of_each_ctas_span():
    """tools/cluster_timeline.py: a CTA's eight marks at 2 GHz over 4 us of global time give its seven
    phases in microseconds; a CTA that left at once (a short row: marks left at zero) is not counted."""
    from tools import cluster_timeline, timeline

    m = np.zeros((timeline.CTAS, timeline.EVENTS, timeline.MARKS), dtype=np.uint64)
    m[0, 0, :8] = [1000, 2000, 3000, 3200, 5000, 5000, 6000, 9000]  # 8000 cycles
    m[0, 0, timeline.GLOBAL_START], m[0, 0, timeline.GLOBAL_END] = 10_000, 14_000  # 4000 ns: 0.5 ns a cycle
    m[1, 0, 0] = 1000
    phases = cluster_timeline.cta_phases(m, 2)
    assert len(phases) == 1
    assert phases[0]["span_us"] == pytest.approx(4.0)
    assert [round(phases[0][p], 3) for p in cluster_timeline.PHASES] == [0.5, 0.5, 0.1, 0.9, 0.0, 0.5, 1.5]


def test_one_cta_row_phases_skip_the_unused_mark():
    """The one-CTA-a-row top-k (its mark 9 set) marks 0-5 and 7, not 6: its six phases come from those;
    a row that left the sampled route (no mark 4: the exact fallback) is not counted."""
    from tools import cluster_timeline, timeline

    m = np.zeros((timeline.CTAS, timeline.EVENTS, timeline.MARKS), dtype=np.uint64)
    m[0, 0, :8] = [1000, 1400, 2000, 6000, 7000, 7200, 0, 9000]  # 8000 cycles
    m[0, 0, cluster_timeline.ROW_MARK] = 1000
    m[0, 0, timeline.GLOBAL_START], m[0, 0, timeline.GLOBAL_END] = 10_000, 14_000  # 0.5 ns a cycle
    m[1, 0, :8] = [1000, 1400, 2000, 6000, 0, 0, 0, 9000]
    m[1, 0, cluster_timeline.ROW_MARK] = 1000
    m[1, 0, timeline.GLOBAL_START], m[1, 0, timeline.GLOBAL_END] = 10_000, 14_000
    phases = cluster_timeline.cta_phases(m, 2)
    assert len(phases) == 1 and phases[0]["route"] == "row"
    assert [round(phases[0][p], 3) for p, _, _ in cluster_timeline.ROW_PHASES] == [0.2, 0.3, 2.0, 0.5, 0.1, 0.9]


def test_report_takes_medians_over_launches():
    tool = load_tool()
    usual = tool.launch_phases(synthetic_marks(tool)) | {"ms": 1.0}
    slow = tool.launch_phases(synthetic_marks(tool) * 2) | {"ms": 3.0}  # every span doubled, shares unchanged
    odd = dict(usual, wait=usual["wait"] * 5, ms=2.0)
    text = tool.report([usual, odd, slow], "three")
    assert "medians of 3 launch(es)" in text
    wait = next(line for line in text.splitlines() if line.strip().startswith("wait:"))
    assert "9.8%" in wait  # the odd launch's wait is not the median
    assert "launch 2.000 ms by CUDA events (min 1.000, max 3.000)" in text
