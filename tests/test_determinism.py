"""The determinism contract (README.md, "Same answer every time"): every path returns the same bytes
for the same inputs, on every repeat, stream, CUDA-graph replay and process; ties at the k-th place
go to the smallest indices and each row is in ascending order (the verifier's strict mode); and
where every path computes the same scores bit for bit (the families of exact ties), every path
returns the same bytes as the reference. GPU tests, skipped with the reason where there is none;
the torch paths' part also runs on the CPU."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import GPU_SKIP, requires_gpu
from test_gpu_reliability import KINDS, splits_its_tail
from test_gpu_reliability import run as run_variant

from generator import check
from generator.verify import verify_topk
from generator.workloads import EXACT_TIE_FAMILIES, make_workload
from runtime import dense_mqa_topk, fused_mqa_topk, reference_mqa_topk
from runtime.dense_kernels import DENSE_ENV

ROOT = Path(__file__).resolve().parent.parent
TIE_FAMILIES = ("all_equal", "relu_plateau", "duplicate_keys", "boundary_ties", "integer_ties")
FAMILIES = ("random",) + TIE_FAMILIES
REPEATS = 50


def fused(variant):
    """The variant over a poisoned output (test_gpu_reliability.run)."""
    return lambda wl: run_variant(variant, wl)


def dense_histogram(wl):
    """Our dense kernels told nothing of the rows' lengths: windows of N keys, the histogram top-k
    (its routes: the whole row gathered, the histogram, the sampled gate, the radix select behind
    them), in pieces of 32 MiB."""
    return dense_mqa_topk(*wl.args(), validate=False, logits_budget_bytes=32 << 20)


def dense_short_rows(wl):
    """Our dense kernels told the longest row: windows of at most 16K keys take the short-row top-k."""
    return dense_mqa_topk(*wl.args(), validate=False, max_visible_keys=wl.longest_row())


def torch_dense(wl):
    saved = os.environ.get(DENSE_ENV)
    os.environ[DENSE_ENV] = "torch"
    try:
        return dense_mqa_topk(*wl.args(), validate=False)
    finally:
        if saved is None:
            del os.environ[DENSE_ENV]
        else:
            os.environ[DENSE_ENV] = saved


def reference(wl):
    return reference_mqa_topk(*wl.args())


# Every path and the chunks it is repeated on: (rows, keys, top_k). The selector-warp kernels' rows
# fill one round of CTAs and leave three blocks, split into parts whose candidates are handed over
# through global memory. The short-row top-k at each of its CTA sizes: 1K-key windows at top-512
# (128 threads x 8 logits), then 128, 256 and 512 threads x 32 logits.
PATHS = {v.name: (fused(v), "split" if splits_its_tail(v) else (320, 30_000, 2048)) for v in KINDS}
PATHS.update({
    "dense histogram": (dense_histogram, (320, 30_000, 2048)),
    "dense short-row 1K": (dense_short_rows, (256, 1000, 512)),
    "dense short-row 3K": (dense_short_rows, (256, 3000, 2048)),
    "dense short-row 7K": (dense_short_rows, (256, 7000, 2048)),
    "dense short-row 14K": (dense_short_rows, (256, 14_000, 2048)),
    "torch dense": (torch_dense, (64, 9000, 2048)),
    "reference": (reference, (64, 9000, 2048)),
})
TORCH_PATHS = ("torch dense", "reference")
CPU_SHAPE = (16, 4000, 512)  # the torch paths on a CPU (its exact product is slow)


def workload(name: str, family: str, device="cuda", seed=31):
    run, shape = PATHS[name]
    if torch.device(device).type == "cpu":
        shape = CPU_SHAPE
    elif shape == "split":
        variant = next(v for v in KINDS if v.name == name)
        shape = (check.split_tail_rows(variant), 140_000, variant.top_k)
    rows, keys, top_k = shape
    return run, make_workload(family, rows, keys, 32, top_k, seed=seed, device=device)


def sampled(wl):
    return range(0, wl.rows, 7)


def repeat_and_compare(name: str, family: str, device: str, repeats: int = REPEATS) -> None:
    run, wl = workload(name, family, device)
    first = run(wl)
    report = verify_topk(first, *wl.args(), rows=sampled(wl), strict=True)
    assert report.ok, report.summary()
    for i in range(repeats - 1):
        again = run(wl)
        differ = int((again != first).any(1).sum())
        assert differ == 0, f"repeat {i + 1}: {differ} rows differ in their bytes"


@requires_gpu
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", PATHS)
def test_fifty_repeats_give_the_same_bytes(name, family):
    """50 calls on the same inputs, each over a poisoned output: byte for byte the first call's,
    which the strict verifier accepts (ascending rows, ties at the k-th place to the smallest
    indices)."""
    repeat_and_compare(name, family, "cuda")


@pytest.mark.skipif(GPU_SKIP is None, reason="the GPU run covers the torch paths on the GPU")
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", TORCH_PATHS)
def test_torch_paths_repeat_on_the_cpu(name, family):
    repeat_and_compare(name, family, "cpu", repeats=5)


@pytest.mark.parametrize("family", EXACT_TIE_FAMILIES)
def test_every_path_returns_the_references_bytes_where_the_scores_are_exact(family):
    """On families whose ties are exact in every arithmetic (identical keys, relu zeros, integers
    every arithmetic sums exactly) every path computes the same scores, so every path must return
    exactly the reference's bytes: the same keys at the ties, in the same order."""
    if GPU_SKIP is None:
        wl = make_workload(family, 256, 12_000, 32, 2048, seed=7, device="cuda")
    else:
        wl = make_workload(family, *CPU_SHAPE[:2], 32, CPU_SHAPE[2], seed=7)
    expected = reference(wl)
    assert verify_topk(expected, *wl.args(), strict=True).ok
    paths = {"torch dense": torch_dense}
    if GPU_SKIP is None:
        paths.update({v.name: fused(v) for v in KINDS})
        paths.update({"dense histogram": dense_histogram, "dense short-row": dense_short_rows})
    for name, run in paths.items():
        got = run(wl)
        differ = (got != expected).any(1).nonzero().flatten()
        assert differ.numel() == 0, f"{name}: {differ.numel()} rows differ from the reference, first {int(differ[0])}"


