"""What the GPU paths must survive besides right answers: the split tail's hand-over between CTAs
(repeats: tests/test_determinism.py), hostile inputs with the value checks off,
a workspace that cannot be allocated, and CUDA graphs and torch.compile around AUTO dispatch in a
fused bucket and in a dense bucket. Skipped, with the reason, where there is no suitable GPU."""

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import requires_gpu

from generator import check
from generator.verify import verify_topk
from generator.workloads import make_workload
from runtime import Problem, choose_variant, dense_mqa_topk, fused_mqa_topk
from runtime.defaults import default_variant
from runtime.fused import launch_variant

pytestmark = requires_gpu
ROOT = Path(__file__).resolve().parent.parent

GATED = default_variant(32, 2048, gated=True)
SW3 = dataclasses.replace(GATED, key_tile=256, warps=8, sample_tiles=16, select_warps=3)
SW7 = dataclasses.replace(SW3, sample_tiles=32, select_warps=7)
# Every kind of kernel: the gated one (math warps select), with selector warps (three; seven) whose
# launches split their tail, the streaming wgmma and the portable mma.sync kernels.
KINDS = [GATED, SW3, SW7, default_variant(32, 2048, mma="wgmma", gated=False),
         default_variant(32, 2048, mma="mmasync", gated=False)]


def run(variant, wl, stats=None):
    if variant == "dense":  # (pieces of 32 MiB: several a call)
        return dense_mqa_topk(*wl.args(), logits_budget_bytes=32 << 20, validate=False)
    out = torch.full((wl.rows, wl.top_k), check.POISON, dtype=torch.int32, device="cuda")
    return launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, out=out,
                          stats=stats)


def splits_its_tail(variant) -> bool:
    return variant != "dense" and variant.select_warps > 0


@pytest.mark.parametrize("variant", [v for v in KINDS if splits_its_tail(v)], ids=lambda v: v.name)
def test_the_split_tail_is_exercised(variant):
    """The selector-warp kernels' rows of tests/test_determinism.py (repeated there byte for byte)
    fill one round of CTAs and leave three blocks, which the launch splits into parts of their keys:
    the hand-over between CTAs that racecheck does not see."""
    wl = make_workload("random", check.split_tail_rows(variant), 140_000, 32, 2048, seed=21, device="cuda")
    stats = {}
    out = run(variant, wl, stats)
    assert stats["split_blocks"] == 3, stats
    assert verify_topk(out, *wl.args(), rows=range(0, 4 * variant.rows), strict=True).ok


HOSTILE = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {root!r})
    from runtime.defaults import default_variant
    from runtime import fused_mqa_topk, dense_mqa_topk
    from generator.workloads import make_workload
    name = {name!r}
    wl = make_workload("random", 96, 20_000, 32, 2048, seed=5, device="cuda")
    n = wl.keys
    ks = torch.tensor([-5, 30, n, 0, 2**31 - 1, -2**31] * 16, dtype=torch.int32, device="cuda")
    ke = torch.tensor([10, 20, n + 7, 2**31 - 1, 5, n] * 16, dtype=torch.int32, device="cuda")
    q, k, scale = wl.q.clone(), wl.k_fp8.clone(), wl.k_scale.clone()
    q.view(torch.uint8)[::7, :, ::5] = 0x7F  # fp8 NaN codes
    k.view(torch.uint8)[::11, ::3] = 0xFF
    scale[::13] = float("inf")
    scale[1::13] = 0.0
    for args in ((wl.q, (wl.k_fp8, wl.k_scale), wl.weights, ks, ke), (q, (k, scale), wl.weights, wl.ks, wl.ke),
                 (q, (k, scale), wl.weights, ks, ke)):
        if name.startswith("dense"):  # "dense told short": windows of 8,192 keys take the short-row top-k
            out = dense_mqa_topk(*args, 2048, validate=False, max_visible_keys=8192 if "short" in name else None)
        else:
            out = fused_mqa_topk(*args, 2048, validate=False, variant=None if name == "auto" else name)
        torch.cuda.synchronize()
        assert out.shape == (96, 2048)
    good = fused_mqa_topk(*wl.args())  # the GPU still works
    torch.cuda.synchronize()
    print("survived")
