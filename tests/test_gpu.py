"""The fused kernel on the GPU against the reference: every family, every shipped default variant,
single- and multi-request chunks, large chunks (spot-checked rows), the public API's dispatch,
torch.compile and CUDA graphs. Skipped, with the reason, where there is no suitable GPU."""

import dataclasses

import pytest
import torch
from conftest import requires_gpu

from generator import check
from generator.space import AXES, rejection_reason
from generator.verify import verify_topk
from generator.workloads import FAMILIES, make_workload
from runtime import dense_mqa_topk, fused_mqa_topk
from runtime.defaults import default_variant, default_variants, kernel_kinds
from runtime.variant import Variant
from runtime.dense_variant import (
    SHORT_TOPK_SMALL_CTA,
    SHORT_TOPK_THREADS,
    default_dense_variant,
)

pytestmark = requires_gpu

DEFAULTS = [v for h in AXES["heads"] for k in AXES["top_k"] for v in default_variants(h, k)]
# The gated defaults with selector warps (each block's answers selected beside the next block's scan),
# and the two-warpgroup shape that tuned tables pick from 256K keys up, with three selector warps and
# with seven (a selector warpgroup more).
WITH_SELECTORS = [dataclasses.replace(v, select_warps=3) for v in DEFAULTS if v.gated] + [
    dataclasses.replace(v, key_tile=256, warps=8, stages=stages, sample_tiles=16, select_warps=select_warps)
    for v in DEFAULTS if v.gated and v.top_k == 2048 for stages, select_warps in ((3, 3), (4, 7))]
KINDS = kernel_kinds("sm90a")


def run_poisoned(variant, wl):
    out = check.run_poisoned(variant, wl)
    assert not (out == check.POISON).any(), "elements left unwritten"
    return out


@pytest.mark.parametrize("variant", DEFAULTS + WITH_SELECTORS, ids=lambda v: v.name)
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_matches_reference_on_every_family(variant, family):
    wl = make_workload(family, 320, max(9000, 4 * variant.top_k), variant.heads, variant.top_k, seed=31, device="cuda")
    report = verify_topk(run_poisoned(variant, wl), *wl.args())
    assert report.ok, report.summary()


@pytest.mark.parametrize("variant", DEFAULTS, ids=lambda v: v.name)
def test_fused_on_a_full_chunk_at_a_million_keys(variant):
    wl = make_workload("random", 16384, 1 << 20, variant.heads, variant.top_k, seed=5, device="cuda")
    out = run_poisoned(variant, wl)
    report = verify_topk(out, *wl.args(), rows=check.sampled_rows(wl.rows, 24, seed=0))
    assert report.ok, report.summary()


@pytest.mark.parametrize("variant", [v for v in DEFAULTS + WITH_SELECTORS if v.top_k == 2048 or v.heads == 64 and v.top_k == 512],
                         ids=lambda v: v.name)
def test_fused_on_a_multi_request_chunk(variant):
    wl = make_workload("multi_request", 4096, 300_000, variant.heads, variant.top_k, seed=8, device="cuda")
    report = verify_topk(run_poisoned(variant, wl), *wl.args(), rows=check.sampled_rows(wl.rows, 64, seed=0))
    assert report.ok, report.summary()


def test_dense_path_on_the_gpu():
    for family in ("random", "large_offset", "short_rows"):
        wl = make_workload(family, 512, 20_000, 32, 2048, seed=2, device="cuda")
        report = verify_topk(dense_mqa_topk(*wl.args(), logits_budget_bytes=8 << 20), *wl.args())
        assert report.ok, f"{family}: {report.summary()}"
    wl = make_workload("multi_request", 512, 20_000, 32, 2048, seed=2, device="cuda")
    out = torch.full((wl.rows, 2048), check.POISON, dtype=torch.int32, device="cuda")  # (a server's buffer)
    assert dense_mqa_topk(*wl.args(), logits_budget_bytes=8 << 20, out=out) is out
    assert not (out == check.POISON).any(), "elements left unwritten"
    report = verify_topk(out, *wl.args())
    assert report.ok, report.summary()


