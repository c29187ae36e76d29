"""Prefill from the paged cache on the GPU: each paged build gives the bytes its gathered twin gives on
the gathered keys (same kernel, same arithmetic, same order), on every family whose rows start at
their request's first key, one request and several, block sizes 64 and 128, poisoned outputs; AUTO
as fused_mqa_topk; a CUDA graph; unvalidated wild block ids that must not fault. Skipped, with the
reason, where there is no Hopper GPU."""

from __future__ import annotations

import pytest
import torch
from conftest import hopper_skip

from generator.paged_workloads import page_chunk
from generator.verify import verify_topk
from generator.workloads import FAMILIES, OFFSET_FAMILIES, make_workload, packed_workload
from runtime import fused_mqa_topk, paged_prefill_mqa_topk
from runtime.dense import run_dense, run_dense_paged
from runtime.dense_variant import DenseVariant
from runtime.fused import launch_variant
from runtime.page_layout import page_layout
from runtime.paged_prefill import launch_paged_prefill
from runtime.variant import Variant


_SKIP = hopper_skip("the paged builds are Hopper kernels (others gather)")
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

POISON = -7
# Gated (selector warps 3 and 7, 192- and 256-key tiles) and streaming variants the shipped table names.
VARIANTS = [Variant.from_name(n) for n in (
    "mqa_topk_wgmma_sm90a_h32_k512_r4_t256_w8_s4_b16384_m8_sw3",
    "mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7",
    "mqa_topk_wgmma_sm90a_h64_k1024_r2_t192_w12_s4_b6144_m32",
    "mqa_topk_wgmma_sm90a_h64_k2048_r1_t128_w8_s4_b3072",
)]
# Our dense kernels (the table's choice where dense won), for long rows and short ones.
DENSE = [DenseVariant.from_name(n) for n in ("mqa_dense_sm90a_h64_k2048_r2_g2x2_q2_s4_t512_b8192_rc32",
                                             "mqa_dense_sm90a_h32_k512_r4_g2x2_q2_s4_t256_b4096_rc32")]
# Families whose rows start at their request's first key (the others' rows start anywhere).
CHUNK_FAMILIES = [f for f in FAMILIES if f not in OFFSET_FAMILIES or f == "multi_request"]


def _launch(variant: Variant, chunk, out: torch.Tensor) -> torch.Tensor:
    wl = chunk.base
    layout = page_layout(chunk.block_table, chunk.cu_seq_lens, wl.ks, wl.ke, chunk.kv_cache.shape[1],
                         chunk.kv_cache.shape[0])
    return launch_paged_prefill(variant, wl.q, chunk.kv_cache, wl.weights, layout, wl.top_k, out=out)


def _poisoned(rows: int, top_k: int) -> torch.Tensor:
    return torch.full((rows, top_k), POISON, dtype=torch.int32, device="cuda")


