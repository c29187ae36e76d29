"""The paged decode kernel on the GPU against the reference: every family laid out in pages (shuffled
block tables, contexts off the block size, shorter than top_k, empty, shared prefix blocks), every
next_n, one part and several (the merge), poisoned outputs, the same bytes whatever the split, CUDA
graphs with lengths changed between replays, and unvalidated bad values that must not fault.
Skipped, with the reason, where there is no Hopper GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import hopper_skip

from generator.paged_workloads import PagedWorkload, make_paged_workload, verify_paged
from generator.workloads import FAMILIES
from runtime import paged_mqa_topk
from runtime.paged import check_paged_inputs, launch_paged, paged_variant_for
from runtime.paged_variant import SUPPORTED_NEXT_N, default_paged_variant


_SKIP = hopper_skip("the paged kernel is Hopper's (others gather)")
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

POISON = -7
SHAPES = [(h, k, n) for h in (32, 64) for k in (512, 1024, 2048) for n in SUPPORTED_NEXT_N]
# Off the block size, shorter than every top_k, empty, shorter than next_n, and several tiles.
CONTEXTS = [5000, 130, 0, 3, 2049, 9000, 64, 700]


def route_by_table(monkeypatch, directory, entries) -> None:
    """Dispatch reads a user decode table of `entries` (DecodeEntry) from `directory`, not the shipped one."""
    import runtime.decode_table as dt
    from runtime.gpu import device_identity
    from runtime.table import forget_recent

    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(directory))
    key = device_identity(torch.cuda.current_device()).key
    dt.save_decode_table(dt.decode_table_path(key), key, entries, {})
    forget_recent()


def table_entry(wl, dense_faster: bool, planned: bool = False):
    """A decode table entry at wl's step that times the dense path (as called, or with the layout
    given) 50x faster than the paged kernel, or 20x slower."""
    from runtime.decode_table import DecodeEntry

    dense = 0.001 if dense_faster else 1.0
    timed = (1.0, dense) if planned else (dense, 1.0)
    capacity = wl.block_table.shape[1] * wl.kv_cache.shape[1]
    return DecodeEntry(wl.heads, wl.top_k, wl.next_n, wl.batch, capacity, 0.05, *timed)


@pytest.fixture(autouse=True)
def _the_kernel_unless_a_test_routes(tmp_path, monkeypatch):
    """Every test here runs automatic dispatch on an empty decode table (the paged kernel) unless it
    writes its own: the shipped table's choice moves with its timings, these tests' expectations do not."""
    route_by_table(monkeypatch, tmp_path / "tables", [])


def run(variant, wl, parts=None) -> torch.Tensor:
    out = torch.full((wl.batch * wl.next_n, wl.top_k), POISON, dtype=torch.int32, device="cuda")
    launch_paged(variant, *wl.args(), out=out, parts=parts)
    torch.cuda.synchronize()
    assert not (out == POISON).any(), "elements left unwritten"
    return out


@pytest.mark.parametrize(("heads", "top_k", "next_n"), SHAPES, ids=lambda x: str(x))
@pytest.mark.parametrize("parts", [1, 3])
def test_paged_kernel_matches_the_reference(heads, top_k, next_n, parts):
    wl = make_paged_workload("random", CONTEXTS, next_n, heads, top_k, seed=11, device="cuda", shared_prefix=2)
    out = run(default_paged_variant(heads, top_k, next_n, 64), wl, parts)
    report = verify_paged(out, wl)
    assert report.ok, report.summary()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("heads", "top_k", "next_n"), [(64, 2048, 2), (32, 512, 4), (64, 1024, 1), (32, 2048, 3)],
                         ids=lambda x: str(x))
def test_paged_kernel_on_every_family(family, heads, top_k, next_n):
    wl = make_paged_workload(family, [9000, 4100, 300, 12000], next_n, heads, top_k, seed=5, device="cuda")
    variant = default_paged_variant(heads, top_k, next_n, 64)
    for parts in (1, 4):
        report = verify_paged(run(variant, wl, parts), wl)
        assert report.ok, f"parts={parts}: {report.summary()}"


@pytest.mark.parametrize(("heads", "top_k", "next_n"), [(64, 2048, 1), (32, 512, 2), (64, 512, 4)], ids=lambda x: str(x))
def test_the_split_never_changes_the_bytes(heads, top_k, next_n):
    """Each part's list is its exact top k in the contract's order, so any split merges to the same
    answer: one part, several, many more than the SMs (parts of one tile, empty parts)."""
    wl = make_paged_workload("boundary_ties", [30000, 17, 4096, 20000], next_n, heads, top_k, seed=3, device="cuda")
    variant = default_paged_variant(heads, top_k, next_n, 64)
    answers = [run(variant, wl, parts) for parts in (1, 2, 5, 64, 300)]
    for a in answers[1:]:
        assert torch.equal(a, answers[0])
    assert torch.equal(run(variant, wl, 5), answers[0])  # and every repeat
    assert verify_paged(answers[0], wl).ok


def test_a_long_context_fills_the_gpu_and_stays_exact():
    wl = make_paged_workload("random", [300_000], 2, 64, 2048, seed=9, device="cuda", table_slack=16)
    variant = default_paged_variant(64, 2048, 2, 64)
    out = run(variant, wl)  # the default split: many parts
    report = verify_paged(out, wl)
    assert report.ok, report.summary()
    assert torch.equal(out, run(variant, wl, parts=1))  # the same bytes as one CTA's scan


@pytest.mark.parametrize(("heads", "top_k", "next_n"), [(64, 2048, 4), (64, 2048, 2), (32, 512, 4), (32, 1024, 3)],
                         ids=lambda x: str(x))
@pytest.mark.parametrize("family", ["random", "boundary_ties", "all_equal"])
def test_rows_merged_by_several_ctas_give_the_same_bytes_at_any_split(heads, top_k, next_n, family):
    """`_m<next_n>`: the CTAs of a request's last next_n parts merge its rows in parallel, all but the
    last waiting for the other parts. With far more parts than CTAs a CTA's queued item is often a part
    of its own request, where it must leave the rows to the others rather than wait on itself
    (await_parts); every split gives one CTA's bytes."""
    wl = make_paged_workload(family, [200_000, 70_000, 9000, 0, 2100], next_n, heads, top_k, seed=4, device="cuda")
    variant = default_paged_variant(heads, top_k, next_n, 64)
    assert variant.merge_ctas == next_n  # (the default at next_n 2 to 4)
    one = run(variant, wl, parts=1)
    report = verify_paged(one, wl)
    assert report.ok, report.summary()
    for parts in (2, next_n, 7, 600, 3000):
        assert torch.equal(run(variant, wl, parts), one), f"parts={parts}"


