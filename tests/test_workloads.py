import pytest
import torch

from generator.workloads import (
    FAMILIES,
    causal_ranges,
    make_workload,
    multi_request_ranges,
)
from runtime.contract import check_inputs
from runtime.reference import reference_scores


@pytest.mark.parametrize("family", FAMILIES)
def test_families_honour_the_contract_and_are_reproducible(family):
    a = make_workload(family, 24, 3000, 64, 512, seed=9)
    check_inputs(*a.args())
    b = make_workload(family, 24, 3000, 64, 512, seed=9)
    c = make_workload(family, 24, 3000, 64, 512, seed=10)
    for x, y in zip((a.q, a.k_fp8, a.k_scale, a.weights, a.ks, a.ke), (b.q, b.k_fp8, b.k_scale, b.weights, b.ks, b.ke)):
        assert torch.equal(x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x,
                           y.view(torch.uint8) if y.dtype == torch.float8_e4m3fn else y)
    assert not torch.equal(a.q.view(torch.uint8), c.q.view(torch.uint8))
    assert a.q.float().abs().sum() > 0 and a.k_fp8.float().abs().sum() > 0  # never zeros


def _scores(wl):
    return reference_scores(wl.q, wl.k_fp8, wl.k_scale, wl.weights, slice(None), 0, wl.keys)


def test_causal_and_multi_request_ranges():
    ks, ke = causal_ranges(4, 10, "cpu")
    assert ks.tolist() == [0, 0, 0, 0] and ke.tolist() == [7, 8, 9, 10]
    ks, ke = multi_request_ranges([(5, 2), (4, 3)], "cpu")
    assert ks.tolist() == [0, 0, 5, 5, 5] and ke.tolist() == [4, 5, 7, 8, 9]
    with pytest.raises(ValueError):
        causal_ranges(5, 4, "cpu")


def test_packed_workloads_split_into_equal_requests():
    from generator.workloads import packed_workload

    wl = packed_workload(8, 40, 32, 512, requests=4, seed=1)
    assert wl.ks.tolist() == [0, 0, 10, 10, 20, 20, 30, 30] and wl.ke.tolist() == [9, 10, 19, 20, 29, 30, 39, 40]
    assert wl.longest_row() == 10
    one = packed_workload(8, 40, 32, 512, requests=1, seed=1)
    assert torch.equal(one.ke, make_workload("random", 8, 40, 32, 512, seed=1).ke)
    with pytest.raises(ValueError, match="equal requests"):
        packed_workload(8, 40, 32, 512, requests=3)


def test_hard_families_have_their_property():
    wl = make_workload("all_equal", 6, 2000, 32, 512, seed=1)
    assert (wl.k_fp8.view(torch.uint8) == wl.k_fp8[:1].view(torch.uint8)).all() and (wl.k_scale == 1).all()
    s = _scores(wl)  # equal up to the BLAS's position-dependent rounding
    assert ((s - s[:, :1]).abs() <= 1e-5 * s[:, :1].abs()).all()
    wl = make_workload("mostly_zero", 6, 4000, 32, 512, seed=1)
    assert ((_scores(wl) == 0).float().mean() > 0.9)
    wl = make_workload("large_offset", 6, 2000, 32, 512, seed=1)
    s = _scores(wl)
    assert (s.mean(1) > 20 * s.std(1)).all()
    wl = make_workload("increasing", 4, 2000, 32, 512, seed=1)
    assert (_scores(wl).diff(dim=1) >= 0).all()
    wl = make_workload("short_rows", 40, 3000, 32, 512, seed=1)
    n = (wl.ke - wl.ks).tolist()
    assert 0 in n and 1 in n and 511 in n and 512 in n and 513 in n
    wl = make_workload("signed_weights", 8, 2000, 32, 512, seed=1)
    assert (wl.weights[0] == 0).all() and (wl.weights[1] < 0).all()
    wl = make_workload("multi_request", 30, 3000, 32, 512, seed=1)
    assert len(set(wl.ks.tolist())) == 3


def test_the_bench_distributions_make_causal_chunks_with_their_weights_and_scales():
    """generator.distributions' chunks (bench --distribution, the fp16 gate's model): valid causal chunks
    on the `random` family's q and keys, reproducible; signed ones alone carry negative weights; the
    indexer-like scales rise along the keys and weigh the first 4 tokens."""
    from generator.distributions import DISTRIBUTIONS, chunk_workload

    base = make_workload("random", 8, 4000, 32, 512, seed=3)
    for distribution in DISTRIBUTIONS:
        wl = chunk_workload(distribution, 8, 4000, 32, 512, seed=3)
        check_inputs(*wl.args())
        assert wl.family == distribution and torch.equal(wl.ke, base.ke)
        assert torch.equal(wl.q.view(torch.uint8), base.q.view(torch.uint8))
        assert torch.equal(wl.weights, chunk_workload(distribution, 8, 4000, 32, 512, seed=3).weights)
        assert (wl.weights < 0).any() == (distribution == "signed")
        s = wl.k_scale
        if distribution == "indexer":
            assert s[3600:].mean() > 2.5 * s[4:400].mean() and s[:4].mean() > 4 * s[4:400].mean()
        else:
            assert ((s >= 0.5) & (s < 1.5)).all()
    with pytest.raises(ValueError, match="distribution"):
        chunk_workload("uniform", 8, 4000, 32, 512)
