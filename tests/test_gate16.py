"""runtime/gate16.py (CPU): the fp16 gate's inputs and bound, against a model of the kernel's arithmetic.

The model (tools/gate16_model.kernel_gate) does what a `_g16` kernel does to one (row, key): the gate's
query times the key accumulated in fp16, one rounding a k32 instruction, relu, the heads in the kernel's
chains, the chains' sum G and magnitudes C, and the bound from row_bounds and key_norms. The exact score
must lie within it on every key of hard families, at fp8's full range too, and a thousandth of it is
broken (the check can fail). The bound is loose (tools/gate16_model.py
measures it): mostly its accumulation term, 1.25u an instruction over the terms it sums and carries.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from generator.workloads import make_workload
from runtime.gate16 import CHAIN, GATE_HEADS, chain_positions, gate_inputs
from tools.gate16_model import exact_scores, kernel_gate
from tools.half_gate import to_full_range


def exact_row(wl, row: int) -> torch.Tensor:
    return exact_scores(wl.q[row], wl.weights[row], wl.k_fp8)


def workload(family: str, full_range: bool, seed: int = 0):
    wl = make_workload(family, 4, 1024, GATE_HEADS, 256, seed=seed)
    return to_full_range(wl) if full_range else wl


@pytest.mark.parametrize("family", ["random", "signed_weights", "wide_range", "large_offset", "mostly_zero", "peaked"])
@pytest.mark.parametrize("full_range", [False, True])
def test_the_exact_score_lies_within_the_gate_bound(family, full_range):
    wl = workload(family, full_range)
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    for row in range(wl.rows):
        g, bound = kernel_gate(gate, row, wl.k_fp8)
        exact = exact_row(wl, row)
        assert torch.isfinite(g).all() and torch.isfinite(bound).all()
        assert bool(((g - exact).abs() <= bound).all()), f"row {row}: {float(((g - exact).abs() - bound).max())}"


def test_the_bound_holds_where_the_first_instruction_carries_every_term():
    # Positive queries and keys whose magnitude sits in dims 0-31: every term of the first k32 instruction is
    # carried through the three roundings after it, the case the weighted key norm weights 4.
    wl = workload("random", False, seed=5)
    front = torch.ones(128)
    front[32:] = 2.0 ** -6
    wl = replace(wl, q=(wl.q.float().abs() * front).to(torch.float8_e4m3fn), weights=wl.weights.abs(),
                 k_fp8=(wl.k_fp8.float().abs() * front + 0.5 * front).to(torch.float8_e4m3fn))
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    for row in range(wl.rows):
        g, bound = kernel_gate(gate, row, wl.k_fp8)
        assert bool(((g - exact_row(wl, row)).abs() <= bound).all())


@pytest.mark.parametrize("full_range", [False, True])
def test_a_thousandth_of_the_bound_is_broken(full_range):
    wl = workload("random", full_range, seed=3)
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    g, bound = kernel_gate(gate, 0, wl.k_fp8)
    assert bool(((g - exact_row(wl, 0)).abs() > bound * 1e-3).any())


def test_chains_hold_every_column_once_and_one_sign_but_one():
    positions = chain_positions()
    assert sorted(positions.tolist()) == list(range(GATE_HEADS))
    wl = make_workload("signed_weights", 8, 64, GATE_HEADS, 16, seed=1)
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    for row in range(8):
        w = gate.w_gate[row].float()[positions].view(4, CHAIN)
        mixed = [c for c in range(4) if bool((w[c] > 0).any() and (w[c] < 0).any())]
        assert len(mixed) <= 1 and int(gate.row_bounds[row, 4]) == (mixed[0] if mixed else -1)
        # the gate's weights times its query give the row's own products (up to fp16's rounding)
        scale = float(gate.row_bounds[row, 0])
        assert torch.allclose(gate.w_gate[row].float().abs().sum() * scale, (gate.w_gate[row].float() * scale).abs().sum())


def test_rows_of_zero_weights_and_queries_give_finite_bounds():
    wl = make_workload("random", 2, 256, GATE_HEADS, 16, seed=2)
    wl.weights[0] = 0
    wl.q[1] = torch.zeros_like(wl.q[1])
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    assert torch.isfinite(gate.row_bounds).all() and torch.isfinite(gate.w_gate.float()).all()


def test_the_power_of_two_puts_each_value_in_its_half_open_range_exactly():
    # (frexp, not a logarithm: at and next to a power of two, where a rounded log2 may pick the wrong one;
    # templates/gate16_inputs.cuh takes the same exponent)
    from runtime.gate16 import power_of_two_to

    limit = 65504.0 / 1.01 / 448.0
    x = torch.tensor([limit, limit / 2, limit * 2, float(torch.tensor(limit).nextafter(torch.tensor(0.0))),
                      float(torch.tensor(limit).nextafter(torch.tensor(1e9))), 2.0 ** -9, 57344.0, 1.0, 3.0])
    scale = power_of_two_to(x, limit)
    q = x / scale
    assert bool(((q <= limit) & (q > limit / 2)).all()), q
    assert torch.equal(torch.frexp(scale).mantissa, torch.full_like(x, 0.5))  # powers of two
    assert float(power_of_two_to(torch.tensor([0.0]), limit)) == 1.0


def test_the_model_gates_no_higher_than_the_exact_kth_score_where_they_must_be_safe():
    """tools/gate16_model.py's thresholds: a gate proved by counting lower bounds and the k-th largest
    lower bound never pass the row's exact k-th score (so a kernel using them would lose no key), and the
    sample it takes is the kernel's (about SAMPLE_HITS of the top k in expectation)."""
    from tools.gate16_model import study_data

    proved = 0
    for data in ("signed", "positive"):  # (signed: the lower bounds too wide to prove a candidate; positive: they do)
        proved += gates_row_by_row(study_data(data, 4, 32768, 256, seed=2))
    assert proved >= 4