@pytest.mark.parametrize("top_k", AXES["top_k"])
@pytest.mark.parametrize("family", ["random", "multi_request", "all_equal", "boundary_ties", "short_rows", "mostly_zero"])
def test_the_short_row_top_k_on_the_gpu(family, top_k):
    """The dense top-k for rows told to be short (a row in registers), over poisoned outputs: rows of at
    most its capacity (spread scores: the k-th's bin gathered; ties: its exact select over the
    registers) and rows longer than the caller said (its exact route over memory); in each of its CTAs,
    at the longest window it holds and a little less (the small CTA's at top-512)."""
    variant = default_dense_variant(32, top_k, short_rows=True)
    threads, held = SHORT_TOPK_SMALL_CTA
    holds = sorted({threads * held, *(t * variant.reg_cached for t in SHORT_TOPK_THREADS)})
    windows = [(w - d, w - d) for w in holds for d in (0, 36) if w - d > top_k]
    for keys, told in (*windows, (20_000, variant.short_row_keys)):
        c = check.verify_dense(32, top_k, family, 384, keys, seed=3, variant=variant, told_longest_row=told)
        assert c.ok, c.line()


@pytest.mark.parametrize("path", ["fused", "dense", "auto"])
def test_public_api_paths_agree_with_the_reference(path, monkeypatch):
    monkeypatch.setenv("FUSED_MQA_TOPK_PATH", path)
    wl = make_workload("multi_request", 600, 30_000, 64, 1024, seed=4, device="cuda")
    report = verify_topk(fused_mqa_topk(*wl.args()), *wl.args())
    assert report.ok, report.summary()


@pytest.mark.parametrize("mma, gated", KINDS)
def test_torch_compile_uses_the_custom_op(mma, gated):
    name = default_variant(32, 512, mma=mma, gated=gated).name  # a plain string: compiled code should not build names
    wl = make_workload("random", 256, 8192, 32, 512, seed=6, device="cuda")

    @torch.compile(fullgraph=True)
    def f(q, k, s, w, ks, ke):
        return fused_mqa_topk(q, (k, s), w, ks, ke, 512, variant=name, validate=False)

    out = f(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke)
    assert verify_topk(out, *wl.args()).ok


@pytest.mark.parametrize("mma, gated", KINDS)
def test_cuda_graph_replays_on_new_data(mma, gated):
    variant = default_variant(64, 2048, mma=mma, gated=gated)
    a = make_workload("random", 256, 10_000, 64, 2048, seed=1, device="cuda")
    b = make_workload("peaked", 256, 10_000, 64, 2048, seed=2, device="cuda")
    static = [t.clone() for t in (a.q, a.k_fp8, a.k_scale, a.weights, a.ks, a.ke)]

    def call():
        q, k, s, w, ks, ke = static
        return fused_mqa_topk(q, (k, s), w, ks, ke, 2048, variant=variant, validate=False)

    call()  # load and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for src, dst in zip((b.q, b.k_fp8, b.k_scale, b.weights, b.ks, b.ke), static):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert verify_topk(out, *b.args()).ok


@pytest.mark.parametrize("select_warps", AXES["select_warps"])
def test_gate_serves_random_rows_and_rescans_what_it_cannot(select_warps):
    """Random rows pass the gate (no rescans); all-equal scores overflow every slab, so every block is
    redone by the exact streaming kernel, and both answers are exact."""
    from runtime.fused import launch_variant

    variant = dataclasses.replace(default_variant(32, 2048, gated=True), select_warps=select_warps)
    if rejection_reason(variant):  # (seven selector warps need the two-warpgroup shape)
        variant = dataclasses.replace(variant, key_tile=256, warps=8)
    for family, expect_rescans in (("random", False), ("all_equal", True), ("increasing", False)):
        wl = make_workload(family, 640, 60_000, 32, 2048, seed=3, device="cuda")
        stats = {}
        out = launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, 2048,
                             out=torch.full((wl.rows, 2048), check.POISON, dtype=torch.int32, device="cuda"),
                             stats=stats)
        assert not (out == check.POISON).any(), f"{family}: elements left unwritten"
        assert (stats["rescan_blocks"] > 0) == expect_rescans, (family, stats)
        report = verify_topk(out, *wl.args())
        assert report.ok, f"{family}: {report.summary()}"


SPLITTING = [v for v in WITH_SELECTORS if v.top_k == 2048 or v.heads == 64 and v.top_k == 512]


def run_with_stats(variant, wl):
    from runtime.fused import launch_variant

    stats = {}
    out = launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, variant.top_k,
                         out=torch.full((wl.rows, variant.top_k), check.POISON, dtype=torch.int32, device="cuda"),
                         stats=stats)
    assert not (out == check.POISON).any(), "elements left unwritten"
    return out, stats


