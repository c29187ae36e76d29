"""The sweep's grid and chunks (CPU): what `bench --sweep` measures on the GPU."""

import json

import pytest

from generator.sweep import (
    SWEEP_KEYS,
    SWEEP_ROWS,
    Shape,
    chunk,
    geometric_mean,
    sweep_shapes,
)
from generator.serving_path import read_serving
from runtime.contract import check_inputs


def test_the_grid_covers_the_issue_shapes_and_only_valid_chunks():
    shapes = sweep_shapes([32, 64], [512, 2048])
    assert all(s.rows <= s.keys and s.rows % s.requests == 0 for s in shapes)
    one = {(s.rows, s.keys) for s in shapes if s.requests == 1 and (s.heads, s.top_k) == (32, 2048)}
    assert one == {(r, n) for r in SWEEP_ROWS for n in SWEEP_KEYS if r <= n}
    assert len(shapes) == 4 * 42  # per heads and top-k, the 42 chunks of the serving engines' sweep


def test_a_packed_chunk_has_its_requests_side_by_side():
    wl = chunk(Shape(8, 64, 8192, 32, 512), device="cpu")
    check_inputs(*wl.args())
    assert len(set(wl.ks.tolist())) == 8 and int(wl.ke.max()) == 8192
    assert int((wl.ke - wl.ks).max()) == 1024  # each row sees its own request only


def test_serving_times_are_read_by_shape(tmp_path):
    path = tmp_path / "serving.jsonl"
    path.write_text(json.dumps({"requests": 1, "rows": 64, "keys": 8192, "heads": 32, "top_k": 2048, "ms": 0.049}) + "\n")
    assert read_serving(path) == {(1, 64, 8192, 32, 2048): 0.049}
    assert abs(geometric_mean([2.0, 0.5]) - 1.0) < 1e-12


def test_results_print_as_the_benchmark_tables():
    from generator.sweep import markdown

    def result(q, m, n, path, auto, serving):
        return {"requests": q, "rows": m, "keys": n, "heads": 32, "top_k": 512, "auto_path": path, "auto_ms": auto,
                "auto_floor_share": 0.5, "serving_ms": serving, "vs_serving": serving / auto}

    text = markdown([result(1, 512, 8192, "dense", 0.2, 0.1), result(1, 512, 32768, "mqa_topk_x", 0.1, 0.2),
                     result(8, 512, 8192, "dense", 0.1, 0.1)])
    lines = text.splitlines()
    assert "geometric mean 1.00x, slower on 1 of 3" in lines[0]
    assert lines[2] == "| requests, rows | 8K | 32K |"
    assert lines[4] == "| 1, 512 | 0.100 / 0.200 (0.50x; 0.50 d) | 0.200 / 0.100 (2.00x; 0.50) |"
    assert lines[5] == "| 8, 512 | 0.100 / 0.100 (1.00x; 0.50 d) | - |"


def _stand_in_top_k_op():
    """torch.ops._C.top_k_per_row_prefill with vLLM's signature, on the CPU (torch.topk over each row's
    [ks, ke), positions relative to ks, -1 after), registered once a process as vLLM's import would."""
    import torch

    try:
        torch.ops._C.top_k_per_row_prefill
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("top_k_per_row_prefill(Tensor logits, Tensor row_starts, Tensor row_ends, Tensor(a!) indices, "
               "int num_rows, int stride0, int stride1, int top_k) -> ()")

    def top_k(logits, starts, ends, indices, num_rows, stride0, stride1, k):
        assert (stride0, stride1) == logits.stride() and num_rows == logits.shape[0] == indices.shape[0]
        indices.fill_(-1)
        for r in range(num_rows):
            lo, hi = int(starts[r]), int(ends[r])
            n = min(k, hi - lo)
            indices[r, :n] = torch.topk(logits[r, lo:hi], n).indices.to(torch.int32)

    lib.impl("top_k_per_row_prefill", top_k, "CPU")
    _stand_in_top_k_op.lib = lib  # (the registration lives as long as its Library)


