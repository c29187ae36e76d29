"""The dense path: materialise fp32 scores in pieces under a logits budget, then select.

This is how serving engines run the indexer today (a logits kernel, then a top-k kernel, in
pieces of at most 512 MiB of logits): the baseline the fused kernel is measured against and the
fallback for everything the fused kernel does not serve.

On Hopper it runs our own kernels (templates/dense_mqa_topk_sm90.cu.j2: a TMA + wgmma logits
kernel and a histogram top-k). Elsewhere it runs in torch: fp8 tensor-core logits through
torch._scaled_mm where the GPU has them, else exact fp32, then torch.topk.
"""

from __future__ import annotations

import torch

from .contract import check_inputs, clamp_ranges
from .dense_kernels import dense_variant_for
from .dense_variant import DenseVariant
from .loader import DenseLibrary, aligned16, allocate, answer_buffer, launch_on, load, load_or_warn
from .scoring import (
    fp8_tensor_core_product,
    fp32_product,
    has_fp8_tensor_cores,
    topk_by_pieces,
    window_pieces,
)

DEFAULT_LOGITS_BUDGET = 512 << 20


def dense_mqa_topk(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *,
                   logits_budget_bytes: int = DEFAULT_LOGITS_BUDGET, validate: bool = True,
                   variant: DenseVariant | None = None, max_visible_keys: int | None = None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """The dense path. `variant` forces our dense kernels (an error if they cannot be built); by
    default they serve where they run and can be built, else torch does (one warning). Their logits
    layout and top-k kernel follow the most keys one row sees: measured with validate=True, else
    max_visible_keys, else N (as fused_mqa_topk). `out`: a caller-owned contiguous int32 [M, top_k]
    the answer is written into (and returned), as fused_mqa_topk's."""
    problem = check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, check_values=validate,
                           max_visible_keys=max_visible_keys)
    return run_dense(q, kv[0], kv[1], weights, cu_seqlen_ks, cu_seqlen_ke, top_k, problem.longest_row,
                     logits_budget_bytes, variant, out)


def run_dense(q, k_fp8, k_scale, weights, ks, ke, top_k: int, longest_row: int | None = None,
              budget: int = DEFAULT_LOGITS_BUDGET, variant: DenseVariant | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """The dense path on inputs whose shapes were checked, for rows that see at most `longest_row`
    keys (None: unknown; our kernels answer a row that sees more from its first longest_row keys, the
    torch path sees every key). Their ranges need not have been checked: our kernels clamp each row's
    range on the device, and the torch path clamps them before it plans. `out`: our kernels write into it
    (a contiguous int32 [rows, top_k], checked: loader.answer_buffer; the checks poison it first), the
    torch path copies into it."""
    if variant is not None:
        lib = load(variant)
    else:
        variant = dense_variant_for(q.device, q.shape[1], top_k, longest_row)
        lib = variant and load_or_warn(variant, "the torch dense path")
    if lib is not None:
        return _dense_kernels(lib, q, k_fp8, k_scale, weights, ks, ke, top_k, budget, longest_row, out)
    ks, ke = clamp_ranges(ks, ke, k_fp8.shape[0])  # (its pieces span the ranges: an unchecked one could be huge)
    product = fp8_tensor_core_product if has_fp8_tensor_cores(q.device) else fp32_product
    answer = topk_by_pieces(product, q, k_fp8, k_scale, weights, ks, ke, top_k, budget)
    return answer if out is None else answer_buffer(out, q.shape[0], top_k, q.device).copy_(answer)


def _dense_kernels(lib: DenseLibrary, q, k_fp8, k_scale, weights, ks, ke, top_k: int, budget: int,
                   longest_row: int | None, out: torch.Tensor | None) -> torch.Tensor:
    """Our dense kernels in one host call (DenseLibrary.run): pieces of as many rows as fit the budget
    with each row's logits in a window of the longest row's keys (scoring.window_pieces), each scored,
    then selected (the library walks them; nothing is read back from the device)."""
    q, k_fp8, k_scale = aligned16(q), aligned16(k_fp8), aligned16(k_scale)
    return _in_pieces(lib, q, top_k, k_fp8.shape[0], longest_row, budget, out, lambda out, logits, window, piece_rows, stream:
                      lib.run(q.data_ptr(), k_fp8.data_ptr(), k_scale.data_ptr(), weights.data_ptr(), ks.data_ptr(),
                              ke.data_ptr(), out.data_ptr(), logits.data_ptr(), window, piece_rows, q.shape[0],
                              k_fp8.shape[0], stream))


def run_dense_paged(variant: DenseVariant, q, kv_cache, weights, layout, top_k: int, longest_row: int,
                    budget: int = DEFAULT_LOGITS_BUDGET, out: torch.Tensor | None = None,
                    lib: DenseLibrary | None = None) -> torch.Tensor:
    """Our dense kernels' paged build `variant` (DenseVariant.paged_build) over a chunk whose keys are
    in the paged cache, laid out as runtime.paged_prefill.page_layout says: as _dense_kernels, the
    logits in windows of `longest_row` keys (every row sees at most that many). `lib`: a library of
    `variant` to run instead of the one `load` finds (developer tools timing two builds of it)."""
    lib = lib or load(variant)
    q, kv_cache = aligned16(q), aligned16(kv_cache)
    return _in_pieces(lib, q, top_k, layout.keys, longest_row, budget, out, lambda out, logits, window, piece_rows, stream:
                      lib.run_paged(q.data_ptr(), kv_cache.data_ptr(), layout.pages.data_ptr(), kv_cache.shape[0],
                                    weights.data_ptr(), layout.ks.data_ptr(), layout.ke.data_ptr(), out.data_ptr(),
                                    logits.data_ptr(), window, piece_rows, q.shape[0], layout.keys, stream))


def logits_bytes(rows: int, keys: int, longest_row: int | None, budget: int = DEFAULT_LOGITS_BUDGET) -> int:
    """The fp32 logits one call of our dense kernels allocates (_in_pieces): a window of the longest
    row's keys for as many rows as fit the budget."""
    window, piece_rows = window_pieces(rows, keys, longest_row, budget)
    return 4 * piece_rows * window


def _in_pieces(lib: DenseLibrary, q, top_k: int, keys: int, longest_row: int | None, budget: int,
               out: torch.Tensor | None, run) -> torch.Tensor:
    """The answer buffer and the pieces' logits for one library call, run(out, logits, window,
    piece_rows, stream) on q's device and current stream."""
    rows = q.shape[0]
    out = answer_buffer(out, rows, top_k, q.device)
    if rows == 0:
        return out
    window, piece_rows = window_pieces(rows, keys, longest_row, budget)
    logits = allocate(logits_bytes(rows, keys, longest_row, budget), q.device, f"{lib.variant.name}'s logits",
                      torch.float32)
    context, stream = launch_on(q.device)
    with context:
        run(out, logits, window, piece_rows, stream)
    return out
