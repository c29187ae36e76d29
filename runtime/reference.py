"""The reference path: the contract's definition (README.md), exact fp32 from the fp8 values, on any device."""

from __future__ import annotations

import torch

from .contract import check_inputs
from .scoring import fp32_product, score_block, topk_by_pieces


def reference_scores(q, k_fp8, k_scale, weights, rows: slice, lo: int, hi: int) -> torch.Tensor:
    """Exact fp32 scores [rows, hi - lo] of keys [lo, hi)."""
    return score_block(fp32_product, q, k_fp8, k_scale, weights, rows, lo, hi, work_bytes=256 << 20)


def reference_mqa_topk(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *, budget_bytes: int = 256 << 20):
    """Top-k per the contract, computed the slow exact way (the tests' oracle)."""
    check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k)
    k_fp8, k_scale = kv
    return topk_by_pieces(fp32_product, q, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, budget_bytes)
