"""tools/landscape_drift.py and `regret --record --fastest`: a landscape's timings profiled by position,
a second recording compared with the first, and the points a second recording takes (no GPU needed)."""

import pytest

from generator.regret import fastest_points
from generator.space import valid_variants
from generator.study import Bucket
from tools import landscape_drift as tool


def test_the_profile_finds_a_first_timing_that_runs_fast_and_spreads_the_fastest_points():
    points = {"a": [0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "b": [1.8, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
              "c": [3.0, 3.0], "d": None}  # (c: stopped early, d: failed: both left out)
    d = tool.drift(points, top=1)
    assert (d["points"], d["reps"], d["top"]) == (2, 7, 1)
    assert d["profile"][0] == pytest.approx(0.9) and d["profile"][1:] == [1.0] * 6
    assert d["top_spread"] == pytest.approx(0.1) and d["top_within"] == 0.0


def test_a_second_recording_that_swaps_the_two_fastest_points_is_said_to():
    first = {"a": [1.00] * 7, "b": [1.01] * 7, "c": [2.0] * 7, "only-first": [0.5] * 7}
    second = {"a": [1.03] * 7, "b": [1.01] * 7, "c": [2.0] * 7}
    r = tool.rerun(first, second)
    assert r["points"] == 3 and r["largest_move"] == pytest.approx(0.03)
    assert r["first_best_in_second"] == pytest.approx(1.03 / 1.01 - 1)  # a, by the second's timings
    assert r["second_best_in_first"] == pytest.approx(0.01)  # b, by the first's
    assert r["rank_correlation"] == pytest.approx(0.5)
    assert tool.rerun(first, first)["rank_correlation"] == pytest.approx(1.0)
    assert tool.rerun(first, {"other": [1.0] * 7}) is None  # (no point in common: nothing to say)


def test_a_second_recording_takes_the_fastest_points_in_the_order_of_the_space(tmp_path):
    import json

    bucket, path = Bucket(32, 2048, 16384, 131072), tmp_path / "first.jsonl"
    space = valid_variants(arch="sm90a", heads=32, top_k=2048)[:5]
    ms = [3.0, 1.0, None, 2.0, 0.5]
    path.write_text("".join(json.dumps({"bucket": [32, 2048, 16384, 131072, 1], "variant": v.name,
                                        "ms": None if m is None else [m] * 7}) + "\n" for v, m in zip(space, ms)))
    assert fastest_points(space, bucket, path, 3) == [space[1], space[3], space[4]]
    with pytest.raises(SystemExit, match="--of"):
        fastest_points(space, bucket, None, 3)
    with pytest.raises(SystemExit, match="no points"):
        fastest_points(space, Bucket(64, 2048, 16384, 131072), path, 3)
