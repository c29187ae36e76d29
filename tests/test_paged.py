"""Paged decode off the GPU: the contract's checks, the reference against a definition computed
token by token from the cache's bytes, the checker rejecting wrong answers, the gathered path, and
the paged kernel's variants (names, the space, a compile whose shared memory matches the Python sum)."""

from __future__ import annotations

import ctypes

import pytest
import torch
from conftest import requires_nvcc

from generator.paged_workloads import (
    laid_out_keys,
    make_paged_workload,
    reference_answer,
    verify_paged,
)
from runtime import paged_mqa_topk, reference_mqa_topk
from runtime.paged import GATHERED, check_paged_inputs, decode_layout, gather_paged, parts_per_request
from runtime.paged_variant import (
    SUPPORTED_NEXT_N,
    PagedVariant,
    default_paged_variant,
    padded_rows,
)
from runtime.scoring import tie_broken_order


def _definition(wl) -> torch.Tensor:
    """Each row's answer from the cache's bytes read token by token (block table, block layout) and
    fp64 scores: an oracle that shares no code with runtime.paged's gather."""
    cache = wl.kv_cache.view(wl.kv_cache.shape[0], -1)
    bs = wl.kv_cache.shape[1]
    out = torch.full((wl.batch * wl.next_n, wl.top_k), -1, dtype=torch.int32)
    for b in range(wl.batch):
        n = int(wl.context_lens[b])
        keys, scales = [], []
        for t in range(n):
            block = int(wl.block_table[b, t // bs])
            keys.append(cache[block, (t % bs) * 128: (t % bs + 1) * 128].view(torch.float8_e4m3fn).double())
            scales.append(cache[block, bs * 128 + (t % bs) * 4: bs * 128 + (t % bs + 1) * 4].view(torch.float32).double())
        for j in range(wl.next_n):
            row = b * wl.next_n + j
            visible = max(n - wl.next_n + j + 1, 0)
            if visible == 0:
                continue
            k = torch.stack(keys[:visible])  # [visible, 128]
            s = torch.cat(scales[:visible])
            dots = wl.q[b, j].double() @ k.T  # [H, visible]
            score = s * (wl.weights[row].double()[:, None] * dots.clamp(min=0)).sum(0)
            order = tie_broken_order(score.float()[None])[0]  # (fp32 score, then position: the contract's order)
            chosen = order.topk(min(wl.top_k, visible)).indices
            out[row, : chosen.numel()] = chosen.sort().values.int()
    return out


def ungated(heads: int, top_k: int, next_n: int) -> PagedVariant:
    """The default's point without its gate and its parallel merge: the base the variant axes' tests
    change one field of."""
    from dataclasses import replace

    return replace(default_paged_variant(heads, top_k, next_n, 64), gate_tiles=0, merge_ctas=1)


@pytest.mark.parametrize(("contexts", "next_n", "heads", "shared"), [
    ([700, 1500, 0, 3, 2000], 2, 32, 0),
    ([1, 2, 600], 4, 64, 0),
    ([900, 1300, 1100], 1, 32, 8),  # prefix caching: requests 1 and 2 read request 0's first 8 blocks
    ([515, 64, 128], 3, 64, 1),
])
def test_reference_matches_the_definition_token_by_token(contexts, next_n, heads, shared):
    wl = make_paged_workload("random", contexts, next_n, heads, 512, seed=7, shared_prefix=shared)
    ref = reference_answer(wl)
    expected = _definition(wl)
    assert ref.shape == (len(contexts) * next_n, 512)
    # Random data has no ties at this size: the sets, and so the ordered answers, are equal.
    assert torch.equal(ref, expected)
    assert verify_paged(ref, wl, strict=True).ok


@pytest.mark.parametrize(("contexts", "next_n", "block_size"), [([700, 1500, 0, 3, 2000], 2, 64), ([1, 600], 4, 128)])
def test_the_dense_paths_layout_reads_back_the_reference_answer(contexts, next_n, block_size):
    """The dense path (variant="dense") runs the prefill kernels' paged builds on a decode step laid
    out by decode_layout: read that way on the CPU, the keys and rows give the paged answer."""
    wl = make_paged_workload("random", contexts, next_n, 32, 512, seed=4, block_size=block_size)
    layout = decode_layout(wl.context_lens, wl.block_table, next_n, block_size, wl.kv_cache.shape[0])
    flat_q = wl.q.reshape(-1, wl.heads, 128)
    laid = reference_mqa_topk(flat_q, laid_out_keys(wl.kv_cache, layout), wl.weights, layout.ks, layout.ke, wl.top_k)
    assert torch.equal(laid, reference_answer(wl))


def test_rows_see_their_prefix_and_pad_with_minus_one():
    wl = make_paged_workload("random", [3, 0, 513], 2, 32, 512, seed=1)
    ref = reference_answer(wl)
    valid = (ref >= 0).sum(1).tolist()
    assert valid == [2, 3, 0, 0, 512, 512]
    assert ref[0, :2].tolist() == [0, 1] and ref[1, :3].tolist() == [0, 1, 2]


def test_the_checker_rejects_wrong_paged_answers():
    wl = make_paged_workload("random", [1500, 2000], 2, 32, 512, seed=2)
    ref = reference_answer(wl)
    assert verify_paged(ref, wl).ok
    k_fp8, k_scale, ks, ke = gather_paged(wl.kv_cache, wl.context_lens, wl.block_table, wl.next_n)
    from runtime.reference import reference_scores

    scores = reference_scores(wl.q.reshape(-1, 32, 128), k_fp8, k_scale, wl.weights, slice(2, 3), 0, k_fp8.shape[0])
    row_scores = scores[0, int(ks[2]): int(ke[2])]
    ranked = tie_broken_order(row_scores[None])[0].argsort(descending=True)
    best, outside = int(ranked[0]), int(ranked[512])
    dropped = ref.clone()
    dropped[2][dropped[2] == best] = outside  # the best key swapped for the first one left out
    assert not verify_paged(dropped, wl).ok
    shifted = ref.clone()
    shifted[3] = (shifted[3] + 1) % int(wl.context_lens[1])  # positions off by one
    assert not verify_paged(shifted, wl).ok
    beyond = ref.clone()
    beyond[0, 0] = int(wl.context_lens[0]) - 1  # row 0 does not see the request's last token
    assert not verify_paged(beyond, wl).ok


def test_the_gathered_path_gives_the_reference_answer():
    wl = make_paged_workload("large_offset", [800, 1700, 40], 2, 64, 512, seed=4, shared_prefix=2)
    assert torch.equal(paged_mqa_topk(*wl.args(), variant=GATHERED), reference_answer(wl))
    assert torch.equal(paged_mqa_topk(*wl.args()), reference_answer(wl))  # (no GPU: AUTO gathers)


def _args():
    wl = make_paged_workload("random", [100, 200], 2, 32, 512, seed=0)
    return list(wl.args())


@pytest.mark.parametrize(("index", "bad", "message"), [
    (0, lambda a: a[0].float(), "q: expected dtype"),
    (0, lambda a: a[0].reshape(2, 2, 32 * 128), "q: expected 4 dimensions"),
    (0, lambda a: torch.zeros(2, 5, 32, 128, dtype=torch.float8_e4m3fn), "q: next_n = 5"),
    (0, lambda a: torch.zeros(2, 2, 16, 128, dtype=torch.float8_e4m3fn), "q: 16 heads"),
    (1, lambda a: a[1].view(torch.int8), "kv_cache: expected dtype"),
    (1, lambda a: a[1].view(a[1].shape[0], 32, 2, 132), "kv_cache: expected shape"),
    (2, lambda a: a[2][:3], "weights: expected shape"),
    (3, lambda a: a[3].long(), "context_lens: expected dtype"),
    (3, lambda a: a[3][:1], "context_lens: expected shape"),
    (3, lambda a: torch.tensor([100, -1], dtype=torch.int32), "context_lens: a length is negative"),
    (3, lambda a: torch.tensor([100, 10_000], dtype=torch.int32), "context_lens: a context is longer"),
    (4, lambda a: a[4][:, :1].contiguous(), "context_lens: a context is longer"),
    (4, lambda a: a[4].t(), "block_table: must be contiguous"),
    (4, lambda a: torch.where(a[4] >= 0, a[4] + 1000, a[4]), "block_table: request 0's block 0"),
    (5, lambda a: 300, "top_k: 300"),
    (5, lambda a: 512.0, "top_k: expected an int"),
])
def test_bad_input_is_named(index, bad, message):
    args = _args()
    args[index] = bad(args)
    with pytest.raises((TypeError, ValueError), match=message):
        paged_mqa_topk(*args)


def test_unvalidated_values_are_not_checked_but_forms_are():
    args = _args()
    args[4] = torch.full_like(args[4], 10**6)  # every block id outside the cache
    check_paged_inputs(*args, check_values=False)  # values unread
    args[2] = args[2][:1]
    with pytest.raises(ValueError, match="weights"):
        check_paged_inputs(*args, check_values=False)


def test_variant_names_parse_back_and_every_supported_shape_has_a_default():
    for heads in (32, 64):
        for top_k in (512, 1024, 2048):
            for next_n in SUPPORTED_NEXT_N:
                v = default_paged_variant(heads, top_k, next_n, 64)
                assert v is not None and v.invalid_reason() is None, (heads, top_k, next_n)
                assert PagedVariant.from_name(v.name) == v
                assert v.rows >= next_n and v.rows * heads % 64 == 0
    assert padded_rows(1, 32) == 2 and padded_rows(3, 32) == 4 and padded_rows(1, 64) == 1
    assert PagedVariant("sm90a", 64, 2048, 4, 64, 8, 4, 8192).invalid_reason().endswith("over 232448")  # shared memory
    assert "block_size" in PagedVariant("sm90a", 64, 512, 1, 32, 8, 4, 2048).invalid_reason()
    assert "wgmma" in PagedVariant("sm89", 64, 512, 1, 64, 8, 4, 2048).invalid_reason()


def test_wider_products_name_themselves_and_need_the_registers_they_take():
    """columns: the (row, head) columns a product takes. 64 (the defaults) keeps the names as they
    were; wider groups add _c<columns>, must cut rows x heads whole, and take columns / 2 accumulators,
    which four math warpgroups' 104 registers cannot hold beside the weights at next_n 2."""
    from dataclasses import replace

    default = ungated(64, 2048, 4)
    assert default.columns == 64 and "_c" not in default.name
    wide = replace(default, columns=256)
    assert wide.name.endswith("_b3072_c256") and PagedVariant.from_name(wide.name) == wide
    assert wide.invalid_reason() is None
    n2 = ungated(64, 2048, 2)  # 2 rows x 64 heads: 128 columns
    assert "do not cut" in replace(n2, columns=256).invalid_reason()
    assert n2.warps == 16 and "registers" in replace(n2, columns=128).invalid_reason()
    assert replace(n2, columns=128, warps=8).invalid_reason() is None


def test_one_query_stage_leaves_its_bytes_to_the_candidate_buffers():
    """q_stages 1 (_q1): the Q ring's second stage (rows x heads x 128 bytes) goes to the buffers: at
    next_n 4 and 64 heads, 4,096 candidates a row fit where two stages held 3,072."""
    from dataclasses import replace

    default = ungated(64, 2048, 4)
    assert (default.q_stages, default.buffer) == (2, 3072) and "_q" not in default.name
    assert replace(default, buffer=4096).invalid_reason().endswith("over 232448")
    one = replace(default, q_stages=1, buffer=4096)
    assert one.invalid_reason() is None and one.smem_bytes() <= default.smem_bytes()
    assert one.name.endswith("_b4096_q1") and PagedVariant.from_name(one.name) == one
    both = replace(one, columns=256)
    assert both.name.endswith("_b4096_q1_c256") and PagedVariant.from_name(both.name) == both
    assert "query stages" in replace(default, q_stages=3).invalid_reason()


def test_rows_merged_by_several_ctas_name_themselves_and_fit_next_n():
    from dataclasses import replace

    four = default_paged_variant(64, 2048, 4, 64)
    default = replace(four, merge_ctas=1)
    assert "_m" not in default.name and "_m" not in default_paged_variant(64, 2048, 1, 64).name
    assert four.invalid_reason() is None and four.name.endswith("_g12_m4") and PagedVariant.from_name(four.name) == four
    assert four.smem_bytes() >= default.smem_bytes()  # (its shared state holds the row it took)
    assert "merging CTAs" in replace(default, merge_ctas=5).invalid_reason()
    assert "merging CTAs" in replace(default_paged_variant(64, 2048, 1, 64), merge_ctas=2).invalid_reason()


def test_compare_paged_builds_names_a_builds_variant_by_its_changed_fields():
    from tools.compare_paged_builds import built

    default = ungated(64, 2048, 2)
    assert built(default, "base", ".ablate") == (default, f".ablate/{default.name}/base.so")
    wide, path = built(default, "new:columns=128,warps=8", ".ablate")
    assert (wide.columns, wide.warps) == (128, 8) and path == f".ablate/{wide.name}/new.so"
    with pytest.raises(SystemExit, match="registers"):
        built(default, "new:columns=128", ".ablate")
    from runtime.dense_variant import default_dense_variant

    dense = default_dense_variant(64, 2048).decode_build(64, 1)
    two, path = built(dense, "new:rows=2", ".ablate")
    assert two.rows == 2 and path == f".ablate/{two.name}/new.so"


def test_parts_fill_the_gpu_only_where_the_table_holds_long_contexts():
    assert parts_per_request(1, 1 << 17, 2048, 132) == 15  # the merge's balance: about sqrt(capacity / top_k)
    assert parts_per_request(1, 1 << 17, 512, 132) == 30
    assert 30 <= parts_per_request(1, 1 << 20, 2048, 132) <= 45  # more parts for longer contexts, not every SM
    assert parts_per_request(1, 8192, 2048, 132) == 4  # parts of at least 2K tokens
    assert parts_per_request(1, 2048, 2048, 132) == 1
    assert parts_per_request(256, 1 << 20, 2048, 132) == 1
    assert parts_per_request(16, 1 << 17, 2048, 132) == 8  # 128 items: one wave (9 parts would take two)
    assert parts_per_request(64, 1 << 17, 2048, 132) == 2


@requires_nvcc
def test_a_paged_build_reports_the_shared_memory_python_sums(tmp_path):
    from dataclasses import replace

    from runtime.build import build, resource_report

    variants = [default_paged_variant(64, 2048, 4, 64), default_paged_variant(32, 512, 1, 64),
                replace(default_paged_variant(32, 512, 2, 64), merge_ctas=1)]
    for built in build(variants, root=tmp_path):
        lib = ctypes.CDLL(str(built.library))
        assert lib.paged_topk_smem_bytes() == built.variant.smem_bytes(), built.variant.name
        lib.paged_topk_variant_name.restype = ctypes.c_char_p
        assert lib.paged_topk_variant_name() == built.variant.name.encode()
        report = resource_report(built, "paged_mqa_topk_kernel")
        assert report.clean, (built.variant.name, report)


def test_the_decode_kernel_and_the_prefill_kernels_are_digested_apart(tmp_path, monkeypatch):
    """A changed decode template leaves the prefill table and its prebuilt libraries current (and the
    other way round); a changed shared header moves both."""
    import shutil

    from runtime import kernel_code
    from runtime.data import data_dir

    shutil.copytree(data_dir("templates"), tmp_path / "templates")
    monkeypatch.setattr(kernel_code, "data_dir", lambda name: tmp_path / name)

    def digests():
        kernel_code.code_digest.cache_clear()
        kernel_code.paged_code_digest.cache_clear()
        return kernel_code.code_digest(), kernel_code.paged_code_digest()

    try:
        prefill, paged = digests()
        (tmp_path / "templates" / PagedVariant.template).write_text("// another decode kernel\n")
        assert digests() == (prefill, digests()[1]) and digests()[1] != paged
        paged = digests()[1]
        (tmp_path / "templates" / "fused_mqa_topk_wgmma.cu.j2").write_text("// another prefill kernel\n")
        assert digests()[1] == paged and digests()[0] != prefill
        prefill = digests()[0]
        (tmp_path / "templates" / "common" / "primitives.cuh").write_text("// another header\n")
        new_prefill, new_paged = digests()
        assert new_prefill != prefill and new_paged != paged
    finally:
        monkeypatch.undo()
        digests()
    assert kernel_code.code_digest_of(default_paged_variant(32, 512, 1, 64)) == kernel_code.paged_code_digest()


def test_explain_paged_says_which_path_and_why():
    from runtime import explain_paged

    wl = make_paged_workload("random", [100, 200], 2, 32, 512, seed=0)
    decision = explain_paged(*wl.args())
    assert decision.path == "gathered" and decision.variant is None and "CUDA devices" in decision.why
    assert "path: gathered" in str(decision) and "why:" in str(decision)


def test_automatic_dispatch_keeps_its_route_until_the_tables_or_the_dense_setting_change(monkeypatch):
    """Every eager call asks for the route; it is worked out once a step shape, again after
    forget_recent (a table written under the process) or a change of FUSED_MQA_TOPK_DENSE."""
    import runtime.paged as paged
    from runtime.dense_kernels import DENSE_ENV
    from runtime.table import forget_recent

    asked = []
    monkeypatch.setattr(paged, "paged_variant_for", lambda problem: asked.append(problem))
    monkeypatch.delenv(DENSE_ENV, raising=False)
    forget_recent()
    problem = check_paged_inputs(*make_paged_workload("random", [100, 200], 2, 32, 512, seed=0).args())
    other = problem._replace(batch=problem.batch + 1)
    for _ in range(3):
        assert paged._auto_route(problem, True) == (None, None)
    assert len(asked) == 1
    paged._auto_route(problem, False)
    paged._auto_route(other, True)
    assert len(asked) == 3  # (a layout given or not, and another step shape, are asked apart)
    forget_recent()
    paged._auto_route(problem, True)
    assert len(asked) == 4
    monkeypatch.setenv(DENSE_ENV, "torch")
    paged._auto_route(problem, True)
    assert len(asked) == 5
    forget_recent()


def test_the_cli_takes_paged_variant_names_and_rejects_invalid_ones(capsys):
    from generator.__main__ import valid_specs

    good = default_paged_variant(64, 512, 1, 64)
    assert valid_specs([good.name]) == [good]
    assert valid_specs([good.name.replace("_p64_", "_p32_")]) is None
    assert "block_size 32" in capsys.readouterr().err


def test_the_decode_bench_distributions_lay_their_data_out_by_position():
    """The bench's indexer-like steps rise along each request's context and weigh its first tokens
    (read back through the shuffled block table); signed ones carry negative weights; all are valid."""
    from generator.distributions import DISTRIBUTIONS
    from generator.paged_bench import random_step

    for distribution in DISTRIBUTIONS:
        args = random_step(3, 1000, 2, 32, 512, distribution=distribution, device="cpu")
        check_paged_inputs(*args)
        _, k_scale, _, _ = gather_paged(args[1], args[3], args[4], 2)
        per_request = k_scale.view(3, 1000)
        assert (args[2] < 0).any() == (distribution == "signed")
        if distribution == "indexer":
            assert (per_request[:, 900:].mean(1) > 2.5 * per_request[:, 4:100].mean(1)).all()
            assert (per_request[:, :4].mean(1) > 4 * per_request[:, 4:100].mean(1)).all()
    with pytest.raises(ValueError, match="distribution"):
        random_step(1, 64, 1, 32, 512, distribution="uniform", device="cpu")


def test_a_bench_step_at_fewer_heads_is_its_first_heads_over_the_same_cache():
    """The decode bench makes a step's data once at the most heads and times fewer heads on its first
    ones: a valid step (contiguous queries and weights) over the same cache."""
    from generator.paged_bench import random_step, with_heads

    step = random_step(2, 700, 2, 64, 512, device="cpu")
    fewer = with_heads(step, 32)
    q, cache, weights = fewer[:3]
    check_paged_inputs(*fewer)
    assert q.shape == (2, 2, 32, 128) and weights.shape == (4, 32) and q.is_contiguous() and weights.is_contiguous()
    assert cache is step[1] and torch.equal(weights, step[2][:, :32])
    assert torch.equal(q.view(torch.uint8), step[0].view(torch.uint8)[:, :, :32])


def test_a_sampled_gate_names_itself_fits_its_buffer_and_takes_the_producers_registers():
    """gate_tiles (_g<tiles>): the sample must leave the buffer a tile, and its producer warpgroup keeps
    SAMPLING_PRODUCER_REGISTERS (at 40 its block ids spilled), which the math warps give up."""
    from dataclasses import replace

    from runtime.arch import MIN_PRODUCER_REGISTERS, SAMPLING_PRODUCER_REGISTERS

    default = ungated(64, 2048, 4)
    assert default.gate_tiles == 0 and "_g" not in default.name and default.producer_min == MIN_PRODUCER_REGISTERS
    gated = replace(default, gate_tiles=16)
    assert gated.name.endswith("_b3072_g16") and PagedVariant.from_name(gated.name) == gated
    assert gated.invalid_reason() is None and gated.producer_min == SAMPLING_PRODUCER_REGISTERS
    assert gated.math_registers < default.math_registers
    assert "leave the buffer" in replace(default, gate_tiles=24).invalid_reason()  # (24 x 128 > 3,072 - 128)
    assert "registers" in replace(gated, columns=256).invalid_reason()  # (fits without the gate's producer)
    assert replace(default, columns=256).invalid_reason() is None
    both = replace(default, q_stages=1, buffer=4096, columns=128, gate_tiles=24)
    assert both.name.endswith("_b4096_q1_c128_g24") and PagedVariant.from_name(both.name) == both
    from test_gpu_paged import GATED  # (the GPU tests' gated points must build)

    for heads, top_k, next_n, tiles in GATED:
        point = replace(default_paged_variant(heads, top_k, next_n, 64), gate_tiles=tiles)
        assert point.invalid_reason() is None, point.name


def test_the_default_gates_and_merges_a_step_of_several_rows():
    """default_paged_variant: next_n 1 ungated, one merging CTA (the H200 measured no gain from a gate
    there); next_n 2 to 4 the ranked point with a gate sampled over half its buffer's keys and its rows
    merged by the CTAs of a request's last next_n parts, where that point is valid."""
    for heads, top_k in ((32, 512), (64, 2048), (64, 1024), (32, 2048)):
        one = default_paged_variant(heads, top_k, 1, 64)
        assert one.gate_tiles == 0 and one.merge_ctas == 1
        for next_n in (2, 3, 4):
            v = default_paged_variant(heads, top_k, next_n, 64)
            assert v.gate_tiles == v.buffer // 2 // v.key_tile > 0 and v.invalid_reason() is None, v.name
            assert v.merge_ctas == next_n, v.name
    assert default_paged_variant(64, 2048, 4, 64).name.endswith("_w8_s3_b3072_g12_m4")


def test_the_selection_model_counts_what_the_kernel_does_on_scores_it_can_predict():
    """tools/paged_compactions.py: rising scores pass every threshold (every key appended, a compaction
    each time the buffer would overflow); falling scores are all appended until the first compaction,
    whose threshold no later key passes; a larger buffer compacts less."""
    from tools.paged_compactions import selection_counts

    rising = torch.arange(4096, dtype=torch.float32)[None]
    c = selection_counts(rising, tile=128, top_k=512, buffer=1024)
    assert c["appends_per_row"] == 4096 and c["compactions"] == (4096 - 1024) // 512 + 1
    falling = rising.flip(1)
    c = selection_counts(falling, tile=128, top_k=512, buffer=1024)
    assert c["compactions"] == 1 and c["appends_per_row"] == 1024  # (the first eight tiles)
    random = torch.rand(2, 65536, generator=torch.Generator().manual_seed(0))
    small, large = (selection_counts(random, 128, 2048, b) for b in (3072, 4096))
    assert large["compactions"] < small["compactions"] and large["checks"] < small["checks"]


def test_the_selection_model_counts_what_a_sampled_gate_would_save_and_miss():
    """--sample-tiles: on random scores a sampled gate keeps every row's top k (no miss) with far
    fewer appends and compactions; a gate above all but a few keys of a row is counted as a miss (the
    row would have to be scanned again)."""
    from tools.paged_compactions import sampled_gate, selection_counts

    scores = torch.rand(4, 65536, generator=torch.Generator().manual_seed(1))
    plain = selection_counts(scores, 128, 2048, 3072)
    gated = selection_counts(scores, 128, 2048, 3072, sampled_gate(scores, 128, 2048, 16))
    assert gated["misses"] == 0 and plain["misses"] == 0
    assert gated["appends_per_row"] < plain["appends_per_row"] / 2 and gated["compactions"] < plain["compactions"] / 4
    high = torch.full((4,), 0.99)  # (about 1% of uniform scores reach it: 655 of 65,536, fewer than 2,048)
    assert selection_counts(scores, 128, 2048, 3072, high)["misses"] == 4
