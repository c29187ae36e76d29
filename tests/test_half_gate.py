"""tools/half_gate.py's fp16 gate bound (CPU): it holds on every key of hard families, and it is not
vacuous (a twentieth of it is broken), so the candidate shares it prints mean something."""

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