@pytest.mark.parametrize("form", ["fp8_mqa_logits", "fp8_fp4_mqa_logits"])
def test_the_installed_serving_ops_are_called_as_vllm_calls_them(monkeypatch, form):
    """`--serving installed` against stand-ins with the signatures vLLM's sparse_attn_indexer calls: vLLM's
    wrapper of DeepGEMM's logits over the whole key space, then its top-k op into the chunk's rows; a
    chunk is scored in row pieces of bounded logits, and the answer is the contract's."""
    import sys
    import types

    import torch

    from generator.serving_path import InstalledServing
    from generator.verify import verify_topk
    from generator.workloads import packed_workload
    from runtime.reference import reference_scores

    pieces = []

    def fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits: bool):  # (vLLM's wrapper: clean_logits required)
        assert clean_logits
        if form == "fp8_fp4_mqa_logits":  # (newer releases: q as (values, scales), None for fp8)
            q, q_scale = q
            assert q_scale is None
        k_fp8, k_scale = kv
        pieces.append(q.shape[0])
        scores = reference_scores(q, k_fp8, k_scale, weights, slice(None), 0, k_fp8.shape[0])
        column = torch.arange(k_fp8.shape[0])
        return scores.masked_fill((column < ks[:, None]) | (column >= ke[:, None]), float("-inf"))

    wrapper = types.ModuleType("vllm.utils.deep_gemm")
    setattr(wrapper, form, fp8_mqa_logits)
    for name, module in (("vllm", types.ModuleType("vllm")), ("vllm.utils", types.ModuleType("vllm.utils")),
                         ("vllm.utils.deep_gemm", wrapper), ("vllm._custom_ops", types.ModuleType("vllm._custom_ops"))):
        monkeypatch.setitem(sys.modules, name, module)
    _stand_in_top_k_op()
    serving = InstalledServing.find()
    assert serving.logits_name == f"vllm.utils.deep_gemm.{form}"
    wl = packed_workload(96, 4 * 1024, 32, 512, 4, seed=2, device="cpu")
    serving.piece_bytes = 40 * 4 * wl.k_fp8.shape[0]  # 40 rows of logits a piece
    out = torch.full((96, 512), -7, dtype=torch.int32)
    serving(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, 512, out)
    assert pieces == [40, 40, 16]
    assert verify_topk(out, *wl.args()).ok


def test_without_vllm_the_installed_serving_path_says_what_is_missing(monkeypatch):
    import sys

    import pytest

    from generator.serving_path import InstalledServing, ServingUnavailable

    for name in ("vllm", "vllm.utils", "vllm.utils.deep_gemm", "deep_gemm"):
        monkeypatch.setitem(sys.modules, name, None)  # (an import of it raises ImportError)
    with pytest.raises(ServingUnavailable, match="deep_gemm"):
        InstalledServing.find()


def test_calls_compared_are_timed_in_turn_with_medians_and_spreads():
    """timing.interleaved_ms (the tuner's settle and the sweep): one run of each call a round, so that
    each sees the same clocks; medians and spreads per call; rounds stop early past max_seconds."""
    from generator.timing import interleaved_ms

    order, clock = [], iter(range(1, 10**6))

    def timer(fn):
        order.append(fn())
        return {"a": 1.0, "b": 2.0}[order[-1]] * next(clock) / next(clock)  # (a little jitter)

    timed = interleaved_ms({"a": lambda: "a", "b": lambda: "b"}, warmup=1, reps=6, timer=timer)
    assert order == ["a", "b"] * 6  # (the warm-up runs are not timed)
    assert 0.9 < timed["a"].ms < 1.0 and 1.8 < timed["b"].ms < 2.0 and timed["a"].spread >= 0
    order.clear()
    stopped = interleaved_ms({"slow": lambda: "b"}, warmup=0, reps=50, max_seconds=0.005, timer=lambda fn: (order.append(1), 2.0)[1])
    assert len(order) == 3 and stopped["slow"].ms == 2.0  # (at least three rounds)