@pytest.mark.parametrize("variant", SPLITTING, ids=lambda v: v.name)
@pytest.mark.parametrize("family", FAMILIES)
def test_split_tail_matches_reference_on_every_family(variant, family):
    """The tail's blocks, each cut into parts (at least 4 x the gate floor: 4 of 35,000 keys at
    top-2048, 8 of 17,500 at top-512) that are sampled and gated on their own, are answered exactly
    from all their parts' candidates on every family. Random rows and rows whose scores rise along the
    keys (the parts' gates far apart) need no rescan; with every score equal the parts overflow and
    their blocks are rescanned whole."""
    wl = make_workload(family, check.split_tail_rows(variant, 3), 140_000, variant.heads, variant.top_k, seed=17, device="cuda")
    out, stats = run_with_stats(variant, wl)
    report = verify_topk(out, *wl.args())
    assert report.ok, f"{report.summary()} {stats}"
    if family in ("random", "increasing"):
        assert stats == {"rescan_blocks": 0, "split_blocks": 3}, stats
    elif family == "all_equal":
        assert stats["split_blocks"] == 0 and stats["rescan_blocks"] > 0, stats
    assert stats["split_blocks"] <= 3, stats


def layout_top_k(rows: int) -> int:
    """The largest top-k the gated kernel serves at `rows` rows a block (one row stages at most 1,024
    answers: generator.space.GATE_GATHER)."""
    return 2048 if rows >= 2 else 1024


def layout_variants(heads: int, rows: int) -> list:
    """The gated (without and with selector warps), streaming and dense wgmma kernels at `rows` rows a
    block: the first valid shape of each (the widest product columns rule out two pipelined slices)."""
    out = []
    top_k = layout_top_k(rows)
    for gated in (True, False):
        base = default_variant(heads, top_k, gated=gated)
        shapes = [(256, 8), (128, 8)] if gated else [(128, 8)]
        valid = [v for kt, w in shapes
                 if rejection_reason(v := dataclasses.replace(base, rows=rows, key_tile=kt, warps=w)) is None]
        assert valid, f"no valid {'gated' if gated else 'streaming'} variant at {rows} rows x {heads} heads"
        out.append(valid[0])
    return [out[0], dataclasses.replace(out[0], select_warps=3), out[1],
            dataclasses.replace(default_dense_variant(heads, top_k), rows=rows)]


# Rows a block with a valid wgmma N (64 or 128: 256 columns need more registers than a thread has).
# The query tile's column order gives a lane whole rows at four rows a block, half a row at two, a
# quarter at one (sm90::LaneTotals); the defaults and the tuned tables use four (H = 32) and two
# (H = 64), so the others are checked here.
LAYOUTS = [(h, r) for h in AXES["heads"] for r in AXES["rows"] if r * h in (64, 128)]


@pytest.mark.parametrize("heads,rows", LAYOUTS, ids=lambda x: str(x))
def test_every_rows_per_block_layout(heads, rows):
    from runtime.fused import launch_variant

    gated, selecting, streaming, dense = layout_variants(heads, rows)
    top_k = layout_top_k(rows)
    # short_rows: range checks inside tiles; all_equal: every gated block rescanned by the streaming kernel.
    for family in ("random", "short_rows", "all_equal"):
        wl = make_workload(family, 97, 20_000, heads, top_k, seed=11, device="cuda")  # a partial last block
        for variant in (gated, selecting, streaming):
            stats = {}
            out = launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, top_k,
                                 out=torch.full((wl.rows, top_k), check.POISON, dtype=torch.int32, device="cuda"),
                                 stats=stats)
            assert not (out == check.POISON).any(), f"{variant.name} {family}: elements left unwritten"
            if variant.gated:
                assert (stats["rescan_blocks"] > 0) == (family == "all_equal"), (variant.name, family, stats)
            report = verify_topk(out, *wl.args())
            assert report.ok, f"{variant.name} {family}: {report.summary()}"
        report = verify_topk(dense_mqa_topk(*wl.args(), logits_budget_bytes=8 << 20, variant=dense), *wl.args())
        assert report.ok, f"{dense.name} {family}: {report.summary()}"


def test_one_math_warpgroup_launches():
    """A gated kernel of one math warpgroup (256 threads): ptxas allocates it only the largest
    setmaxnreg count, and a launcher expecting more refused every launch (experiment log,
    "2026-11-29: lane-row columns")."""
    from runtime.fused import launch_variant

    variant = dataclasses.replace(default_variant(32, 2048, gated=True), key_tile=128, warps=4, stages=3)
    assert rejection_reason(variant) is None, rejection_reason(variant)
    wl = make_workload("random", 256, 30_000, 32, 2048, seed=13, device="cuda")
    out = launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, 2048,
                         out=torch.full((wl.rows, 2048), check.POISON, dtype=torch.int32, device="cuda"))
    assert not (out == check.POISON).any(), "elements left unwritten"
    report = verify_topk(out, *wl.args())
    assert report.ok, report.summary()