def test_auto_serves_the_paged_kernel_and_equals_the_reference():
    wl = make_paged_workload("signed_weights", [2500, 7000, 0], 2, 32, 1024, seed=2, device="cuda")
    problem_variant = paged_variant_for(check_paged_inputs(*wl.args()))
    assert problem_variant is not None
    out = paged_mqa_topk(*wl.args())
    assert verify_paged(out, wl).ok
    assert torch.equal(out, run(problem_variant, wl))


@pytest.mark.parametrize("dense", [False, True], ids=["paged kernel", "dense path"])
def test_a_captured_step_replays_with_new_lengths_and_queries(tmp_path, monkeypatch, dense):
    """Shapes fixed, lengths on the device: a step captured once answers every later step's data,
    on the path automatic dispatch takes (the paged kernel, or the dense path where the decode table
    says so: its layout made inside the graph)."""
    wl = make_paged_workload("random", [6000, 3000, 9000], 2, 64, 512, seed=4, device="cuda", table_slack=4)
    route_by_table(monkeypatch, tmp_path, [table_entry(wl, dense)])
    q, cache, weights, lens, table, top_k = (x.clone() if isinstance(x, torch.Tensor) else x for x in wl.args())
    paged_mqa_topk(q, cache, weights, lens, table, top_k, validate=False)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = paged_mqa_topk(q, cache, weights, lens, table, top_k, validate=False)
    # (only shorter: the tokens past a request's own are the cache's noise)
    for step, new_lens in enumerate(([5999, 2999, 8999], [100, 0, 8000], [6000, 3000, 9000])):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        q.view(torch.uint8).copy_(torch.roll(wl.q.view(torch.uint8), step, dims=0))
        graph.replay()
        torch.cuda.synchronize()
        eager = paged_mqa_topk(q, cache, weights, lens, table, top_k)
        assert torch.equal(out, eager), f"step {step}"
        assert verify_paged(eager, PagedWorkload("random", q, cache, weights, lens, table, top_k), strict=True).ok
        if not dense:
            assert torch.equal(eager, paged_mqa_topk(q, cache, weights, lens, table, top_k, variant="reference"))


