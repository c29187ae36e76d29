"""Prefill from the paged cache off the GPU: the reference and gathered paths against the gathered
chunk's answer, the kernels' key layout (runtime.paged_prefill.page_layout) read back through its
block list, the contract's checks, and the paged builds' names, sources and compile."""

from __future__ import annotations

import ctypes

import pytest
import torch
from conftest import requires_nvcc

from generator.paged_workloads import laid_out_keys, page_chunk
from generator.workloads import make_workload, packed_workload
from runtime import explain_paged_prefill, paged_prefill_mqa_topk, reference_mqa_topk
from runtime.page_layout import page_layout
from runtime.paged_prefill import check_paged_chunk
from runtime.dense_variant import DenseVariant
from runtime.loader import DenseLibrary, KernelLibrary
from runtime.render import render
from runtime.variant import Variant

GATED = Variant.from_name("mqa_topk_wgmma_sm90a_h32_k512_r4_t256_w8_s4_b16384_m8_sw3")
DENSE = DenseVariant.from_name("mqa_dense_sm90a_h64_k2048_r2_g2x2_q2_s4_t256_b4096_rc32")
STREAM = Variant.from_name("mqa_topk_wgmma_sm90a_h64_k2048_r1_t128_w8_s4_b3072")  # (the shipped table's one)


def _chunks():
    yield page_chunk(make_workload("random", 40, 1000, 32, 512, seed=1), block_size=64)
    yield page_chunk(make_workload("multi_request", 48, 3000, 32, 512, seed=2), block_size=128, seed=3)
    yield page_chunk(packed_workload(32, 2048, 64, 512, requests=4, seed=4), block_size=64, seed=5)
    yield page_chunk(make_workload("boundary_ties", 16, 777, 64, 512, seed=6), block_size=256, seed=7)


@pytest.mark.parametrize("chunk", list(_chunks()), ids=lambda c: f"{c.base.family}-bs{c.kv_cache.shape[1]}")
def test_the_reference_and_gathered_paths_answer_as_the_gathered_chunk(chunk):
    wl = chunk.base
    expected = reference_mqa_topk(wl.q, (wl.k_fp8, wl.k_scale), wl.weights, wl.ks, wl.ke, wl.top_k)
    assert torch.equal(paged_prefill_mqa_topk(*chunk.args(), variant="reference"), expected)
    assert torch.equal(paged_prefill_mqa_topk(*chunk.args(), variant="gathered"), expected)
    assert torch.equal(paged_prefill_mqa_topk(*chunk.args()), expected)  # (AUTO off the GPU: the gathered path)


@pytest.mark.parametrize("chunk", list(_chunks()), ids=lambda c: f"{c.base.family}-bs{c.kv_cache.shape[1]}")
def test_the_kernels_key_layout_reads_back_the_gathered_answer(chunk):
    """What a paged build reads: key x of the layout at slot x % block_size of cache block
    pages[x / block_size], each row's range moved with its request. Read that way on the CPU, the
    keys and ranges must give the gathered chunk's answer."""
    wl = chunk.base
    layout = page_layout(chunk.block_table, chunk.cu_seq_lens, wl.ks, wl.ke, chunk.kv_cache.shape[1],
                         chunk.kv_cache.shape[0])
    assert layout.pages.numel() * layout.block_size >= layout.keys + 256  # (a tile past the last key is covered)
    assert bool((layout.ks % 64 == 0).all())  # (every row's pieces start on a 64-key boundary)
    laid = reference_mqa_topk(wl.q, laid_out_keys(chunk.kv_cache, layout), wl.weights, layout.ks, layout.ke, wl.top_k)
    assert torch.equal(laid, reference_mqa_topk(wl.q, (wl.k_fp8, wl.k_scale), wl.weights, wl.ks, wl.ke, wl.top_k))


def _args():
    return list(page_chunk(make_workload("multi_request", 24, 1500, 32, 512, seed=8)).args())


