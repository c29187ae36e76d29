"""tools/decode_table_transfer.py (no GPU): each policy's time on this GPU over the faster path of each
step, and the steps two tables choose differently."""

from __future__ import annotations

import pytest

from runtime.decode_table import DecodeEntry
from tools.decode_table_transfer import transfer


def tables():
    step = lambda b: (64, 2048, 1, b, 8192)  # noqa: E731
    here = {step(1): DecodeEntry(64, 2048, 1, 1, 8192, 0.040, 0.030, 0.010),  # dense 4x faster (layout given)
            step(4): DecodeEntry(64, 2048, 1, 4, 8192, 0.020, 0.030, 0.025)}  # the kernel 1.25x faster
    other = {step(1): DecodeEntry(64, 2048, 1, 1, 8192, 0.050, 0.030, 0.012),  # dense: agrees
             step(4): DecodeEntry(64, 2048, 1, 4, 8192, 0.030, 0.025, 0.020)}  # dense: differs
    return here, other


def test_each_policy_is_timed_on_this_gpus_times_against_its_faster_path():
    here, other = tables()
    ratios, differ = transfer(here, other, planned=True)
    assert ratios["this GPU's own table"] == pytest.approx(1.0)
    assert ratios["the paged kernel everywhere"] == pytest.approx((4.0 * 1.0) ** 0.5)
    assert ratios["the borrowed table"] == pytest.approx((1.0 * 1.25) ** 0.5)
    assert [(k[3], own, borrowed) for k, own, borrowed, *_ in differ] == [(4, "kernel", "dense")]
    ratios, _ = transfer(here, other, planned=False)  # as called: dense 0.030 at B 1, so the kernel's 0.040 is 1.33x
    assert ratios["the paged kernel everywhere"] == pytest.approx((0.040 / 0.030 * 1.0) ** 0.5)
