"""The dense path: materialise fp32 scores in pieces under a logits budget, then select.

This is how serving engines run the indexer today (a logits kernel, then a top-k kernel, in
pieces of at most 512 MiB of logits): the baseline the fused kernel is measured against and the
fallback for everything the fused kernel does not serve. Scores come from fp8 tensor cores where
the GPU has them (torch._scaled_mm), else from the exact fp32 product.
"""

from __future__ import annotations

import torch

from .contract import check_inputs
from .scoring import fp8_tensor_core_product, fp32_product, has_fp8_tensor_cores, topk_by_pieces

DEFAULT_LOGITS_BUDGET = 512 << 20


def dense_mqa_topk(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *,
                   logits_budget_bytes: int = DEFAULT_LOGITS_BUDGET, validate: bool = True) -> torch.Tensor:
    problem = check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, check_values=validate)
    k_fp8, k_scale = kv
    product = fp8_tensor_core_product if has_fp8_tensor_cores(problem.device) else fp32_product
    return topk_by_pieces(product, q, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, logits_budget_bytes)
