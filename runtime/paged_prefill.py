"""Prefill straight from the paged cache: a chunk's top-k with its keys read through the requests'
block tables, where a server would first gather them into a workspace (vLLM's
cp_gather_indexer_k_quant_cache, sized for 40 x max_model_len keys in DeepSeek-V3.2).

    idx = paged_prefill_mqa_topk(q, kv_cache, weights, block_table, cu_seq_lens, ks, ke, top_k)

The chunk's keys are the ones that gather would lay end to end: request r's first cu_seq_lens[r + 1] -
cu_seq_lens[r] tokens from position cu_seq_lens[r] on. ks/ke [rows] index that key space exactly as
fused_mqa_topk's cu_seqlen_ks/ke index a gathered k, and the answer is fused_mqa_topk's (positions
relative to ks, ascending, -1 padded). Each row's keys lie in one request and start a multiple of 64
tokens into it (vLLM's prefill rows start at their request's first token); validate=True checks this.

The Hopper kernels' paged builds (Variant.paged_build, DenseVariant.paged_build) run it: the runtime
lays the requests out again with each one starting on a block boundary, so that a 64-key piece is
always in one cache block, and hands the kernels that layout's block list (`pages`, made on the
device: no readback). The path is the one the tuned table chooses for the gathered chunk (a fused
variant, or our dense kernels), as its paged build; on a GPU other than Hopper or with a block size
off 64, the keys are gathered and fused_mqa_topk answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .contract import Problem, _capturing, _tensor, check_queries, check_top_k
from .dense import run_dense_paged
from .dense_kernels import dense_variant_for
from .dense_variant import DenseVariant
from .dispatch import Decision, choose_variant, decide
from .fused import AUTO, run_checked
from .loader import aligned16, allocate, answer_buffer, launch_on, load, load_or_warn
from .page_layout import MAX_TILE_KEYS, PageLayout, page_layout, request_of
from .paged import block_table_flags, check_cache, gather_requests
from .reference import reference_mqa_topk
from .variant import Variant

GATHERED = "gathered"  # the keys gathered out of the cache, then fused_mqa_topk
REFERENCE = "reference"
PIECE = 64  # keys a TMA box of the paged builds reads from one cache block


class PagedChunk(NamedTuple):
    rows: int
    heads: int
    top_k: int
    requests: int
    num_blocks: int
    block_size: int
    max_blocks: int
    device: torch.device

    @property
    def laid_out_keys(self) -> int:
        """The key space of the kernel's layout (every request on block boundaries), an upper bound
        from the shapes: every request's block-table row full."""
        return self.requests * self.max_blocks * self.block_size


