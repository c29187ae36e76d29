"""The reference path against a float64 brute force, and the dense path against the reference (the
verifier against wrong answers: test_verifier_mutants.py)."""

import pytest
import torch

from generator.verify import magnitude_bound, verify_topk
from generator.workloads import FAMILIES, HARD_FAMILIES, make_workload
from runtime import dense_mqa_topk, reference_mqa_topk
from runtime.reference import reference_scores


def brute_force_scores(wl) -> torch.Tensor:
    q = wl.q.double()
    k = wl.k_fp8.double()
    dots = torch.einsum("mhd,nd->mhn", q, k).clamp(min=0)
    return torch.einsum("mhn,mh->mn", dots, wl.weights.double()) * wl.k_scale.double()


def test_reference_scores_match_float64():
    wl = make_workload("random", 24, 700, 32, 512, seed=3)
    ref = reference_scores(wl.q, wl.k_fp8, wl.k_scale, wl.weights, slice(None), 0, wl.keys).double()
    exact = brute_force_scores(wl)
    bound = magnitude_bound(wl.q, wl.k_fp8, wl.k_scale, wl.weights, slice(None), 0, wl.keys)
    assert ((ref - exact).abs() <= 1e-6 * bound + 1e-30).all()
    assert (exact.abs() <= bound * (1 + 1e-6)).all()  # the bound dominates the score itself


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_top_k_is_the_exact_top_k(family):
    wl = make_workload(family, 30, 3000, 32, 512, seed=11)
    out = reference_mqa_topk(*wl.args())
    exact = brute_force_scores(wl)
    slack = 1e-6 * magnitude_bound(wl.q, wl.k_fp8, wl.k_scale, wl.weights, slice(None), 0, wl.keys)
    for i in range(wl.rows):
        ks, ke = int(wl.ks[i]), int(wl.ke[i])
        c = min(512, ke - ks)
        sel = out[i, :c].long()
        assert (out[i, c:] == -1).all()
        assert sel.unique().numel() == c and (sel >= 0).all() and (sel < ke - ks).all()
        if c:
            visible = exact[i, ks:ke]
            kth = visible.topk(c).values[-1]
            assert (visible[sel] >= kth - slack[i, ks:ke][sel] - slack[i, ks:ke].max()).all()  # fp32 rounding only


def test_reference_is_independent_of_the_piece_budget():
    wl = make_workload("multi_request", 48, 4000, 64, 1024, seed=5)
    a = reference_mqa_topk(*wl.args())
    b = reference_mqa_topk(*wl.args(), budget_bytes=40_000)  # a few rows per piece
    for i in range(wl.rows):
        assert set(a[i].tolist()) == set(b[i].tolist())


@pytest.mark.parametrize("family", ["random", "multi_request", *HARD_FAMILIES])
def test_dense_path_is_correct_on_cpu(family):
    wl = make_workload(family, 40, 2600, 32, 1024, seed=1)
    report = verify_topk(dense_mqa_topk(*wl.args(), logits_budget_bytes=100_000), *wl.args())
    assert report.ok, report.summary()
