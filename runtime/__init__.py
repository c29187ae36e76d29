"""Sparse-attention indexer top-k for DeepSeek-V3.2 / GLM-5-class models.

    idx = fused_mqa_topk(q, (k_fp8, k_scale), weights, cu_seqlen_ks, cu_seqlen_ke, top_k)

returns, for every query row, the indices (relative to its ks) of its top_k keys by
score[i, j] = k_scale[j] * sum_h weights[i, h] * relu(q[i, h] . k[j]); -1 pads rows that see fewer.
"""

from __future__ import annotations

import torch

from .contract import SUPPORTED_HEADS, SUPPORTED_TOP_K, Problem, check_inputs
from .dense import dense_mqa_topk
from .dispatch import Decision, choose_variant, decide
from .fused import AUTO, fused_op, run_checked
from .paged import decode_layout, explain_paged, paged_mqa_topk, reference_paged_mqa_topk
from .paged_prefill import explain_paged_prefill, paged_prefill_mqa_topk
from .reference import reference_mqa_topk
from .variant import Variant

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("fused-mqa-topk")
except PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+checkout"

__all__ = ["__version__", "fused_mqa_topk", "dense_mqa_topk", "reference_mqa_topk", "paged_mqa_topk", "decode_layout",
           "paged_prefill_mqa_topk", "explain_paged_prefill", "reference_paged_mqa_topk", "explain", "explain_paged", "choose_variant", "check_inputs", "SUPPORTED_HEADS",
           "SUPPORTED_TOP_K", "Problem", "Decision"]


def fused_mqa_topk(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *, variant: Variant | str | None = None,
                   validate: bool = True, max_visible_keys: int | None = None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """Top-k key indices per query row, int32 [M, top_k], relative to cu_seqlen_ks, -1 padded.

    Runs the fused kernel the GPU's tuned table picks (or `variant`, to force one), else the dense
    path, which gives the same answer. The table is looked up by the rows and the most keys one row
    sees: validate=True measures it, else pass max_visible_keys (the longest request's keys, as
    flash-attn's max_seqlen_k; without it the chunk's N is assumed, which treats eight packed 16K
    requests as one 128K request). It is a promise: validate=True raises where a row sees more, and
    unchecked, the dense kernels answer such a row from its first max_visible_keys keys. validate=False
    skips the value checks that read inputs back from the GPU (a synchronisation; turn them off inside
    CUDA graphs and torch.compile regions); shape/dtype checks always run. The choice of path happens
    inside the custom op, so compiled graphs hold one opaque call; inside a compiled region pass
    `variant` as a name string (dynamo may trace a Variant's integer fields as symbols and cannot format
    them into its name). `out`: a caller-owned contiguous int32 [M, top_k] the answer is written into
    (and returned), as a server's persistent index buffer.
    """
    problem = check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, check_values=validate,
                           max_visible_keys=max_visible_keys)
    k_fp8, k_scale = kv  # (unchecked ranges need no clamping here: every path clamps each row's range itself)
    name = AUTO if variant is None else variant if isinstance(variant, str) else variant.name
    if name != AUTO and problem.device.type != "cuda":
        raise ValueError(f"variant {name} needs CUDA tensors; q is on {problem.device}")
    # The custom op is what compiled graphs see; eager calls skip its dispatch (tens of us a call).
    if torch.compiler.is_compiling():
        answer = fused_op(q, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, name, problem.longest_row)
        return answer if out is None else out.copy_(answer)
    return run_checked(problem, q, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, name, out=out)


def explain(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *, validate: bool = False,
            max_visible_keys: int | None = None) -> Decision:
    """What fused_mqa_topk would do with these arguments and why: the path, the variant, the GPU
    identity, the table read (its own, or borrowed from a GPU of the same arch) and the nearest
    bucket's entry. print() it. Checks shapes and dtypes (and with validate, the values, measuring
    the longest row as a validated call does); launches no kernel of ours."""
    problem = check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, check_values=validate,
                           max_visible_keys=max_visible_keys)
    return decide(problem)