def check_paged_chunk(q, kv_cache, weights, block_table, cu_seq_lens, ks, ke, top_k, *, total_keys: int | None = None,
                      check_values: bool = True) -> PagedChunk:
    """Raises TypeError/ValueError naming the argument that breaks the contract; returns the shape.
    check_values (a readback) also checks the values: lengths within the block-table rows, the blocks
    they use inside the cache, each row's keys in one request starting a multiple of 64 tokens in."""
    q = check_queries(q, 3)
    num_blocks, block_size = check_cache(kv_cache)
    weights = _tensor("weights", weights, torch.float32, 2)
    block_table = _tensor("block_table", block_table, torch.int32, 2)
    cu_seq_lens = _tensor("cu_seq_lens", cu_seq_lens, torch.int32, 1)
    ks = _tensor("cu_seqlen_ks", ks, torch.int32, 1)
    ke = _tensor("cu_seqlen_ke", ke, torch.int32, 1)
    check_top_k(top_k)
    rows, heads, _ = q.shape
    if tuple(weights.shape) != (rows, heads):
        raise ValueError(f"weights: expected shape [{rows}, {heads}] (rows, H), got {tuple(weights.shape)}")
    requests, max_blocks = block_table.shape
    if requests < 1 or max_blocks < 1:
        raise ValueError(f"block_table: expected shape [requests >= 1, max_blocks >= 1], got {tuple(block_table.shape)}")
    if tuple(cu_seq_lens.shape) != (requests + 1,):
        raise ValueError(f"cu_seq_lens: expected shape [{requests + 1}] (requests + 1), got {tuple(cu_seq_lens.shape)}")
    for name, x in (("cu_seqlen_ks", ks), ("cu_seqlen_ke", ke)):
        if tuple(x.shape) != (rows,):
            raise ValueError(f"{name}: expected shape [{rows}] (one per row of q), got {tuple(x.shape)}")
    for name, x in (("kv_cache", kv_cache), ("weights", weights), ("block_table", block_table),
                    ("cu_seq_lens", cu_seq_lens), ("cu_seqlen_ks", ks), ("cu_seqlen_ke", ke)):
        if x.device != q.device:
            raise ValueError(f"{name}: on {x.device}, but q is on {q.device}; all inputs must share one device")
    chunk = PagedChunk(rows, heads, top_k, requests, num_blocks, block_size, max_blocks, q.device)
    if chunk.laid_out_keys + MAX_TILE_KEYS >= 2**31:
        raise ValueError(f"block_table: {requests} requests x {max_blocks} blocks x {block_size} tokens is past int32")
    if total_keys is not None and (isinstance(total_keys, bool) or not isinstance(total_keys, int) or total_keys < 0):
        raise ValueError(f"total_keys: expected an int >= 0, got {total_keys!r}")
    if check_values and not _capturing(q.device):
        _check_chunk_values(chunk, block_table, cu_seq_lens, ks, ke, total_keys)
    return chunk


def _check_chunk_values(chunk: PagedChunk, block_table, cu_seq_lens, ks, ke, total_keys: int | None) -> None:
    cu = cu_seq_lens.long()
    negative, too_long, bad_ids = block_table_flags(cu[1:] - cu[:-1], block_table, chunk.num_blocks, chunk.block_size)
    request = request_of(cu, ks)
    first = ks.long() - cu[request]
    nonempty = ke > ks
    flags = torch.stack([
        cu[0] != 0, negative, too_long, bad_ids.any(),
        (nonempty & ((ks < 0) | (ke > cu[-1]))).any(),
        (nonempty & ((first < 0) | (ke.long() > cu[request + 1]))).any(),
        (nonempty & (first % PIECE != 0)).any(), cu[-1],
    ]).tolist()
    reasons = ("cu_seq_lens: must start at 0", "cu_seq_lens: must not decrease",
               f"cu_seq_lens: a request is longer than its block-table row holds ({chunk.max_blocks} blocks x "
               f"{chunk.block_size} tokens)", f"block_table: a block a request uses is outside the cache's "
               f"{chunk.num_blocks} blocks", "cu_seqlen_ks/cu_seqlen_ke: a row's range is outside [0, cu_seq_lens[-1]]",
               "cu_seqlen_ks/cu_seqlen_ke: a row's range is not within one request",
               f"cu_seqlen_ks: a row's keys start a number of tokens into its request that is not a multiple of {PIECE}")
    for flag, reason in zip(flags, reasons):
        if flag:
            raise ValueError(reason)
    if total_keys is not None and total_keys != flags[-1]:
        raise ValueError(f"total_keys: {total_keys}, but cu_seq_lens[-1] is {flags[-1]}")


