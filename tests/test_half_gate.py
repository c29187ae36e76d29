"""tools/half_gate.py's fp16 gate bound (CPU): it holds on every key of hard families, and it is not
vacuous (a twentieth of it is broken), so the candidate shares it prints mean something; and the check
of tools/rescore.py, which times the exact rescoring of the gate's candidates, rejects wrong scores."""

from __future__ import annotations

import pytest
import torch

from generator.workloads import make_workload
from tools.half_gate import gate_row, study


@pytest.mark.parametrize("family", ["random", "signed_weights", "wide_range", "large_offset", "mostly_zero", "bursts"])
@pytest.mark.parametrize("chain,accumulate", [(64, "fp32"), (8, "fp32"), (16, "fp16")])
def test_the_fp16_gate_stays_within_its_bound(family, chain, accumulate):
    s = study(family, keys=2048, heads=64, top_k=512, rows=2, length=chain, accumulate=accumulate)
    assert s["keys_outside_fp16"] == 0
    assert 0 < s["worst_error_over_bound"] <= 1


def test_the_bound_is_not_vacuous():
    wl = make_workload("random", 1, 4096, 64, 512, seed=3)
    a = (wl.q[0].double() @ wl.k_fp8.double().T).float()
    g = gate_row(a, wl.weights[0].float(), 64)
    err = (g["gate"] - g["exact"]).abs()
    assert bool((err <= g["bound"]).all()) and bool((err > g["bound"] / 20).any())
    assert torch.isfinite(g["bound"]).all()


def test_full_range_data_keeps_every_score():
    """to_full_range puts every query head and key at fp8's full range (as a server's quantizer does) and
    moves the powers of two into the weights and key scales: the scores do not change."""
    from generator.verify import exact_scores
    from tools.half_gate import to_full_range

    wl = make_workload("random", 2, 1024, 32, 512, seed=5)
    full = to_full_range(wl)
    assert float(full.q.float().abs().amax()) > 224 and float(full.k_fp8.float().abs().amax(-1).min()) > 224
    every = torch.arange(2)
    before = exact_scores(wl.q, wl.k_fp8, wl.k_scale, wl.weights, every, 0, wl.keys)
    after = exact_scores(full.q, full.k_fp8, full.k_scale, full.weights, every, 0, full.keys)
    assert torch.allclose(before, after, rtol=1e-12, atol=0)


@pytest.mark.parametrize("family", ["random", "signed_weights", "wide_range", "mostly_zero"])
@pytest.mark.parametrize("bound", ["key", "norm", "row"])
@pytest.mark.parametrize("relu", ["max", "linear"])
def test_the_gate_on_full_range_data_stays_within_its_bound(family, bound, relu):
    """The data at fp8's full range overflows fp16 sums unless the gate scales its query back: it does,
    and the bound (over each key, or the same for every key of a row; relu by HMNMX2 or by its identity
    with the linear half from two product columns) still holds and is not vacuous."""
    s = study(family, keys=2048, heads=64, top_k=512, rows=2, length=16, accumulate="fp16", full_range=True, bound=bound,
              relu=relu)
    assert s["keys_outside_fp16"] == 0
    assert 0 < s["worst_error_over_bound"] <= 1


def test_a_row_blocks_candidates_cover_more_than_either_row_and_at_most_both():
    """--block-rows: the share of the keys that are a candidate of either of two rows lies above the
    larger row's share (random rows pass different keys) and at most at their sum."""
    kw = dict(keys=2048, heads=32, top_k=256, rows=2, length=16, accumulate="fp16", full_range=True, bound="norm")
    larger = study("random", block_rows=1, **kw)["union_share"]  # (blocks of one row: the median of two is the larger)
    both = study("random", block_rows=2, **kw)["union_share"]
    assert 0 < larger < both <= 2 * larger


