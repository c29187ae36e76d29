import pytest

from generator.space import AXES, enumerate_space, rejection_reason, valid_variants
from runtime.arch import ARCHS, arch_for_capability
from runtime.defaults import default_variant, default_variants, kernel_kinds
from runtime.variant import Variant


def test_name_round_trips_and_is_filename_safe():
    for v, _ in enumerate_space(heads=32, top_k=2048, arch="sm90a"):
        assert Variant.from_name(v.name) == v
        assert all(c.isalnum() or c == "_" for c in v.name)


def test_name_encodes_every_parameter():
    """Every field is in the name, but an optional one at its default (no selector warps, no paged build,
    the gate in fp32), which the name leaves out and the parser restores."""
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(Variant)}
    for v in (default_variant(64, 1024, mma="mmasync"), default_variant(64, 1024, mma="wgmma", gated=True),
              Variant.from_name("mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16")):
        for name, value in v.params().items():
            assert str(value) in v.name or value == defaults[name], name
        assert Variant.from_name(v.name) == v
    streaming = default_variant(64, 1024, mma="wgmma", gated=False)
    assert not streaming.gated and "_m" not in streaming.name  # streaming names are unchanged by the gate axis
    assert default_variant(64, 1024, mma="wgmma", gated=True).name.endswith("_m32")
    selecting = Variant.from_name(default_variant(64, 1024, mma="wgmma", gated=True).name + "_sw3")
    assert selecting.select_warps == 3 and selecting.name.endswith("_m32_sw3")


def test_the_fp16_gate_is_named_last_and_keeps_its_fp32_rescan():
    v = Variant.from_name("mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16")
    assert v.gate_bits == 16 and v.select_warps == 7 and Variant.from_name(v.name) == v
    assert v.rescan_variant.gate_bits == 32 and "_g16" not in v.rescan_variant.name
    with pytest.raises(ValueError, match="gated in fp32"):
        v.paged_build(64)


@pytest.mark.parametrize("bad", ["", "mqa_topk_mmasync_sm90a_h32", "mqa_topk_mmasync_sm90a_h32_k2048_r2_t256_w8_s3_b4096_x"])
def test_bad_names_are_rejected(bad):
    with pytest.raises(ValueError, match="not a Variant name"):
        Variant.from_name(bad)


def test_every_model_configuration_has_valid_variants_on_every_arch_and_core():
    for arch in ARCHS:
        for mma in ARCHS[arch].mma_kinds:
            for heads in AXES["heads"]:
                for top_k in AXES["top_k"]:
                    assert valid_variants(arch=arch, mma=mma, heads=heads, top_k=top_k), (arch, mma, heads, top_k)


def test_defaults_are_valid():
    for arch in ARCHS:
        for mma, gated in kernel_kinds(arch):
            for heads in AXES["heads"]:
                for top_k in AXES["top_k"]:
                    v = default_variant(heads, top_k, arch, mma, gated)
                    assert rejection_reason(v) is None
                    assert (v.arch, v.mma, v.heads, v.top_k, v.gated) == (arch, mma, heads, top_k, gated)


def test_kernel_kinds_and_their_defaults():
    assert kernel_kinds("sm90a") == [("mmasync", False), ("wgmma", False), ("wgmma", True)]
    assert kernel_kinds("sm89") == [("mmasync", False)]
    assert default_variant(32, 2048).gated  # the gate is Hopper's default fused kernel
    assert [(v.mma, v.gated) for v in default_variants(32, 2048)] == kernel_kinds("sm90a")


def test_a_gated_variant_carries_its_rescan_kernel():
    v = default_variant(32, 2048, gated=True)
    r = v.rescan_variant
    assert not r.gated and r.mma == "wgmma" and r.rows == v.rows and rejection_reason(r) is None
    assert v.kernels == ("fused_mqa_topk_gate_kernel", "fused_mqa_topk_kernel")


def _with(**changes):
    return Variant(**{**default_variant(32, 2048, mma="mmasync").params(), **changes})