def test_unvalidated_bad_values_do_not_fault_and_the_next_call_is_right():
    wl = make_paged_workload("random", [3000, 5000], 1, 32, 512, seed=8, device="cuda")
    q, cache, weights, lens, table, top_k = wl.args()
    wild_table = torch.randint(-10**9, 10**9, table.shape, dtype=torch.int32, device="cuda")
    too_long = torch.tensor([10**9, -5], dtype=torch.int32, device="cuda")
    for args in ((q, cache, weights, lens, wild_table, top_k), (q, cache, weights, too_long, table, top_k)):
        out = paged_mqa_topk(*args, validate=False)
        torch.cuda.synchronize()
        assert out.shape == (2, 512)
    assert verify_paged(paged_mqa_topk(*wl.args()), wl).ok


def test_explain_paged_names_the_kernel_and_its_split():
    from runtime import explain_paged

    wl = make_paged_workload("random", [300_000], 1, 64, 2048, seed=1, device="cuda")
    decision = explain_paged(*wl.args())
    assert decision.path == "paged kernel" and decision.variant == paged_variant_for(check_paged_inputs(*wl.args()))
    assert decision.parts > 1 and "parts per request" in str(decision)


@pytest.mark.parametrize("family", ["random", "boundary_ties", "increasing", "all_equal"])
@pytest.mark.parametrize(("heads", "top_k", "next_n"), [(64, 2048, 1), (32, 512, 2), (32, 512, 4), (64, 512, 2)],
                         ids=lambda x: str(x))
def test_the_dense_path_is_exact_and_where_its_arithmetic_is_the_kernels_gives_its_bytes(family, heads, top_k, next_n):
    """variant="dense" (our dense kernels' paged build over decode_layout) against the paged kernel,
    poisoned outputs written whole, every row verified by the two-sided rule. Where the kernel sums a
    row's heads in one group of 64 columns (next_n x heads <= 64 after padding), its scores are the
    dense kernels' bit for bit, so the answers are the same bytes; in two or more groups the sums'
    order differs, and a key that ties the k-th within rounding may be swapped (both exact: 6 of the
    decode table's 306 steps differed, in one or two rows each where examined, 2026-12-03)."""
    wl = make_paged_workload(family, CONTEXTS, next_n, heads, top_k, seed=21, device="cuda", shared_prefix=2)
    out = torch.full((wl.batch * wl.next_n, wl.top_k), POISON, dtype=torch.int32, device="cuda")
    paged_mqa_topk(*wl.args(), variant="dense", out=out)
    torch.cuda.synchronize()
    assert not (out == POISON).any(), "elements left unwritten"
    assert verify_paged(out, wl, strict=True).ok
    kernel = default_paged_variant(heads, top_k, next_n, 64)
    if kernel.rows * heads == 64:
        assert torch.equal(out, run(kernel, wl))


def cluster_ctas_of(wl) -> int:
    """The CTAs a row the dense paged build's cluster top-k takes wl's step with (0: a CTA a row)."""
    from runtime.dense import DEFAULT_LOGITS_BUDGET
    from runtime.loader import load
    from runtime.paged import dense_paged_build
    from runtime.scoring import window_pieces

    capacity = wl.block_table.shape[1] * wl.kv_cache.shape[1]
    build = dense_paged_build(torch.device("cuda"), wl.heads, wl.top_k, capacity, wl.kv_cache.shape[1], wl.next_n)
    window, piece_rows = window_pieces(wl.batch * wl.next_n, capacity, capacity, DEFAULT_LOGITS_BUDGET)
    return load(build).cluster_topk_ctas(window, piece_rows)


@pytest.mark.parametrize("family", ["random", "all_equal", "boundary_ties", "increasing"])
@pytest.mark.parametrize(("heads", "top_k", "next_n"), [(64, 2048, 2), (32, 512, 1), (64, 1024, 4)], ids=lambda x: str(x))
def test_few_long_rows_are_selected_by_a_cluster_and_stay_exact(family, heads, top_k, next_n):
    """A step of a few long requests: the dense paged build selects each row over a cluster of CTAs
    (its library says it does for this step), every row verified by the two-sided rule, strictly,
    outputs poisoned. On the H200's 132 SMs the five rows of next_n 1 take clusters of sixteen CTAs
    (beyond the portable size) and the ten of next_n 2 clusters of eight. Requests of 70,000 (a slice
    of 4,375 or 8,750 keys a CTA), 20,000, 3 (fewer than top_k) and 2,100 keys (near the gate's sample)
    take the resident route (each slice in shared memory), one of 600,000 the gate route (slices of
    37,500 keys or more, past the resident route's 32,768). all_equal overflows rank 0's buffer on the
    resident route and then the gate's buffers, so the cluster ranks its slices from the logits."""
    wl = make_paged_workload(family, [70000, 3, 20000, 2100, 600000], next_n, heads, top_k, seed=5, device="cuda")
    assert cluster_ctas_of(wl) >= 2, "the step should take the cluster top-k"
    if torch.cuda.get_device_properties(0).multi_processor_count == 132 and next_n <= 2:
        assert cluster_ctas_of(wl) == {1: 16, 2: 8}[next_n]
    out = torch.full((wl.batch * next_n, top_k), POISON, dtype=torch.int32, device="cuda")
    paged_mqa_topk(*wl.args(), variant="dense", out=out)
    torch.cuda.synchronize()
    assert not (out == POISON).any(), "elements left unwritten"
    report = verify_paged(out, wl, strict=True)
    assert report.ok, report.summary()