def gates_row_by_row(wl) -> int:
    from tools.gate16_model import SAMPLE_HITS, counted_gate, sample_of, thresholds

    proved = 0
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    for row in range(wl.rows):
        exact = exact_scores(wl.q[row], wl.weights[row], wl.k_fp8, wl.k_scale)
        g, bound = kernel_gate(gate, row, wl.k_fp8)
        lower = (g - bound) * wl.k_scale.double()
        kth = float(exact.topk(256).values[-1])
        t = thresholds(exact, lower, 256)
        assert t["exact"] == kth and t["lower"] <= kth
        counted = counted_gate(exact, lower, 256, fractions=(0.1, 0.5, 1.0, 1.5, 3.0))
        assert counted is None or counted <= kth
        proved += counted is not None
        sample, mu = sample_of(exact, 256)
        assert abs(mu - SAMPLE_HITS) < 8 and sample.shape[0] % 256 == 0
    return proved


def test_the_models_rank_miss_chance_is_the_binomial_tail():
    """rank_miss_chance (how often a sampled rank sends a block to the rescan) against draws of the
    binomial it models: a row's sample of 8,192 keys, 24 of the top-k in expectation."""
    from tools.gate16_model import RANKS, rank_miss_chance

    torch.manual_seed(0)
    sampled, mu = 8192, 24.0
    draws = torch.distributions.Binomial(sampled, torch.tensor(mu / sampled)).sample((400_000,))
    for name, rank_of in RANKS.items():
        chance = rank_miss_chance(mu, sampled, rank_of)
        seen = float((draws >= math.ceil(rank_of(mu))).double().mean())
        assert abs(seen - chance) <= 4 * math.sqrt(chance / 400_000) + 2e-6, (name, seen, chance)
    assert rank_miss_chance(mu, sampled, RANKS["built"]) < 1e-4 < rank_miss_chance(mu, sampled, RANKS["tighter"]) < 2e-3