def gathered_prefill(q, kv_cache, weights, block_table, cu_seq_lens, ks, ke, top_k: int, problem: Problem,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """The chunk's keys gathered out of the cache (gather_requests: a readback), then fused_mqa_topk's
    path for `problem` on them: the fallback, and what a server does today."""
    k_fp8, k_scale, _ = gather_requests(kv_cache, cu_seq_lens[1:] - cu_seq_lens[:-1], block_table)
    return run_checked(problem._replace(keys=k_fp8.shape[0]), q, k_fp8, k_scale, weights, ks, ke, AUTO, out=out)


def launch_paged_prefill(variant: Variant, q, kv_cache, weights, layout: PageLayout, top_k: int,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """Runs the paged build `variant` over the chunk `layout` describes (page_layout) on the current
    stream (into `out` if given); the inputs must satisfy the contract's forms. No readback:
    capturable in a CUDA graph."""
    rows, heads = q.shape[:2]
    num_blocks, block_size = kv_cache.shape[:2]
    if (variant.heads, variant.top_k, variant.page_block_size) != (heads, top_k, block_size) or \
            layout.block_size != block_size:
        raise ValueError(f"{variant.name} serves heads={variant.heads}, top_k={variant.top_k}, block_size="
                         f"{variant.page_block_size}; got {heads}, {top_k}, {block_size} (layout: {layout.block_size})")
    out = answer_buffer(out, rows, top_k, q.device)
    if rows == 0:
        return out
    lib = load(variant)
    q, kv_cache = aligned16(q), aligned16(kv_cache)
    context, stream = launch_on(q.device)
    with context:
        workspace = allocate(lib.workspace_bytes(rows), q.device, f"{variant.name}'s workspace")
        lib.launch_paged(q.data_ptr(), kv_cache.data_ptr(), layout.pages.data_ptr(), num_blocks, weights.data_ptr(),
                         layout.ks.data_ptr(), layout.ke.data_ptr(), out.data_ptr(), workspace.data_ptr(), rows,
                         layout.keys, stream)
    return out


def paged_prefill_choice(problem: Problem, block_size: int) -> tuple[Variant | DenseVariant | None, str]:
    """(the paged build that serves this chunk, why) or (None, why the keys are gathered instead)."""
    if problem.device.type != "cuda":
        return None, f"the tensors are on {problem.device}: the paged builds are CUDA kernels"
    if block_size % PIECE:
        return None, f"block size {block_size}: the paged builds read {PIECE}-key pieces of a block"
    chosen = choose_variant(problem)
    if chosen is None:
        chosen = dense_variant_for(problem.device, problem.heads, problem.top_k, problem.longest_row)
        if chosen is None:
            return None, "the table chose the dense path, and our dense kernels do not run here (not Hopper)"
    elif chosen.mma != "wgmma":
        return None, f"the table's choice {chosen.name} is not a Hopper (wgmma) kernel"
    return chosen.paged_build(block_size), f"the paged build of the table's choice ({chosen.name})"


@dataclass(frozen=True)
class PagedPrefillDecision:
    """What paged_prefill_mqa_topk does with a call, and why (explain_paged_prefill returns it)."""

    table: Decision  # the table's decision for the gathered chunk
    build: Variant | DenseVariant | None  # its paged build; None: the keys are gathered first
    why: str

    def __str__(self) -> str:
        keys = f"read from the paged cache by {self.build.name}" if self.build else "gathered out of the cache first"
        return f"{self.table}\nkeys: {keys} ({self.why})"


def explain_paged_prefill(q, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *,
                          total_keys: int | None = None, max_visible_keys: int | None = None,
                          validate: bool = False) -> PagedPrefillDecision:
    """What paged_prefill_mqa_topk would do with these arguments and why: the table's decision for
    the gathered chunk and the paged build that runs it, or why the keys are gathered. Checks shapes
    and dtypes (and with validate, the values); launches no kernel of ours, compiles nothing."""
    chunk = check_paged_chunk(q, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k,
                              total_keys=total_keys, check_values=validate)
    problem = _chunk_problem(chunk, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, total_keys, max_visible_keys, validate)
    build, why = paged_prefill_choice(problem, chunk.block_size)
    return PagedPrefillDecision(decide(problem), build, why)


def _chunk_problem(chunk: PagedChunk, cu_seq_lens, ks, ke, total_keys: int | None, max_visible_keys: int | None,
                   measure: bool) -> Problem:
    """The gathered chunk's Problem, the tuned table's lookup key: its keys (total_keys, else read
    back) and its longest row (max_visible_keys, else measured where `measure`)."""
    keys = int(cu_seq_lens[-1]) if total_keys is None else total_keys
    visible = max_visible_keys
    if visible is None and measure and chunk.rows:
        visible = int((ke - ks).clamp(min=0).max())
    return Problem(rows=chunk.rows, keys=keys, heads=chunk.heads, top_k=chunk.top_k, device=chunk.device,
                   visible_keys=None if visible is None else min(visible, keys))


def run_paged_build(variant: Variant | DenseVariant, q, kv_cache, weights, layout: PageLayout, top_k: int,
                    longest_row: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """A fused or dense paged build over the chunk `layout` describes (rows seeing at most
    longest_row keys: the dense kernels' logits window)."""
    if isinstance(variant, DenseVariant):
        return run_dense_paged(variant, q, kv_cache, weights, layout, top_k, longest_row, out=out)
    return launch_paged_prefill(variant, q, kv_cache, weights, layout, top_k, out=out)


def paged_prefill_mqa_topk(q, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k: int, *,
                           total_keys: int | None = None, max_visible_keys: int | None = None, validate: bool = True,
                           layout: PageLayout | None = None, variant: Variant | DenseVariant | str | None = None,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    """Top-k key positions per query row of a prefill chunk whose keys are in the paged cache,
    int32 [M, top_k], relative to cu_seqlen_ks, ascending, -1 padded (fused_mqa_topk's answer on the
    gathered keys).

    q e4m3 [M, H, 128]; kv_cache uint8 [num_blocks, block_size, 1, 132] (DeepGEMM's paged layout, as
    paged_mqa_topk reads it); weights f32 [M, H]; block_table int32 [R, max_blocks] and cu_seq_lens
    int32 [R + 1] (request r's tokens [0, cu_seq_lens[r + 1] - cu_seq_lens[r]) sit at cu_seq_lens[r] of
    the key space); cu_seqlen_ks / cu_seqlen_ke int32 [M] index that space. total_keys (cu_seq_lens[-1],
    which a server knows on the host) and max_visible_keys are what the tuned table is looked up by;
    without total_keys it is read back. validate=False skips the value checks (a readback); unchecked
    bad values never fault: lengths are clamped to the block table, block ids into the cache.
    `layout`: the chunk's page_layout, made once for all its layers (else made here). `variant`: a
    Variant or DenseVariant (its paged build runs) or its name, or "gathered" / "reference"."""
    chunk = check_paged_chunk(q, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k,
                              total_keys=total_keys, check_values=validate)
    if out is not None:
        answer_buffer(out, chunk.rows, top_k, q.device)  # (its checks)
    if chunk.rows == 0:
        return answer_buffer(out, 0, top_k, q.device)
    name = AUTO if variant is None else variant if isinstance(variant, str) else variant.name
    if name == REFERENCE:
        k_fp8, k_scale, _ = gather_requests(kv_cache, cu_seq_lens[1:] - cu_seq_lens[:-1], block_table)
        answer = reference_mqa_topk(q, (k_fp8, k_scale), weights, cu_seqlen_ks, cu_seqlen_ke, top_k)
        return answer if out is None else out.copy_(answer)
    problem = _chunk_problem(chunk, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, total_keys, max_visible_keys, validate)
    if name == GATHERED:
        return gathered_prefill(q, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k,
                                problem, out=out)
    if name == AUTO:
        chosen = paged_prefill_choice(problem, chunk.block_size)[0]
        if chosen is None or load_or_warn(chosen, "the gathered path") is None:
            return gathered_prefill(q, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k,
                                    problem, out=out)
    else:
        chosen = (DenseVariant if name.startswith("mqa_dense_") else Variant).from_name(name)
        chosen = chosen if chosen.page_block_size else chosen.paged_build(chunk.block_size)
    if layout is None:
        layout = page_layout(block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, chunk.block_size, chunk.num_blocks)
    return run_paged_build(chosen, q, kv_cache, weights, layout, top_k, problem.longest_row, out=out)
