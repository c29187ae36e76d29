"""The vLLM drop-in (runtime/vllm.py) on a Hopper GPU, called as vLLM's sparse_attn_indexer calls its two
pairs: the answers written in place into a slice of a poisoned persistent index buffer, every row held
to the strict two-sided rule, the same bytes as the runtime's own entry called the same way, the rest
of the buffer untouched; a decode step captured in a CUDA graph (the layout made inside it, the block
table cut to the captured max_seq_len) and replayed with new lengths and queries, on the paged kernel
and on the dense path. (The paged-prefill call: tests/test_gpu_paged_prefill.py. The CPU twin of
these: tests/test_vllm.py.) Skipped, with the reason, where there is no Hopper GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import hopper_skip

from generator.paged_workloads import PagedWorkload, make_paged_workload, verify_paged
from generator.verify import verify_topk
from generator.workloads import packed_workload
from runtime import decode_layout, fused_mqa_topk, paged_mqa_topk
from runtime.vllm import decode_topk, prefill_chunk_topk, step_block_table

_SKIP = hopper_skip("the drop-in's kernels are Hopper's")
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

POISON = -7


@pytest.mark.parametrize(("rows", "keys", "requests", "heads", "top_k"),
                         [(1, 8192, 1, 32, 2048), (512, 8 * 8192, 8, 32, 512), (2048, 32768, 1, 64, 2048),
                          (4096, 131072, 1, 64, 1024)], ids=lambda x: str(x))
def test_a_prefill_chunk_is_written_in_place_exact(rows, keys, requests, heads, top_k):
    wl = packed_workload(rows, keys, heads, top_k, requests, seed=rows + heads, device="cuda")
    longest = keys // requests
    buffer = torch.full((rows + 64, top_k + 8), POISON, dtype=torch.int32, device="cuda")
    mine = buffer[32:32 + rows, :top_k]  # vLLM's chunk rows, its topk_tokens columns of a wider buffer
    returned = prefill_chunk_topk(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, mine, max_visible_keys=longest)
    torch.cuda.synchronize()
    assert returned.data_ptr() == mine.data_ptr()
    report = verify_topk(mine, *wl.args(), strict=True)
    assert report.ok, report.summary()
    assert torch.equal(mine, fused_mqa_topk(*wl.args(), validate=False, max_visible_keys=longest))
    assert (buffer[:32] == POISON).all() and (buffer[32 + rows:] == POISON).all() and (buffer[:, top_k:] == POISON).all()


@pytest.mark.parametrize("dense", [False, True], ids=["paged kernel", "dense path"])
def test_a_decode_step_captured_in_a_graph_fills_vllms_buffer_at_every_replay(tmp_path, monkeypatch, dense):
    from test_gpu_paged import route_by_table, table_entry

    contexts = [6000, 3000, 9000, 40]
    wl = make_paged_workload("random", contexts, 2, 64, 2048, seed=12, device="cuda", table_slack=60)
    max_seq_len = max(contexts)  # the graph's captured length; the block table is as wide as max_model_len
    cut = step_block_table(wl.block_table, max_seq_len, 64)
    route_by_table(monkeypatch, tmp_path, [table_entry(replace(wl, block_table=cut), dense, planned=True)])
    q, cache, weights, lens, table, top_k = (x.clone() if isinstance(x, torch.Tensor) else x for x in wl.args())
    kv_cache = cache.squeeze(-2)  # vLLM's [num_blocks, block_size, 132]
    rows = wl.batch * wl.next_n
    j = torch.arange(wl.next_n, dtype=torch.int32, device="cuda")
    seq_lens = (lens[:, None] - wl.next_n + j + 1).clamp(min=0).to(torch.int32)  # vLLM's decode_metadata.seq_lens
    buffer = torch.full((rows + 8, top_k), POISON, dtype=torch.int32, device="cuda")

    def step():
        layout = decode_layout(seq_lens[:, -1], step_block_table(table, max_seq_len, 64), wl.next_n, 64, cache.shape[0])
        decode_topk(q, kv_cache, weights, seq_lens, table, buffer[:rows], layout=layout, max_seq_len=max_seq_len)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    # (only shorter: a request's blocks past its own tokens are not its)
    for n, new in enumerate(([5999, 2999, 8999, 39], [100, 0, 9000, 40], contexts)):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        seq_lens.copy_((lens[:, None] - wl.next_n + j + 1).clamp(min=0))
        q.view(torch.uint8).copy_(torch.roll(wl.q.view(torch.uint8), n + 1, dims=0))
        buffer[:rows].fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        answer = buffer[:rows]
        step_data = PagedWorkload("random", q, cache, weights, lens, table, top_k)
        assert verify_paged(answer, step_data, strict=True).ok, f"replay {n}"
        assert torch.equal(answer, paged_mqa_topk(q, cache, weights, lens, cut, top_k,
                                                  variant="dense" if dense else None)), f"replay {n}"
        assert (buffer[rows:] == POISON).all()
