"""A drop-in for vLLM's sparse-attention indexer (DeepSeek-V3.2 class), one function per branch.

vLLM's `sparse_attn_indexer` (vllm/model_executor/layers/sparse_attn_indexer.py) selects each token's
top-k keys in two pairs of calls, both writing request-local positions into the persistent
`topk_indices_buffer` (int32 [max_num_batched_tokens, index_topk], -1 where a row has fewer):

* prefill, per chunk: `fp8_fp4_mqa_logits` over the chunk's gathered keys, then
  `top_k_per_row_prefill`. Replace both with `prefill_chunk_topk`:

      prefill_chunk_topk(q_quant[chunk.token_start:chunk.token_end], k_quant,
                         k_scale.view(torch.float32).squeeze(-1), weights[chunk.token_start:chunk.token_end],
                         chunk.cu_seqlen_ks, chunk.cu_seqlen_ke,
                         topk_indices_buffer[chunk.token_start:chunk.token_end, :topk_tokens],
                         max_visible_keys=prefill_metadata.max_prefill_seq_len)

  Or skip the gather (`cp_gather_indexer_k_quant_cache` and its workspace) with
  `prefill_chunk_topk_paged`, which reads the chunk's keys from the paged cache through its block table:

      prefill_chunk_topk_paged(q_quant[chunk.token_start:chunk.token_end], kv_cache,
                               weights[chunk.token_start:chunk.token_end], chunk.block_table,
                               chunk.cu_seq_lens, chunk.cu_seqlen_ks, chunk.cu_seqlen_ke,
                               topk_indices_buffer[chunk.token_start:chunk.token_end, :topk_tokens],
                               total_keys=chunk.total_seq_lens,
                               max_visible_keys=prefill_metadata.max_prefill_seq_len)

* decode: `fp8_fp4_paged_mqa_logits` over the paged cache (a [B * next_n, max_model_len] fp32 logits
  buffer), then `cooperative_topk` / `persistent_topk` / `top_k_per_row_decode`. Replace them with
  `decode_topk`, which reads the cache through the block table itself (no schedule metadata; the paged
  kernel writes no logits, the dense path that the GPU's decode table picks for some steps at most 512
  MiB of them, not max_model_len's):

      decode_topk(padded_q, kv_cache, weights[:B * next_n], decode_metadata.seq_lens,
                  decode_metadata.block_table, topk_indices_buffer[:B * next_n, :topk_tokens],
                  max_seq_len=attn_metadata.max_seq_len)  # (eager; in a graph, the length it was captured at)

Both check only shapes and dtypes (no readback: decode steps run in CUDA graphs) and write into the
caller's buffer. The answers are the contract's: exact, ties to the smallest positions, each row in
ascending order (vLLM's own top-k leaves the order unspecified; its consumer,
triton_convert_req_index_to_global_index, maps every position alike).
"""

from __future__ import annotations

import torch

from .contract import check_inputs
from .fused import AUTO, run_checked
from .paged import paged_mqa_topk
from .paged_prefill import paged_prefill_mqa_topk


def prefill_chunk_topk(q_fp8, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, topk_indices: torch.Tensor, *,
                       max_visible_keys: int | None = None) -> torch.Tensor:
    """One prefill chunk's top-k positions into topk_indices [M, top_k] (int32, a row slice of vLLM's
    buffer), relative to each row's cu_seqlen_ks as vLLM's top_k_per_row_prefill writes them, -1 after
    a row's last. q_fp8 [M, H, 128] e4m3; k_fp8 [N, 128] e4m3 and k_scale [N] fp32 (the chunk's
    gathered keys); weights [M, H] fp32; cu_seqlen_ks / cu_seqlen_ke int32 [M]. max_visible_keys: the
    most keys one row sees (vLLM's prefill_metadata.max_prefill_seq_len bounds it), for the tuned
    table's lookup; at most N. Returns topk_indices."""
    top_k = topk_indices.shape[-1]
    if max_visible_keys is not None:
        max_visible_keys = min(int(max_visible_keys), k_fp8.shape[0])
    problem = check_inputs(q_fp8, (k_fp8, k_scale), weights, cu_seqlen_ks, cu_seqlen_ke, top_k, check_values=False,
                           max_visible_keys=max_visible_keys)
    return _written(topk_indices, lambda out: run_checked(problem, q_fp8, k_fp8, k_scale, weights, cu_seqlen_ks,
                                                          cu_seqlen_ke, AUTO, out=out))