# Streams and graphs: the same call on another stream, and captured in a CUDA graph and replayed,
# on a chunk large enough for every CTA to take several blocks (16 rounds at 4 rows a block).
@requires_gpu
@pytest.mark.parametrize("family", ["random", "boundary_ties"])
@pytest.mark.parametrize("name", [v.name for v in KINDS] + ["auto", "dense"])
def test_streams_and_graph_replays_give_the_same_bytes(name, family):
    wl = make_workload(family, 8448, 65_536, 32, 2048, seed=3, device="cuda")

    def call():
        if name == "dense":
            return dense_mqa_topk(*wl.args(), validate=False, max_visible_keys=wl.keys)
        return fused_mqa_topk(*wl.args(), validate=False, variant=None if name == "auto" else name)

    eager = call()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = call()
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    for _ in range(3):
        captured.fill_(check.POISON)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, eager), f"a replay differs in {int((captured != eager).any(1).sum())} rows"
    assert torch.equal(on_side, eager), f"another stream differs in {int((on_side != eager).any(1).sum())} rows"
    assert verify_topk(eager, *wl.args(), rows=range(0, wl.rows, 97), strict=True).ok


# ---- processes (and GPUs) --------------------------------------------------------------------------

PROCESS_CASES = [(name, family) for name in PATHS for family in ("random", "duplicate_keys")]


def digests(device: str) -> dict[str, str]:
    """sha256 of each case's output bytes, computed on `device`."""
    out = {}
    for name, family in PROCESS_CASES:
        if device == "cpu" and name not in TORCH_PATHS:
            continue
        run, wl = workload(name, family, device)
        out[f"{name} {family}"] = hashlib.sha256(run(wl).cpu().numpy().tobytes()).hexdigest()
    return out


CHILD = """
import json, sys
sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r})
from test_determinism import digests
print("DIGESTS " + json.dumps(digests({device!r})))
"""


def child_digests(device: str) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", CHILD.format(tests=str(ROOT / "tests"), root=str(ROOT), device=device)],
                          capture_output=True, text=True, timeout=600, env=os.environ.copy())
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DIGESTS ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[len("DIGESTS "):])


def test_two_processes_give_the_same_bytes():
    """Every path's output in this process and in a fresh one (its own CUDA context, its own kernel
    loads and workspaces): the same sha256 (on the CPU, the torch paths)."""
    device = "cuda" if GPU_SKIP is None else "cpu"
    assert digests(device) == child_digests(device)


@requires_gpu
def test_two_gpus_of_one_kind_give_the_same_bytes():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"one GPU here ({torch.cuda.get_device_name()}): the second GPU's bytes need a two-GPU machine")
    names = {torch.cuda.get_device_name(i) for i in range(2)}
    if len(names) > 1:
        pytest.skip(f"two GPUs of different kinds: {sorted(names)}")
    first = digests("cuda:0")
    with torch.cuda.device(1):
        assert digests("cuda:1") == first