@pytest.mark.parametrize("family", ["random", "all_equal"])
@pytest.mark.parametrize(("requests", "ctas"), [(12, 4), (20, 2)], ids=["24 rows", "40 rows"])
def test_more_rows_take_smaller_clusters_and_stay_exact(family, requests, ctas):
    """24 and 40 rows (next_n 2) take clusters of four and two CTAs a row on the H200's 132 SMs (the
    most that fit at once), exact as eight: contexts of 3,000 to 40,000 keys, strict two-sided rule,
    poisoned outputs."""
    contexts = [3000 + 3331 * i for i in range(requests)]
    wl = make_paged_workload(family, contexts, 2, 64, 2048, seed=9, device="cuda")
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert cluster_ctas_of(wl) == ctas
    else:
        assert cluster_ctas_of(wl) >= 2
    out = torch.full((wl.batch * 2, 2048), POISON, dtype=torch.int32, device="cuda")
    paged_mqa_topk(*wl.args(), variant="dense", out=out)
    torch.cuda.synchronize()
    assert not (out == POISON).any(), "elements left unwritten"
    report = verify_paged(out, wl, strict=True)
    assert report.ok, report.summary()


@pytest.mark.parametrize("next_n", SUPPORTED_NEXT_N)
def test_the_layout_made_in_one_launch_is_decode_layouts(next_n):
    """What a dense call given no layout makes (runtime.paged.launched_decode_layout, one kernel) equals
    decode_layout's torch ops element for element: contexts off the block size, longer than the block
    table, zero and negative; block ids outside the cache both ways; a table that is a view."""
    from runtime.paged import decode_layout, dense_paged_build, launched_decode_layout

    lens = torch.tensor([5000, 0, -3, 1 << 20, 64, 1], dtype=torch.int32, device="cuda")
    table = torch.randint(-5, 40, (6, 100), dtype=torch.int32, device="cuda")[:, :90]
    build = dense_paged_build(torch.device("cuda"), 64, 2048, 90 * 64, 64, next_n)
    mine = launched_decode_layout(build, lens, table, next_n, 37)
    theirs = decode_layout(lens, table, next_n, 64, 37)
    for a, b in zip(mine[:3], theirs[:3]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert mine[3:] == theirs[3:]


@pytest.mark.parametrize("planned", [False, True], ids=["layout made in the call", "layout given"])
def test_auto_takes_the_dense_path_where_the_decode_table_says(tmp_path, monkeypatch, planned):
    """A decode table whose nearest entry times the dense path faster (as called, or with the layout
    given): explain_paged names the dense path and the times, and AUTO's answer is the dense path's
    bytes; an entry where the kernel is faster keeps the kernel."""
    from runtime import explain_paged
    from runtime.paged import decode_layout

    wl = make_paged_workload("random", CONTEXTS, 2, 64, 2048, seed=22, device="cuda")
    layout = decode_layout(wl.context_lens, wl.block_table, 2, 64, wl.kv_cache.shape[0]) if planned else None
    answers = {"dense": paged_mqa_topk(*wl.args(), variant="dense"), "paged kernel": run(paged_variant_for(
        check_paged_inputs(*wl.args())), wl)}
    for dense_faster, path in ((True, "dense"), (False, "paged kernel")):
        route_by_table(monkeypatch, tmp_path, [table_entry(wl, dense_faster, planned)])
        decision = explain_paged(*wl.args(), layout=layout)
        assert decision.path == path and "nearest entry" in decision.why, str(decision)
        out = torch.full_like(answers[path], POISON)
        paged_mqa_topk(*wl.args(), out=out, layout=layout)
        torch.cuda.synchronize()
        assert torch.equal(out, answers[path])


GATED = [(64, 2048, 4, 16), (64, 2048, 2, 8), (32, 512, 1, 4), (32, 512, 4, 4)]  # (heads, top_k, next_n, gate tiles)


@pytest.mark.parametrize(("heads", "top_k", "next_n", "gate_tiles"), GATED, ids=lambda x: str(x))
@pytest.mark.parametrize("family", ["random", "increasing", "all_equal", "boundary_ties", "signed_weights"])
@pytest.mark.parametrize("parts", [1, 3])
def test_a_sampled_gate_gives_the_ungated_kernels_bytes(heads, top_k, next_n, gate_tiles, family, parts):
    """gate_tiles: parts longer than their buffer start each row from a sampled gate. The scores are
    the ungated kernel's, so the answers must be its bytes, and exact."""
    ungated = replace(default_paged_variant(heads, top_k, next_n, 64), gate_tiles=0)
    wl = make_paged_workload(family, [40000, 9000, 300, 12000], next_n, heads, top_k, seed=23, device="cuda")
    gated = run(replace(ungated, gate_tiles=gate_tiles), wl, parts)
    assert torch.equal(gated, run(ungated, wl, parts))
    report = verify_paged(gated, wl)
    assert report.ok, report.summary()


@pytest.mark.parametrize(("heads", "top_k", "next_n", "gate_tiles"), GATED, ids=lambda x: str(x))
def test_the_rescan_pass_answers_a_request_the_gate_missed(heads, top_k, next_n, gate_tiles):
    """Keys planted in request 0's first two sampled tiles score far above the rest (positive weights,
    their scales 10^4 times the others'): its rows' gates then pass fewer than top_k keys, the request
    is listed, and the second launch scans it again, ungated. The answer must still be exact, and the
    ungated kernel's bytes."""
    from generator.paged_workloads import lay_out_in_pages
    from generator.workloads import make_workload

    ungated = replace(default_paged_variant(heads, top_k, next_n, 64), gate_tiles=0)
    variant = replace(ungated, gate_tiles=gate_tiles)
    contexts = [40000, 9000]
    base = make_workload("random", len(contexts) * next_n, sum(contexts), heads, top_k, seed=5, device="cuda")
    tiles = -(-contexts[0] // variant.key_tile)  # (one part: request 0's sample, as the kernel places it)
    samples = min(gate_tiles, max(1, tiles // 8))
    k_scale = base.k_scale.clone()
    for i in range(2):
        start = (2 * i + 1) * tiles // (2 * samples) * variant.key_tile
        k_scale[start:start + variant.key_tile] *= 1e4
    cache, table = lay_out_in_pages(base.k_fp8, k_scale, contexts, 64, seed=5)
    q = base.q[: len(contexts) * next_n].reshape(len(contexts), next_n, heads, 128).contiguous()
    wl = PagedWorkload("planted", q, cache.cuda(), base.weights[: len(contexts) * next_n].abs().contiguous(),
                       torch.tensor(contexts, dtype=torch.int32, device="cuda"), table.cuda(), top_k)
    gated = run(variant, wl, parts=1)
    assert torch.equal(gated, run(ungated, wl, parts=1))
    report = verify_paged(gated, wl)
    assert report.ok, report.summary()


def test_a_gated_step_and_its_rescan_pass_replay_in_a_graph():
    """The gate's two launches (the scan, then the rescan pass over the requests it missed, listed on
    the device) capture into one graph and replay with new lengths: every replay the eager call's
    answer."""
    variant = replace(default_paged_variant(64, 2048, 2, 64), gate_tiles=8)
    wl = make_paged_workload("increasing", [40000, 12000, 20000], 2, 64, 2048, seed=6, device="cuda", table_slack=4)
    q, cache, weights, lens, table, top_k = (x.clone() if isinstance(x, torch.Tensor) else x for x in wl.args())
    out = torch.full((wl.batch * wl.next_n, top_k), POISON, dtype=torch.int32, device="cuda")
    launch_paged(variant, q, cache, weights, lens, table, top_k, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch_paged(variant, q, cache, weights, lens, table, top_k, out=out)
    # (only shorter: the tokens past a request's own are the cache's noise)
    for new_lens in ([40000, 12000, 9000], [39000, 300, 20000], [5000, 12000, 0]):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        wl_now = PagedWorkload("increasing", q, cache, weights, lens, table, top_k)
        assert torch.equal(out, run(variant, wl_now)), new_lens
        assert verify_paged(out, wl_now).ok