def prefill_chunk_topk_paged(q_fp8, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke,
                             topk_indices: torch.Tensor, *, total_keys: int | None = None,
                             max_visible_keys: int | None = None) -> torch.Tensor:
    """prefill_chunk_topk with the chunk's keys read from the paged cache instead of gathered:
    kv_cache uint8 [num_blocks, block_size, 132] (or [..., 1, 132]); block_table int32 [R, max_blocks]
    and cu_seq_lens int32 [R + 1] (the chunk's requests and where the gather would put their keys);
    the rest as prefill_chunk_topk's (runtime.paged_prefill_mqa_topk: each row's keys start at its
    request's first). total_keys: cu_seq_lens[-1] as the host knows it (vLLM's chunk.total_seq_lens),
    else read back. Returns topk_indices."""
    if kv_cache.dim() == 3:
        kv_cache = kv_cache.unsqueeze(-2)
    top_k = topk_indices.shape[-1]
    if total_keys is not None and max_visible_keys is not None:
        max_visible_keys = min(int(max_visible_keys), int(total_keys))
    return _written(topk_indices, lambda out: paged_prefill_mqa_topk(
        q_fp8, kv_cache, weights, block_table, cu_seq_lens, cu_seqlen_ks, cu_seqlen_ke, top_k, total_keys=total_keys,
        max_visible_keys=max_visible_keys, validate=False, out=out))


def decode_topk(q_fp8, kv_cache, weights, seq_lens, block_table, topk_indices: torch.Tensor, *,
                layout=None, max_seq_len: int | None = None) -> torch.Tensor:
    """A decode step's top-k positions into topk_indices [B * next_n, top_k] (int32, the first rows of
    vLLM's buffer), positions within each request, -1 after a row's last. q_fp8 [B, next_n, H, 128] e4m3;
    kv_cache uint8 [num_blocks, block_size, 132] (or with vLLM's unsqueezed head dimension, [..., 1,
    132]); weights [B * next_n, H] fp32; seq_lens int32 [B, next_n] (vLLM's decode_metadata.seq_lens:
    row j of request b sees seq_lens[b, j] = context - next_n + j + 1 tokens) or [B] (the contexts);
    block_table int32 [B, max_blocks]. max_seq_len: the step's longest context, a host number vLLM's
    metadata holds (at least every context: a longer one would be cut to it): the block table is cut to
    it (step_block_table), so that dispatch looks the step up, and the dense path sizes its logits, at
    that length rather than the block table's width (max_model_len's). layout: the step's
    runtime.decode_layout, made once a step for every layer from the block table this call reads (the
    cut one, where max_seq_len is given), the dense path's; None: made by each call that takes it.
    Returns topk_indices."""
    if kv_cache.dim() == 3:
        kv_cache = kv_cache.unsqueeze(-2)
    if max_seq_len is not None:
        block_table = step_block_table(block_table, max_seq_len, kv_cache.shape[1])
    context_lens = seq_lens[:, -1].contiguous() if seq_lens.dim() == 2 else seq_lens
    top_k = topk_indices.shape[-1]
    return _written(topk_indices, lambda out: paged_mqa_topk(q_fp8, kv_cache, weights, context_lens, block_table, top_k,
                                                             validate=False, out=out, layout=layout))


def step_block_table(block_table: torch.Tensor, max_seq_len: int, block_size: int) -> torch.Tensor:
    """The block table's first blocks that hold max_seq_len tokens (at least one), contiguous: the
    table as wide as the step's longest context. A CUDA graph captures it at the width it is captured
    with: give the same max_seq_len to every replay of one graph."""
    if max_seq_len < 0:
        raise ValueError(f"max_seq_len: expected a length >= 0, got {max_seq_len}")
    blocks = max(1, -(-int(max_seq_len) // block_size))
    return block_table if blocks >= block_table.shape[1] else block_table[:, :blocks].contiguous()


def _written(buffer: torch.Tensor, run) -> torch.Tensor:
    """run(out) writes into `buffer` where the kernels can (a contiguous int32 slice), else into a new
    tensor copied into it (a column slice narrower than the buffer's rows)."""
    if buffer.dtype != torch.int32:
        raise TypeError(f"topk_indices: expected dtype torch.int32, got {buffer.dtype}")
    if buffer.is_contiguous():
        return run(buffer)
    return buffer.copy_(run(None))