def test_the_two_ways_of_rescoring_a_block_are_costed_from_its_candidates():
    """rescoring_shares: a row at a time costs each row's candidates at the pair cost over the block's
    scan (rows x keys pairs); the union costs a scan's key for each of its keys, for every row of the
    block. Two rows with the same candidates: both ways cost the same at one pair a candidate; with
    disjoint ones the union costs twice as much (each key is scored for a row that did not ask)."""
    from tools.half_gate import rescoring_shares

    same = torch.zeros(2, 100, dtype=torch.bool)
    same[:, :10] = True
    assert rescoring_shares(same, 1.0) == pytest.approx((0.1, 0.1))
    assert rescoring_shares(same, 2.0) == pytest.approx((0.2, 0.1))
    apart = torch.zeros(2, 100, dtype=torch.bool)
    apart[0, :10] = True
    apart[1, 10:20] = True
    assert rescoring_shares(apart, 1.0) == pytest.approx((0.1, 0.2))


@pytest.mark.parametrize("weight_scale", [2.0 ** 12, 2.0 ** -20])
def test_the_fp16_sums_stay_in_range_whatever_the_weights(weight_scale):
    """The weights take a power of two a row before the fp16 chains (chain_scale): weights 4,096x the
    families' would overflow the chains' sums, a millionth of them sink into fp16's subnormals; the gate
    stays finite and within its bound either way, and the bound keeps its proportion to the scores."""
    from tools.half_gate import accumulation_bound, fp16_accumulated, full_range_row, to_full_range

    wl = to_full_range(make_workload("random", 1, 2048, 64, 512, seed=7))
    q, k = wl.q[0].float(), wl.k_fp8.float()
    results = []
    for w in (wl.weights[0], wl.weights[0] * weight_scale):
        q_scaled, q_gate, w_gate, rounding = full_range_row(q, w)
        a = (q_scaled @ k.double().T).float()
        g = gate_row(a, w_gate, 16, fp16_accumulated(q_gate.float(), k), accumulation_bound(q_gate, w_gate, rounding, k, "norm"))
        assert torch.isfinite(g["gate"]).all() and torch.isfinite(g["bound"]).all()
        assert bool(((g["gate"] - g["exact"]).abs() <= g["bound"]).all())
        results.append(g["bound"] / g["exact"].abs().max())
    assert torch.allclose(results[0], results[1], rtol=0.05)


def test_the_rescoring_probes_check_rejects_scores_of_other_keys():
    """tools/rescore.py's check passes the wgmma model's scores rounded to fp32 and fails them against the
    scores of each list's next keys (what a gather off by one would return)."""
    from generator.tensor_core import emulate_wgmma_dots
    from tools import rescore

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 32, 128, generator=gen).to(torch.float8_e4m3fn)
    k = torch.randn(1000, 128, generator=gen).to(torch.float8_e4m3fn)
    scale, w = 0.5 + torch.rand(1000, generator=gen), torch.randn(2, 32, generator=gen)
    lists = torch.randint(0, 1000, (2, 64), generator=gen).int()
    exact, magnitude = rescore.exact_scores(q, k, scale, w, lists, dots=emulate_wgmma_dots)
    assert rescore.worst_error(exact.float(), exact, magnitude) < 1
    wrong = rescore.exact_scores(q, k, scale, w, (lists + 1) % 1000, dots=emulate_wgmma_dots)
    assert rescore.worst_error(exact.float(), *wrong) > 1e4


def test_a_gate_at_the_kth_lower_bound_passes_more_keys_than_one_at_the_exact_kth():
    """--threshold lower gates at the k-th largest (gate - bound), which is at most the exact k-th score
    (so it never drops a top-k key): on random data it passes more keys than a gate at the exact k-th,
    the price a kernel selecting on fp16 bounds before exact scoring would pay."""
    kw = dict(keys=4096, heads=32, top_k=256, rows=2, length=16, accumulate="fp16", full_range=True, bound="norm")
    exact, lower = study("random", **kw), study("random", threshold="lower", **kw)
    assert exact["median_ratio"] >= 1 and lower["median_ratio"] > exact["median_ratio"]
    assert lower["worst_error_over_bound"] <= 1