@pytest.mark.parametrize("changes, reason", [
    (dict(buffer=2048), "buffer 2048 < top_k \\+ key_tile"),                 # no room for a tile after compaction
    (dict(key_tile=128, warps=8, buffer=4096, stages=3), None),              # 128 keys over 8 warps: one m16 tile each
    (dict(rows=4), "registers a thread"),                                    # 128 query columns cannot stay in registers
    (dict(stages=4, buffer=8192), "bytes of shared memory"),                 # over the 227 KiB opt-in limit
    (dict(arch="sm89"), "bytes of shared memory"),                           # Ada allows 99 KiB
    (dict(buffer=3072, warps=8, key_tile=256), None),
    (dict(heads=48), "heads=48 is not one of"),
    (dict(mma="tcgen05"), "mma=tcgen05 is not one of"),
    (dict(mma="wgmma", arch="sm89"), "sm89 has no wgmma scoring core"),
    (dict(mma="wgmma", key_tile=256, warps=8), "key_tile must be 128 \\("),                # streaming: one slice
    (dict(mma="wgmma", key_tile=256, warps=8, rows=4, buffer=16384, sample_tiles=16), None),  # gate: two slices
    (dict(mma="wgmma", key_tile=192, warps=8, rows=4, buffer=16384, sample_tiles=16), "key_tile must be 128 or 256"),
    (dict(mma="wgmma", key_tile=128, warps=8, rows=1), "wgmma N = rows x heads = 32"),
    (dict(mma="wgmma", key_tile=128, warps=8, rows=4, buffer=3072), None),
    (dict(mma="wgmma", key_tile=128, warps=8, rows=4, buffer=6144), "bytes of shared memory"),
    (dict(sample_tiles=8), "gate .* runs on the wgmma core only"),
    (dict(mma="wgmma", key_tile=192, warps=12, rows=4, buffer=16384, sample_tiles=16), None),
    (dict(mma="wgmma", key_tile=192, warps=12, rows=4, heads=64, buffer=16384, sample_tiles=16), "registers a thread"),
    (dict(mma="wgmma", key_tile=192, warps=12, rows=4, top_k=512, buffer=2048, sample_tiles=16), "does not fit a 2048-entry slab"),
    (dict(mma="wgmma", key_tile=192, warps=12, rows=4, buffer=3072, sample_tiles=8), "< 2 x top_k"),
    (dict(mma="wgmma", key_tile=192, warps=12, rows=4, buffer=16384, sample_tiles=16, select_warps=3), None),
    (dict(mma="wgmma", key_tile=128, warps=8, rows=4, buffer=3072, select_warps=3), "selector warps .* gate's slabs only"),
    (dict(mma="wgmma", key_tile=256, warps=8, rows=4, buffer=16384, sample_tiles=16, select_warps=7), None),
    (dict(mma="wgmma", key_tile=192, warps=12, rows=4, buffer=16384, sample_tiles=16, select_warps=7), "two math warpgroups"),
    # the fp16 gate: 64 heads in two-row blocks, gated variants only; its region fits beside three K stages
    (dict(mma="wgmma", key_tile=256, warps=8, rows=2, heads=64, stages=3, buffer=16384, sample_tiles=32, select_warps=7,
          gate_bits=16), None),
    (dict(mma="wgmma", key_tile=256, warps=8, rows=4, buffer=16384, sample_tiles=16, gate_bits=16), "64 heads in two-row"),
    (dict(mma="wgmma", key_tile=128, warps=8, rows=2, heads=64, buffer=3072, gate_bits=16), "gated variants .* only"),
    (dict(mma="wgmma", key_tile=256, warps=8, rows=2, heads=64, stages=4, buffer=16384, sample_tiles=32, select_warps=7,
          gate_bits=16), "bytes of shared memory"),
    (dict(gate_bits=8), "gate_bits=8"),
])
def test_rejection_reasons(changes, reason):
    got = rejection_reason(_with(**changes))
    if reason is None:
        assert got is None
    else:
        assert got is not None
        import re
        assert re.search(reason, got), got


def test_selector_warps_take_registers_only_where_the_math_warps_have_them_to_give():
    """Selector warps keep 56 registers in the producer warpgroup: with three math warpgroups it has
    them anyway (the split's rounding), with two the math warps go from 232 to 224; a selector
    warpgroup more (512 threads, 128 registers each at launch) leaves them 200."""
    three = _with(mma="wgmma", key_tile=192, warps=12, rows=4, buffer=16384, sample_tiles=16)
    two = _with(mma="wgmma", key_tile=256, warps=8, rows=4, buffer=16384, sample_tiles=16)
    for v, before, after in ((three, 152, 152), (two, 232, 224)):
        assert (v.registers_available(), _with(**{**v.params(), "select_warps": 3}).registers_available()) == (before, after)
    seven = _with(**{**two.params(), "select_warps": 7})
    assert (seven.threads, seven.registers_available()) == (512, 200)


def test_rejected_points_are_listed_with_reasons():
    rejected = [(v, r) for v, r in enumerate_space(heads=32, top_k=2048, arch="sm90a") if r]
    valid = [v for v, r in enumerate_space(heads=32, top_k=2048, arch="sm90a") if r is None]
    assert rejected and valid
    assert all(isinstance(r, str) and len(r) > 10 for _, r in rejected)


def test_unknown_axis_is_an_error():
    with pytest.raises(ValueError, match="unknown axes"):
        list(enumerate_space(colour="red"))


def test_arch_for_capability():
    assert arch_for_capability(9, 0).name == "sm90a"
    assert arch_for_capability(10, 0).name == "sm100a"
    assert arch_for_capability(8, 9).name == "sm89"
    assert arch_for_capability(12, 0).name == "sm89"  # the portable build runs on later parts
    assert arch_for_capability(8, 0) is None  # no fp8 tensor cores


def test_smem_estimate_grows_with_each_buffer():
    v = default_variant(32, 2048, mma="mmasync")
    assert _with(stages=4).smem_bytes() - v.smem_bytes() == v.key_tile * (128 + 16 + 4)
    assert _with(buffer=6144).smem_bytes() - v.smem_bytes() == 2 * v.rows * 2048 * 4


def test_the_dense_path_ships_a_top_k_for_short_rows_and_one_for_long():
    from generator.shipped import shipped_dense_variants
    from runtime.dense_variant import default_dense_variant, dense_rejection_reason

    shipped = shipped_dense_variants()
    assert len(shipped) == 12 and all(dense_rejection_reason(v) is None for v in shipped)
    short, long = default_dense_variant(64, 2048, short_rows=True), default_dense_variant(64, 2048)
    assert (short.topk_threads, short.topk_buffer) == (256, 4096) and (long.topk_threads, long.topk_buffer) == (512, 8192)
    assert {(v.rows, v.math_wgs, v.slices) for v in (short, long)} == {(2, 2, 2)}  # the same logits kernel


def test_a_gated_answer_must_fit_the_selections_stage():
    """One row a block stages at most 2 x 512 answers (the template's static_assert fails to compile
    beyond): the space rejects such a point before nvcc does."""
    from dataclasses import replace

    gated = default_variant(64, 2048, gated=True)
    assert rejection_reason(gated) is None
    reason = rejection_reason(replace(gated, rows=1))
    assert reason and "stages an answer" in reason, reason
    assert rejection_reason(replace(default_variant(64, 1024, gated=True), rows=1)) is None
