"""The reference path: SPEC's definition, exact fp32 from the fp8 values, on any device."""

from __future__ import annotations

import torch

from .contract import check_inputs
from .scoring import fp32_product, score_block, topk_by_pieces


def reference_scores(q, k_fp8, k_scale, weights, rows: slice, lo: int, hi: int) -> torch.Tensor:
    """Exact fp32 scores [rows, hi - lo] of keys [lo, hi)."""
    return score_block(fp32_product, q, k_fp8, k_scale, weights, rows, lo, hi, work_bytes=256 << 20)


def score_error_bound(q, k_fp8, k_scale, weights, rows: slice, lo: int, hi: int) -> torch.Tensor:
    """B[i, j] = k_scale[j] * sum_d (sum_h |w[i,h]| |q[i,h,d]|) |k[j,d]|.

    If each dot product is accumulated with error at most eps times the sum of its terms' magnitudes
    (true of fp32 and of the tensor cores' narrower fp8 accumulation, for a suitable eps), then, relu
    being 1-Lipschitz, the score moves by at most eps * B[i, j]: the scale of rounding for that pair.
    """
    u = (weights[rows].abs()[:, :, None] * q[rows].float().abs()).sum(1)  # [r, 128]
    out = torch.empty((u.shape[0], hi - lo), dtype=torch.float32, device=q.device)
    step = 1 << 16
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        out[:, a - lo:b - lo] = (u @ k_fp8[a:b].float().abs().T) * k_scale[a:b]
    return out


def reference_mqa_topk(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *, budget_bytes: int = 256 << 20):
    """Top-k per SPEC, computed the slow exact way (the tests' oracle)."""
    check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k)
    k_fp8, k_scale = kv
    return topk_by_pieces(fp32_product, q, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, budget_bytes)
