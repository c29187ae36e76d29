"""tools/decode_by_prefill.py: the prefill kernels it tries on a decode step (no GPU needed)."""

from pathlib import Path

from generator.space import rejection_reason
from runtime.defaults import default_variant
from runtime.table import load_table, nearest
from runtime.variant import Variant
from tools import decode_by_prefill as tool

SHIPPED = Path(__file__).resolve().parent.parent / "tuned_configs" / "H200-132SM.json"


def test_a_step_tries_the_long_chunks_choice_then_its_shape_at_each_valid_rows_per_block():
    tried = tool.candidates(64, 2048, 131072, SHIPPED)
    choice = Variant.from_name(nearest(load_table(SHIPPED), 64, 2048, 16384, 131072).variant)
    assert tried[0] == choice and choice.mma == "wgmma"
    assert len({v.rows for v in tried}) == len(tried)  # (one shape, its rows per block apart)
    assert all(rejection_reason(v) is None and v.paged_build(64).page_block_size == 64 for v in tried)
    # (at H = 64, top-2048 the gate's two rows x 512 gathered ints need r >= 2, and r = 4's 256 columns
    # do not fit the registers; at H = 32 a row is 32 columns, under wgmma's 64)
    assert [v.rows for v in tried] == [2]
    assert sorted(v.rows for v in tool.candidates(32, 2048, 131072, SHIPPED)) == [2, 4]


def test_without_a_table_a_step_starts_from_the_untuned_gated_default():
    assert tool.candidates(32, 512, 8192, None)[0] == default_variant(32, 512)