""")


@pytest.mark.parametrize("name", [v.name for v in KINDS] + ["dense", "dense told short", "auto"])
def test_hostile_values_with_validation_off_never_fault(name):
    """Ranges outside [0, N] (ks > ke, negative, int32 extremes), fp8 NaN codes, infinite and zero key
    scales, with validate=False: an answer (meaningless), never a fault or a hang. In a child process,
    so that a fault would fail this test and not the test run's CUDA context."""
    proc = subprocess.run([sys.executable, "-c", HOSTILE.format(root=str(ROOT), name=name)], capture_output=True,
                          text=True, timeout=300, env=os.environ.copy())
    assert proc.returncode == 0 and "survived" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_a_workspace_that_cannot_be_allocated_is_a_clear_error(monkeypatch):
    from runtime.loader import KernelLibrary, load

    lib = load(GATED)
    monkeypatch.setattr(KernelLibrary, "workspace_bytes", lambda self, rows: 1 << 50)
    wl = make_workload("random", 64, 10_000, 32, 2048, seed=1, device="cuda")
    with pytest.raises(RuntimeError, match="workspace: .* could not be allocated"):
        launch_variant(GATED, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, 2048, lib=lib)
    monkeypatch.undo()
    out = launch_variant(GATED, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, 2048)
    assert verify_topk(out, *wl.args()).ok  # the process and the GPU carry on


def bucket_shapes():
    """(rows, keys) of a chunk the GPU's table serves fused and one it serves dense (H = 32, top-2048)."""
    fused = dense = None
    for rows, keys in ((512, 40_000), (1024, 140_000), (256, 8192), (600, 9000), (64, 4096)):
        chosen = choose_variant(Problem(rows=rows, keys=keys, heads=32, top_k=2048, device=torch.device("cuda")))
        if chosen is not None and fused is None:
            fused = (rows, keys)
        if chosen is None and dense is None:
            dense = (rows, keys)
    return {"fused": fused, "dense": dense}


@pytest.mark.parametrize("bucket", ["fused", "dense"])
@pytest.mark.parametrize("how", ["cuda_graph", "torch_compile"])
def test_auto_dispatch_is_capturable(bucket, how):
    shape = bucket_shapes()[bucket]
    if shape is None:
        pytest.skip(f"no table on this GPU serves any probe shape {bucket}")
    rows, keys = shape
    a = make_workload("random", rows, keys, 32, 2048, seed=1, device="cuda")
    b = make_workload("multi_request" if keys >= 3 * rows else "peaked", rows, keys, 32, 2048, seed=2, device="cuda")
    static = [t.clone() for t in (a.q, a.k_fp8, a.k_scale, a.weights, a.ks, a.ke)]

    def call(q, k, s, w, ks, ke):
        return fused_mqa_topk(q, (k, s), w, ks, ke, 2048, validate=False)

    if how == "torch_compile":
        compiled = torch.compile(call, fullgraph=True)
        for wl in (a, b):
            out = compiled(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke)
            assert verify_topk(out, *wl.args(), rows=range(0, rows, 5)).ok
        return
    call(*static)  # load and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(*static)
    for src, dst in zip((b.q, b.k_fp8, b.k_scale, b.weights, b.ks, b.ke), static):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    report = verify_topk(out, *b.args(), rows=range(0, rows, 5))
    assert report.ok, report.summary()


def test_the_input_check_kernel_agrees_with_the_torch_checks():
    """validate=True reads the dense library's one-launch check (common/input_check.cuh); each broken
    rule must set the same flag there as in the torch reductions, and the longest row must agree."""
    from runtime.contract import _kernel_checks, _torch_checks

    wl = make_workload("random", 200, 20_000, 32, 2048, seed=9, device="cuda")
    n = wl.keys

    def both(q=wl.q, k=wl.k_fp8, ks=wl.ks, ke=wl.ke, scale=wl.k_scale, weights=wl.weights):
        found = _kernel_checks(q, k, ks, ke, n, scale, weights, 2048)
        assert found is not None, "the dense library's check did not run"
        assert found == _torch_checks(q, k, ks, ke, scale, weights, n)
        return found

    assert both() == (0, int((wl.ke - wl.ks).max()))
    broken = {}
    for name, value in (("ks", -1), ("ke", n + 1), ("scale", 0.0), ("scale", float("nan")), ("scale", float("inf")),
                        ("weights", float("inf")), ("q", 0x7F), ("k", 0xFF)):
        over = {"ks": wl.ks.clone(), "ke": wl.ke.clone(), "scale": wl.k_scale.clone(), "weights": wl.weights.clone(),
                "q": wl.q.clone(), "k": wl.k_fp8.clone()}
        x = over[name]
        if name in ("q", "k"):
            x.view(torch.uint8).view(-1)[x.numel() // 2 + 5] = value  # one byte, in the middle
        else:
            x.view(-1)[x.numel() // 3] = value
        broken[(name, str(value))] = both(**over)[0]
    ks_above = wl.ks.clone()
    ks_above[7] = wl.ke[7] + 1
    broken[("ks", "above ke")] = both(ks=ks_above)[0]
    assert all(broken.values()), broken  # every rule broken is caught
    assert len({v for (name, _), v in broken.items() if name != "scale"}) == 6, broken  # each by its own flag
