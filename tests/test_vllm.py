"""The vLLM drop-in (runtime/vllm.py) on CPU: the tensors vLLM holds at each call, answers written in
place into a slice of a persistent index buffer, equal to the reference; the rest of the buffer
untouched. (On the GPU machine the same calls run the kernels: tests/test_gpu_paged.py covers decode.)"""

import pytest
import torch

from generator.paged_workloads import make_paged_workload, page_chunk
from generator.workloads import make_workload
from runtime import reference_mqa_topk, reference_paged_mqa_topk
from runtime.vllm import decode_topk, prefill_chunk_topk, prefill_chunk_topk_paged


@pytest.mark.parametrize("wide", [False, True], ids=["contiguous", "column-slice"])
def test_a_prefill_chunk_is_written_into_its_rows_of_the_buffer(wide):
    wl = make_workload("multi_request", 96, 3000, 32, 512, seed=3)
    buffer = torch.full((wl.rows + 16, 512 + (8 if wide else 0)), 7, dtype=torch.int32)
    rows = buffer[8:8 + wl.rows, :512]
    returned = prefill_chunk_topk(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, rows,
                                  max_visible_keys=10**6)  # (a bound above N is clamped to N)
    assert returned.data_ptr() == rows.data_ptr()
    assert torch.equal(rows, reference_mqa_topk(*wl.args()))
    assert (buffer[:8] == 7).all() and (buffer[8 + wl.rows:] == 7).all()
    if wide:
        assert (buffer[:, 512:] == 7).all()


def test_a_prefill_chunk_is_read_from_the_paged_cache_into_its_rows():
    wl = make_workload("multi_request", 64, 2500, 64, 512, seed=4)
    chunk = page_chunk(wl, block_size=64, seed=5)
    buffer = torch.full((wl.rows + 4, 512), 7, dtype=torch.int32)
    prefill_chunk_topk_paged(wl.q, chunk.kv_cache.squeeze(-2), wl.weights, chunk.block_table, chunk.cu_seq_lens,
                             wl.ks, wl.ke, buffer[4:], total_keys=2500, max_visible_keys=2500)
    assert torch.equal(buffer[4:], reference_mqa_topk(*wl.args()))
    assert (buffer[:4] == 7).all()


@pytest.mark.parametrize("seq_lens_2d", [True, False], ids=["seq_lens[B, next_n]", "seq_lens[B]"])
def test_a_decode_step_reads_vllms_layout_and_fills_the_first_rows(seq_lens_2d):
    wl = make_paged_workload("random", [700, 2100, 0, 64], 2, 64, 512, seed=5, shared_prefix=2)
    kv_cache = wl.kv_cache.squeeze(-2)  # vLLM's [num_blocks, block_size, 132]
    j = torch.arange(wl.next_n, dtype=torch.int32)
    per_row = (wl.context_lens[:, None] - wl.next_n + j + 1).clamp(min=0).to(torch.int32)  # as vLLM builds it
    seq_lens = per_row if seq_lens_2d else wl.context_lens
    buffer = torch.full((wl.batch * wl.next_n + 5, 512), 7, dtype=torch.int32)
    decode_topk(wl.q, kv_cache, wl.weights, seq_lens, wl.block_table, buffer[: wl.batch * wl.next_n])
    assert torch.equal(buffer[: wl.batch * wl.next_n], reference_paged_mqa_topk(*wl.args()))
    assert (buffer[wl.batch * wl.next_n:] == 7).all()


def test_the_buffer_must_be_int32():
    wl = make_workload("random", 8, 1000, 32, 512)
    with pytest.raises(TypeError, match="topk_indices"):
        prefill_chunk_topk(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, torch.empty(8, 512, dtype=torch.int64))


def test_a_decode_step_cut_to_its_longest_context_gives_the_same_answer():
    """max_seq_len cuts a block table as wide as max_model_len to the step's longest context
    (step_block_table): the same answer, read from a table of that width; a layout must then be made
    from the cut table, and one made from the wide table is refused, naming the argument."""
    from runtime import decode_layout
    from runtime.vllm import step_block_table

    wl = make_paged_workload("random", [700, 2100, 0, 64], 2, 32, 512, seed=6, table_slack=40)
    kv_cache = wl.kv_cache.squeeze(-2)
    rows = wl.batch * wl.next_n
    cut = step_block_table(wl.block_table, 2100, 64)
    assert cut.shape == (wl.batch, 33) and cut.is_contiguous() and wl.block_table.shape[1] > 33
    assert torch.equal(cut, wl.block_table[:, :33])
    buffer = torch.full((rows, 512), 7, dtype=torch.int32)
    decode_topk(wl.q, kv_cache, wl.weights, wl.context_lens, wl.block_table, buffer, max_seq_len=2100)
    assert torch.equal(buffer, reference_paged_mqa_topk(*wl.args()))
    layout = decode_layout(wl.context_lens, cut, wl.next_n, 64, kv_cache.shape[0])
    decode_topk(wl.q, kv_cache, wl.weights, wl.context_lens, wl.block_table, buffer, max_seq_len=2100, layout=layout)
    assert torch.equal(buffer, reference_paged_mqa_topk(*wl.args()))
    wide = decode_layout(wl.context_lens, wl.block_table, wl.next_n, 64, kv_cache.shape[0])
    with pytest.raises(ValueError, match="layout: made for"):
        decode_topk(wl.q, kv_cache, wl.weights, wl.context_lens, wl.block_table, buffer, max_seq_len=2100, layout=wide)
    with pytest.raises(ValueError, match="max_seq_len"):
        step_block_table(wl.block_table, -1, 64)
    assert step_block_table(wl.block_table, 10**9, 64) is wl.block_table  # (never wider than it is)