@pytest.mark.parametrize("variant", [v for v in DEFAULTS if v.heads == 32 and v.top_k == 2048], ids=lambda v: v.name)
def test_the_libraries_block_order_is_heaviest_first(variant):
    """Each library makes its launch's block order on the GPU (common/block_order.cuh); it must be
    runtime.fused.heaviest_first's: ties by block index, a partial last block, several requests,
    rows that see nothing, and more blocks than one ranking CTA compares (1,024)."""
    from runtime.fused import heaviest_first
    from runtime.loader import load

    lib = load(variant)
    g = torch.Generator().manual_seed(3)
    keys = 50_000
    for rows in (1, 7, 4099, 9001):
        ke = torch.randint(0, keys + 1, (rows,), generator=g)
        ke[: rows // 3] = keys // 2  # ties
        ks = torch.minimum(torch.randint(0, keys, (rows,), generator=g), ke)
        ks[-(rows // 5):] = ke[-(rows // 5):]  # rows that see nothing
        ks, ke = ks.int().cuda(), ke.int().cuda()
        scratch = torch.full((8 * rows + 256,), 0xAB, dtype=torch.uint8, device="cuda")
        lib.block_order(ks.data_ptr(), ke.data_ptr(), rows, keys, scratch.data_ptr(), torch.cuda.current_stream().cuda_stream)
        blocks = -(-rows // variant.rows)
        got = scratch[: 4 * blocks].view(torch.int32)
        assert torch.equal(got, heaviest_first(ks, ke, keys, variant.rows).cuda()), (variant.name, rows)


FP16_GATE = Variant.from_name("mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16")


@pytest.mark.parametrize("full_range", [False, True])
@pytest.mark.parametrize("family", ["random", "signed_weights", "large_offset", "flat", "increasing", "boundary_ties",
                                    "relu_plateau", "multi_request", "short_rows", "random_ranges", "wide_range"])
def test_the_fp16_gate_answers_as_its_fp32_twin_byte_for_byte(family, full_range):
    """The fp16 gate lets through every key whose exact score reaches its row's gate and scores those
    exactly with the fp32 scan's arithmetic: its answers are its fp32 twin's, byte for byte, and exact
    (at fp8's full range, where unscaled fp16 sums would overflow, too)."""
    from tools.half_gate import to_full_range

    # (rows that see at least 48 top-k keys: where the kernel takes the fp16 gate)
    wl = make_workload(family, 256, 110_000, 64, FP16_GATE.top_k, seed=5, device="cuda")
    wl = to_full_range(wl) if full_range else wl
    twin = dataclasses.replace(FP16_GATE, gate_bits=32)
    out = run_poisoned(FP16_GATE, wl)
    assert torch.equal(out, run_poisoned(twin, wl))
    report = verify_topk(out, *wl.args(), strict=True)
    assert report.ok, report.summary()


@pytest.mark.parametrize("full_range", [False, True])
@pytest.mark.parametrize("family", ["random", "signed_weights", "wide_range", "mostly_zero", "peaked"])
def test_the_fp16_gate_inputs_kernel_makes_what_gate_inputs_defines(family, full_range):
    """The `_g16` library's kernels make the gate's inputs as runtime/gate16.gate_inputs defines them: the
    gate's query and weights byte for byte, the bound's constants and key norms within fp32 rounding
    (their sums add in another order), into outputs poisoned first."""
    from runtime.gate16 import GateInputs, gate_inputs, gate_inputs_on_device
    from runtime.loader import load
    from tools.half_gate import to_full_range

    wl = make_workload(family, 300, 5000, 64, 256, seed=7, device="cuda")
    wl = to_full_range(wl) if full_range else wl
    want = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    poisoned = GateInputs(*(torch.full_like(x.view(torch.uint8), 0xFF).view(x.dtype) for x in want))
    got = gate_inputs_on_device(load(FP16_GATE), wl.q, wl.weights, wl.k_fp8, torch.cuda.current_stream().cuda_stream,
                                out=poisoned)
    torch.cuda.synchronize()
    assert torch.equal(got.q_gate.view(torch.uint8), want.q_gate.view(torch.uint8))
    assert torch.equal(got.w_gate.view(torch.int16), want.w_gate.view(torch.int16))
    assert torch.equal(got.row_bounds[:, [0, 4]], want.row_bounds[:, [0, 4]])  # the chain scale, the mixed chain
    assert torch.allclose(got.row_bounds, want.row_bounds, rtol=2.0 ** -16, atol=0)
    assert torch.allclose(got.key_norms, want.key_norms, rtol=2.0 ** -16, atol=0)
