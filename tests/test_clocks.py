"""tools/clocks.py: nvidia-smi's lines parsed, and a phase's samples summarised (no GPU needed)."""

from tools import clocks as tool


def test_parse_line_reads_the_fields_and_rejects_partial_lines():
    s = tool.parse_line(5.0, "1725, 691.20, 60, 0x0000000000000004\n")
    assert (s.t, s.sm_mhz, s.watts, s.celsius, s.reasons) == (5.0, 1725.0, 691.2, 60.0, 4)
    assert tool.parse_line(1.0, "1725, [N/A], 60, 0x4") is None
    assert tool.parse_line(1.0, "1725, 691.2") is None


def test_summarize_skips_the_settling_quarter_and_ors_the_reasons():
    samples = [tool.Sample(t, 1980.0 if t < 1.0 else 1410.0 + t, 700.0, 50.0 + t, 1 << int(t)) for t in range(5)]
    # phase [0, 4]: the first quarter (t < 1) is skipped; t = 1..4 remain
    got = tool.summarize(samples, 0.0, 4.0)
    assert got.samples == 4
    assert got.sm_mhz == 1412.5  # median of 1411, 1412, 1413, 1414
    assert got.celsius_max == 54.0
    assert got.reasons == 0b11110
    assert tool.summarize(samples, 10.0, 11.0).samples == 0
    assert "no clock samples" in str(tool.summarize(samples, 10.0, 11.0))