def _both(variant: Variant, chunk, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the paged build's answer, the gathered twin's on the gathered keys), poisoned first."""
    wl = chunk.base
    paged = _launch(variant.paged_build(block_size), chunk, _poisoned(wl.q.shape[0], wl.top_k))
    gathered = launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k,
                              out=_poisoned(wl.q.shape[0], wl.top_k))
    torch.cuda.synchronize()
    assert not (paged == POISON).any(), "elements left unwritten"
    return paged, gathered


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("family", CHUNK_FAMILIES)
def test_a_paged_build_answers_as_its_gathered_twin(variant, family):
    wl = make_workload(family, 300, 20000, variant.heads, variant.top_k, seed=3, device="cuda")
    chunk = page_chunk(wl, block_size=64, seed=4)
    paged, gathered = _both(variant, chunk, 64)
    assert torch.equal(paged, gathered)
    report = verify_topk(paged, wl.q, (wl.k_fp8, wl.k_scale), wl.weights, wl.ks, wl.ke, wl.top_k, rows=range(0, 300, 7))
    assert report.ok, report.summary()


@pytest.mark.parametrize("variant", DENSE, ids=lambda v: v.name)
@pytest.mark.parametrize("family", CHUNK_FAMILIES)
@pytest.mark.parametrize("rows", [300, 40, 12], ids=["a CTA a row", "2 CTAs a row", "8-16 CTAs a row"])
def test_a_dense_paged_build_answers_as_its_gathered_twin(variant, family, rows):
    """The same bytes, poisoned outputs written whole. At 40 and 12 rows, where the longest row sees
    more keys than the one-CTA top-k's buffer, the paged build selects over clusters of CTAs (on the
    H200's 132 SMs: two, and eight or sixteen, a row) and its gathered twin a CTA a row: two selections, one
    contract order."""
    wl = make_workload(family, rows, 20000, variant.heads, variant.top_k, seed=13, device="cuda")
    chunk = page_chunk(wl, block_size=64, seed=14)
    layout = page_layout(chunk.block_table, chunk.cu_seq_lens, wl.ks, wl.ke, 64, chunk.kv_cache.shape[0])
    longest = int((wl.ke - wl.ks).max())
    paged = run_dense_paged(variant.paged_build(64), wl.q, chunk.kv_cache, wl.weights, layout, wl.top_k, longest,
                            out=_poisoned(rows, wl.top_k))
    gathered = run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, longest, variant=variant)
    torch.cuda.synchronize()
    assert not (paged == POISON).any(), "elements left unwritten"
    assert torch.equal(paged, gathered)


@pytest.mark.parametrize("variant", VARIANTS[:2] + VARIANTS[3:], ids=lambda v: v.name)
@pytest.mark.parametrize(("requests", "block_size"), [(1, 128), (4, 64), (7, 128)])
def test_long_chunks_of_one_request_and_several(variant, requests, block_size):
    """Chunks long enough for the gate, its rescan and the tail split; packed requests whose
    lengths are off the block size, so that each starts on a block boundary of its own."""
    keys = 7 * 9650 if requests == 7 else 65536  # (9,650 tokens a request: off the block size)
    wl = packed_workload(2 * 1008 if requests == 7 else 2048, keys, variant.heads, variant.top_k, requests=requests,
                         seed=5, device="cuda")
    paged, gathered = _both(variant, page_chunk(wl, block_size=block_size, seed=6), block_size)
    assert torch.equal(paged, gathered)
    report = verify_topk(paged, wl.q, (wl.k_fp8, wl.k_scale), wl.weights, wl.ks, wl.ke, wl.top_k,
                         rows=range(0, wl.q.shape[0], 61))
    assert report.ok, report.summary()


def test_auto_answers_as_fused_mqa_topk_on_the_gathered_keys():
    wl = packed_workload(1024, 4 * 16384, 64, 2048, requests=4, seed=7, device="cuda")
    chunk = page_chunk(wl, block_size=64, seed=8)
    expected = fused_mqa_topk(wl.q, (wl.k_fp8, wl.k_scale), wl.weights, wl.ks, wl.ke, wl.top_k)
    assert torch.equal(paged_prefill_mqa_topk(*chunk.args()), expected)
    assert torch.equal(paged_prefill_mqa_topk(*chunk.args(), validate=False, total_keys=wl.k_fp8.shape[0],
                                              max_visible_keys=16384), expected)


def test_a_captured_launch_replays_the_same_answer():
    variant = VARIANTS[0].paged_build(64)
    wl = make_workload("random", 512, 30000, variant.heads, variant.top_k, seed=9, device="cuda")
    chunk = page_chunk(wl, block_size=64, seed=10)
    out = _poisoned(512, variant.top_k)
    _launch(variant, chunk, out)  # (loads the library outside the capture)
    expected = out.clone()
    out.fill_(POISON)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _launch(variant, chunk, out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_unvalidated_wild_block_ids_and_lengths_do_not_fault():
    variant = VARIANTS[3]
    wl = make_workload("random", 64, 5000, variant.heads, variant.top_k, seed=11, device="cuda")
    chunk = page_chunk(wl, block_size=64, seed=12)
    args = list(chunk.args())
    args[3] = torch.randint(-(2**31), 2**31 - 1, args[3].shape, dtype=torch.int32, device="cuda")
    args[4] = torch.tensor([0, 10**9], dtype=torch.int32, device="cuda")
    paged_prefill_mqa_topk(*args, validate=False, total_keys=5000, variant=variant)
    torch.cuda.synchronize()  # (a fault would raise here)


def test_the_vllm_call_writes_its_rows_of_the_index_buffer():
    """runtime.vllm.prefill_chunk_topk_paged as vLLM's indexer would call it (the cache without its head
    dimension, the chunk's rows of a persistent buffer, the host's total and longest): the rows written
    in place with fused_mqa_topk's answer on the gathered keys, the rest of the buffer untouched."""
    from runtime.vllm import prefill_chunk_topk_paged

    wl = packed_workload(512, 4 * 8192, 64, 2048, requests=4, seed=15, device="cuda")
    chunk = page_chunk(wl, block_size=64, seed=16)
    buffer = torch.full((600, 2048), POISON, dtype=torch.int32, device="cuda")
    prefill_chunk_topk_paged(wl.q, chunk.kv_cache.squeeze(-2), wl.weights, chunk.block_table, chunk.cu_seq_lens, wl.ks,
                             wl.ke, buffer[40:552], total_keys=4 * 8192, max_visible_keys=8192)
    expected = fused_mqa_topk(wl.q, (wl.k_fp8, wl.k_scale), wl.weights, wl.ks, wl.ke, wl.top_k)
    assert torch.equal(buffer[40:552], expected)
    assert (buffer[:40] == POISON).all() and (buffer[552:] == POISON).all()