@pytest.mark.parametrize(("index", "bad", "message"), [
    (3, lambda a: a[3].long(), "block_table: expected dtype torch.int32"),
    (4, lambda a: a[4][:-1], "cu_seq_lens: expected shape"),
    (5, lambda a: a[5][:-1], "cu_seqlen_ks: expected shape"),
    (1, lambda a: a[1].view(a[1].shape[0], -1, 2, 66), "kv_cache: expected shape"),
    (2, lambda a: a[2][:, :16].contiguous(), "weights: expected shape"),
    (5, lambda a: a[5] + 1, "not a multiple of 64"),
    (6, lambda a: a[6] + 2000, "outside [0, cu_seq_lens[-1]]"),
    (4, lambda a: torch.cat([a[4][:1] + 1, a[4][1:]]), "must start at 0"),
    (3, lambda a: a[3].masked_fill(a[3] >= 0, 10_000), "outside the cache"),
])
def test_bad_input_is_named(index, bad, message):
    args = _args()
    args[index] = bad(args)
    with pytest.raises((TypeError, ValueError), match=message.replace("[", r"\[").replace("]", r"\]")):
        paged_prefill_mqa_topk(*args)


def test_a_row_across_two_requests_and_a_wrong_total_are_named():
    args = _args()
    ke = args[6].clone()
    ke[0] = int(args[4][-1])  # row 0's request is the first: its range now runs into the next ones
    args[6] = ke
    with pytest.raises(ValueError, match="not within one request"):
        paged_prefill_mqa_topk(*args)
    with pytest.raises(ValueError, match="total_keys: 5"):
        paged_prefill_mqa_topk(*_args(), total_keys=5)
    check_paged_chunk(*args, check_values=False)  # (unvalidated: forms only)


def test_paged_builds_are_named_rendered_and_refused_as_they_should_be():
    paged = GATED.paged_build(64)
    assert paged.name == GATED.name + "_pb64" and Variant.from_name(paged.name) == paged
    assert paged.rescan_variant.page_block_size == 64  # (its exact rescan reads the cache too)
    source, gathered = render(paged), render(GATED)
    assert "mqa_topk_launch_paged(" in source and "int mqa_topk_launch(" not in source
    assert "paged::load_key_tile<64, kKeyTile>" in source
    assert "paged_keys.cuh" not in gathered and "mqa_topk_launch_paged" not in gathered
    dense = DENSE.paged_build(128)
    assert dense.name == DENSE.name + "_pb128" and DenseVariant.from_name(dense.name) == dense
    source = render(dense)
    assert "mqa_dense_run_paged(" in source and "int mqa_dense_run(" not in source
    assert "mqa_dense_logits_launch" not in source and "mqa_dense_logits_launch" in render(DENSE)
    with pytest.raises(ValueError, match="64-key pieces"):
        GATED.paged_build(96)
    with pytest.raises(ValueError, match="64-key pieces"):
        DENSE.paged_build(32)
    with pytest.raises(ValueError, match="only the wgmma kernels"):
        Variant.from_name("mqa_topk_mmasync_sm90a_h32_k512_r2_t256_w8_s3_b4096").paged_build(64)


@requires_nvcc
@pytest.mark.parametrize(("variant", "launch"), [(GATED, "mqa_topk_launch"), (STREAM, "mqa_topk_launch"),
                                               (DENSE, "mqa_dense_run")], ids=["gated", "streaming", "dense"])
def test_a_paged_build_compiles_and_exports_its_launch(variant, launch, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_MQA_TOPK_CACHE", str(tmp_path))
    from runtime.build import build

    paged = variant.paged_build(64)
    (built,) = build([paged])
    lib = ctypes.CDLL(str(built.library))
    assert hasattr(lib, launch + "_paged") and not hasattr(lib, launch)
    # The loader's ctypes signature has as many arguments as the export (a count off is a TypeError at
    # the first call, on the GPU only).
    source = render(paged)
    params = source[source.index(f"int {launch}_paged("):].split(")", 1)[0].count(",") + 1
    opened = (DenseLibrary if isinstance(variant, DenseVariant) else KernelLibrary)(paged, str(built.library))
    assert len(getattr(opened._lib, launch + "_paged").argtypes) == params


def test_explain_says_the_keys_are_gathered_off_the_gpu_and_why():
    chunk = page_chunk(make_workload("random", 40, 1000, 32, 512, seed=1))
    decision = explain_paged_prefill(*chunk.args(), total_keys=1000)
    assert decision.build is None and "paged builds are CUDA kernels" in decision.why
    assert "path: dense" in str(decision) and "keys: gathered out of the cache first" in str(decision)
