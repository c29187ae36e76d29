"""The fused path: one launch of a compiled variant; and the custom op behind the public entry."""

from __future__ import annotations

import torch

from .contract import Problem
from .dense import run_dense
from .dispatch import choose_variant
from .gate16 import gate_inputs_on_device
from .loader import aligned16, allocate, answer_buffer, launch_on, load, load_or_warn
from .variant import Variant


def heaviest_first(ks: torch.Tensor, ke: torch.Tensor, keys: int, rows_per_block: int) -> torch.Tensor:
    """Row blocks ordered by their longest row's visible keys, most first, ties by block index: the
    order persistent CTAs claim them in (so the long blocks start early and the short ones fill the
    tail). The libraries make it on the GPU themselves (templates/common/block_order.cuh); this is
    its definition, which the GPU tests hold them to."""
    rows = ks.shape[0]
    blocks = -(-rows // rows_per_block)
    visible = (ke.clamp(max=keys) - ks.clamp(min=0)).clamp(min=0)
    visible = torch.nn.functional.pad(visible, (0, blocks * rows_per_block - rows))
    return visible.view(blocks, rows_per_block).amax(1).argsort(descending=True, stable=True).to(torch.int32)


def launch_variant(variant: Variant, q, k_fp8, k_scale, weights, ks, ke, top_k: int,
                   out: torch.Tensor | None = None, stats: dict | None = None, lib=None) -> torch.Tensor:
    """Runs `variant` on the current stream (into `out` if given). Inputs must satisfy the contract.
    With `stats` (a dict; this synchronises), a gated variant reports "rescan_blocks": the row blocks
    its gate could not serve, which the exact streaming kernel redid, and "split_blocks": the blocks of
    the launch's tail that were cut into parts of their keys and selected from the parts' candidates
    (every part served; one whose selection then overflowed is among the rescanned too). `lib`: an
    already opened KernelLibrary of the variant (e.g. a patched build: tools/ablate.py) instead of the
    cached one."""
    if variant.heads != q.shape[1] or variant.top_k != top_k:
        raise ValueError(f"{variant.name} serves heads={variant.heads}, top_k={variant.top_k}; "
                         f"got heads={q.shape[1]}, top_k={top_k}")
    rows, keys = q.shape[0], k_fp8.shape[0]
    out = answer_buffer(out, rows, top_k, q.device)
    if rows == 0:
        return out
    if keys == 0:  # nothing to see: every row is all padding (and TMA maps cannot describe 0 keys)
        return out.fill_(-1)
    lib = lib or load(variant)
    q, k_fp8, k_scale = aligned16(q), aligned16(k_fp8), aligned16(k_scale)
    context, stream = launch_on(q.device)
    with context:
        workspace = allocate(lib.workspace_bytes(rows), q.device, f"{variant.name}'s workspace")
        args = (q.data_ptr(), k_fp8.data_ptr(), k_scale.data_ptr(), weights.data_ptr(), ks.data_ptr(), ke.data_ptr(),
                out.data_ptr(), workspace.data_ptr(), rows, keys)
        if variant.gate_bits == 16:
            gate = gate_inputs_on_device(lib, q, weights, k_fp8, stream)  # (alive until the launch is queued: the stream orders the rest)
            lib.launch_gate16(*args, *(x.data_ptr() for x in gate), stream)
        else:
            lib.launch(*args, stream)
    if stats is not None and variant.gated:
        counters = workspace[:16].view(torch.int32).tolist()  # the launcher's counters
        stats["rescan_blocks"], stats["split_blocks"] = counters[1], counters[3]
    return out


AUTO = "auto"  # the op's variant argument when the tuned table (dispatch) decides


def run_fused_op(q: torch.Tensor, k_fp8: torch.Tensor, k_scale: torch.Tensor, weights: torch.Tensor,
                 ks: torch.Tensor, ke: torch.Tensor, top_k: int, variant: str, longest_row: int) -> torch.Tensor:
    """The public entry's body: `variant` is a variant name, or AUTO for the table's choice (which
    may be the dense path) for rows that see at most `longest_row` keys. Inputs were checked by the
    caller."""
    problem = Problem(rows=q.shape[0], keys=k_fp8.shape[0], heads=q.shape[1], top_k=top_k, device=q.device,
                      visible_keys=longest_row)
    return run_checked(problem, q, k_fp8, k_scale, weights, ks, ke, variant)


def run_checked(problem: Problem, q, k_fp8, k_scale, weights, ks, ke, variant: str,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """run_fused_op for the Problem check_inputs returned (the eager entry: no second Problem made);
    the answer into `out` where given (a contiguous int32 [rows, top_k])."""
    lib = None
    if variant == AUTO:
        chosen = choose_variant(problem)
        lib = chosen and load_or_warn(chosen, "the dense path")
        if lib is None:
            return run_dense(q, k_fp8, k_scale, weights, ks, ke, problem.top_k, problem.longest_row, out=out)
    else:
        chosen = Variant.from_name(variant)
    return launch_variant(chosen, q, k_fp8, k_scale, weights, ks, ke, problem.top_k, out=out, lib=lib)


@torch.library.custom_op("fused_mqa_topk::topk", mutates_args=())
def fused_op(q: torch.Tensor, k_fp8: torch.Tensor, k_scale: torch.Tensor, weights: torch.Tensor,
             ks: torch.Tensor, ke: torch.Tensor, top_k: int, variant: str, longest_row: int) -> torch.Tensor:
    """run_fused_op as one opaque op of a compiled graph."""
    return run_fused_op(q, k_fp8, k_scale, weights, ks, ke, top_k, variant, longest_row)


@fused_op.register_fake
def _fused_op_fake(q, k_fp8, k_scale, weights, ks, ke, top_k, variant, longest_row):
    return q.new_empty((q.shape[0], top_k), dtype=torch.int32)
