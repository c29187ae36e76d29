"""runtime/gate16.py (CPU): the fp16 gate's inputs and bound, against a model of the kernel's arithmetic.

The model does what a `_g16` kernel does to one (row, key): the gate's query times the key accumulated in
fp16 (tools/half_gate.fp16_accumulated), relu, the heads in the kernel's chains (chain c over the query
columns chain_positions()[16c:16c + 16], as two FMA chains of the even and odd terms, added), the
chains' sum G and magnitudes C, and the bound from row_bounds and key_norms (with `pure_only`, C over
the chains of one weight sign alone: the bound the derivation needs, tighter than the kernel's). The exact
score must lie within it on every key of hard families, at fp8's full range too, and a thousandth of
it is broken (the check can fail). The bound is loose: on random data 100-300x the largest error,
mostly its accumulation term (5u of sum_d |q_d k_d| a head, bounded over the keys by max_d x sum_d).
"""

from __future__ import annotations

import pytest
import torch

from generator.workloads import make_workload
from runtime.gate16 import CHAIN, GATE_HEADS, chain_positions, gate_inputs
from tools.half_gate import fma_chain, fp16_accumulated, to_full_range


def kernel_gate(gate, row: int, k_fp8: torch.Tensor, pure_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(G 2^r, the bound) for every key of `row`, computed as the kernel computes them."""
    positions = chain_positions()
    a16 = fp16_accumulated(gate.q_gate[row].float(), k_fp8.float())          # [64 columns, keys]
    r16 = a16.clamp(min=0).half()
    w16 = gate.w_gate[row]
    scale, alpha, beta, absolute, mixed = gate.row_bounds[row, :5].double().tolist()
    g = torch.zeros(k_fp8.shape[0], dtype=torch.float64)
    c = torch.zeros_like(g)
    for chain in range(4):
        cols = positions[CHAIN * chain:CHAIN * (chain + 1)]
        even, odd = fma_chain(w16[cols[0::2]], r16[cols[0::2]]), fma_chain(w16[cols[1::2]], r16[cols[1::2]])
        v = (even + odd).half().double()
        g += v
        if not (pure_only and chain == int(mixed)):
            c += v.abs()
    bound = alpha * c + beta * gate.key_norms.double() + absolute
    return g * scale, bound


def exact_row(wl, row: int) -> torch.Tensor:
    a = wl.q[row].double() @ wl.k_fp8.double().T                           # [heads, keys]
    return (wl.weights[row].double()[:, None] * a.clamp(min=0)).sum(0)


def workload(family: str, full_range: bool, seed: int = 0):
    wl = make_workload(family, 4, 1024, GATE_HEADS, 256, seed=seed)
    return to_full_range(wl) if full_range else wl


@pytest.mark.parametrize("family", ["random", "signed_weights", "wide_range", "large_offset", "mostly_zero", "peaked"])
@pytest.mark.parametrize("full_range", [False, True])
def test_the_exact_score_lies_within_the_gate_bound(family, full_range):
    wl = workload(family, full_range)
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    for row in range(wl.rows):
        g, bound = kernel_gate(gate, row, wl.k_fp8, pure_only=True)
        exact = exact_row(wl, row)
        assert torch.isfinite(g).all() and torch.isfinite(bound).all()
        assert bool(((g - exact).abs() <= bound).all()), f"row {row}: {float(((g - exact).abs() - bound).max())}"


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
