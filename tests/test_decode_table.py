"""The decode table (runtime/decode_table.py): the entries dispatch reads to choose between the paged
kernel and the dense path, their lookup, and what makes them not count (CPU)."""

import io
import json

import pytest

from runtime.decode_table import (MARGIN, DecodeEntry, DecodeTable, decode_code, decode_table, decode_table_path,
                                  nearest_decode, save_decode_table)
from runtime.gpu import identify
from runtime.table import forget_recent

TEST_GPU = identify("Test GPU", (9, 0), 7)  # key Test-GPU-7SM


def entry(batch, context, kernel, dense, planned, next_n=1, heads=64, top_k=2048):
    return DecodeEntry(heads, top_k, next_n, batch, context, kernel, dense, planned)


def test_the_dense_path_is_used_only_past_the_margin():
    assert entry(1, 8192, 0.035, 0.026, 0.011).use(planned=False) == "dense"
    assert entry(1, 8192, 0.035, 0.034, 0.011).use(planned=False) == "kernel"  # within MARGIN: the kernel
    assert entry(1, 8192, 0.035, 0.034, 0.011).use(planned=True) == "dense"
    assert entry(1, 8192, 0.100, 0.100 * (1 - MARGIN) * 1.001, 0.2).use(planned=False) == "kernel"


def test_nearest_matches_heads_top_k_and_next_n_then_the_step_on_a_log_scale():
    table = [entry(1, 8192, 1, 1, 1), entry(64, 8192, 2, 2, 2), entry(1, 131072, 3, 3, 3),
             entry(1, 8192, 4, 4, 4, next_n=2), entry(1, 8192, 5, 5, 5, top_k=512)]
    assert nearest_decode(table, 64, 2048, 1, 2, 9000).kernel_ms == 1
    assert nearest_decode(table, 64, 2048, 1, 32, 8192).kernel_ms == 2
    assert nearest_decode(table, 64, 2048, 1, 1, 1 << 20).kernel_ms == 3
    assert nearest_decode(table, 64, 2048, 2, 256, 1 << 20).kernel_ms == 4
    assert nearest_decode(table, 64, 512, 1, 1, 8192).kernel_ms == 5
    assert nearest_decode(table, 32, 2048, 1, 1, 8192) is None
    assert nearest_decode(table, 64, 2048, 4, 1, 8192) is None
    kept = DecodeTable(None, tuple(table), "")  # (what dispatch asks: the same answers, kept per shape)
    for shape in ((64, 2048, 1, 2, 9000), (64, 2048, 1, 32, 8192), (32, 2048, 1, 1, 8192), (64, 2048, 1, 2, 9000)):
        assert kept.nearest(*shape) == nearest_decode(table, *shape)


def test_a_written_table_is_read_back_and_other_codes_times_are_not(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(tmp_path))
    path = decode_table_path("Test-GPU-7SM")
    assert path.parent == tmp_path / "decode"
    entries = [entry(1, 8192, 0.035, 0.026, 0.011), entry(4, 8192, 0.036, 0.03, 0.012, next_n=2)]
    save_decode_table(path, "Test-GPU-7SM", entries, {"gpu": "Test GPU"})
    data = json.loads(path.read_text())
    assert data["code"] == decode_code() and data["identity"] == "Test-GPU-7SM" and len(data["entries"]) == 2
    table = decode_table(TEST_GPU)
    assert table.path == path and set(table.entries) == set(entries) and "own table" in table.why

    data["code"] = "0" * 16 + "." + "0" * 16  # timed on other kernels: not used
    path.write_text(json.dumps(data))
    forget_recent()
    with pytest.warns(RuntimeWarning, match="every decode step takes the paged kernel"):
        stale = decode_table(TEST_GPU)
    assert stale.entries == () and "other kernel code" in stale.why


def test_no_table_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(tmp_path))
    forget_recent()
    table = decode_table(identify("NVIDIA L40S", (8, 9), 142))  # (no sm89 decode table: the paged kernel is Hopper's)
    assert table.path is None and table.entries == () and "no decode table" in table.why


def test_a_hopper_gpu_without_a_decode_table_borrows_the_nearest_portable_one(tmp_path, monkeypatch):
    """As for prefill (runtime.table.table_for): an H20 takes a shipped decode table's choices, which
    say where the dense path won there, and `why` says they were not measured here; of the two shipped
    132-SM tables (H100 SXM and H200: the same distance in SM count) the first by file name, the H100's;
    a table tuned on a GPU nearer in SM count is taken first, and one that does not say it is portable
    is not taken."""
    from runtime.table import SHIPPED_TABLE_DIR

    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(tmp_path))
    forget_recent()
    h20, h100 = identify("NVIDIA H20", (9, 0), 78), identify("NVIDIA H100 80GB HBM3", (9, 0), 132)
    borrowed = decode_table(h20)
    assert borrowed.path == SHIPPED_TABLE_DIR / "decode" / "H100-SXM-132SM.json"
    assert "borrowed H100-SXM-132SM" in borrowed.why and "never on H20-78SM" in borrowed.why
    assert borrowed.entries and borrowed.borrowed  # (its code is this package's: test_table's shipped-code test)
    from runtime.paged import DecodeRoute

    said = DecodeRoute(borrowed, borrowed.nearest(64, 2048, 1, 1, 8192), True).why()
    assert "nearest entry of H100-SXM-132SM.json" in said and "borrowed H100-SXM-132SM" in said  # (explain_paged's)
    near = [entry(1, 8192, 0.035, 0.026, 0.011)]
    save_decode_table(decode_table_path("H100-PCIe-114SM"), "H100-PCIe-114SM", near, {"sms": 114, "portable_arch": "sm90a"})
    forget_recent()
    assert decode_table(h20).path.name == "H100-PCIe-114SM.json"  # nearer in SM count
    save_decode_table(decode_table_path("H100-PCIe-114SM"), "H100-PCIe-114SM", near, {"sms": 114})
    forget_recent()
    assert decode_table(h20).path.name == "H100-SXM-132SM.json"  # (not portable: not borrowed)
    gh200 = identify("NVIDIA GH200 480GB", (9, 0), 132)
    assert decode_table(gh200).path.name == "H100-SXM-132SM.json"  # (the same tie)
    save_decode_table(decode_table_path(h100.key), h100.key, near, {"sms": 132})
    forget_recent()
    own = decode_table(h100)
    assert own.path == decode_table_path(h100.key) and own.entries == tuple(near) and "own table" in own.why
    assert not own.borrowed and "borrowed" not in DecodeRoute(own, own.entries[0], True).why()


@pytest.mark.parametrize("field", ["kernel_ms", "dense_ms", "dense_planned_ms"])
def test_entries_keep_their_times(field):
    e = entry(16, 32768, 0.07, 0.09, 0.08)
    assert e.to_json()[field] == getattr(e, field)


def test_the_decode_grid_builds_the_paged_defaults_and_both_dense_builds():
    """decode --tune (and tune's decode part) builds first what the grid runs: the paged kernel's
    defaults at every next_n and our dense kernels' short-row and long-row decode builds at every
    next_n."""
    from generator.paged_bench import NEXT_N, decode_variants
    from runtime.dense_variant import default_dense_variant
    from runtime.paged_variant import default_paged_variant

    names = set(decode_variants((64,), (512, 2048)))
    assert {default_paged_variant(64, k, n, 64).name for k in (512, 2048) for n in NEXT_N} <= names
    dense = {default_dense_variant(64, k, short_rows=s).decode_build(64, n).name
             for k in (512, 2048) for s in (True, False) for n in NEXT_N}
    assert dense <= names and any("_r1_" in n for n in dense) and any("_r2_" in n for n in dense)
    assert not any("_h32_" in n for n in names)


@pytest.mark.parametrize(("heads", "rows_by_next_n"), [(64, {1: 1, 2: 2, 3: 2, 4: 2}), (32, {1: 2, 2: 2, 3: 4, 4: 4})])
def test_a_decode_steps_dense_build_holds_a_requests_rows_a_block(heads, rows_by_next_n):
    """DenseVariant.decode_build: a block's rows cut to next_n (in a decode step only a request's rows
    share keys), rounded up to a multiple of 64 / heads (the wgmma's N), never above the variant's
    own; every such build a valid paged variant."""
    from runtime.dense_variant import default_dense_variant, dense_rejection_reason

    for short in (True, False):
        base = default_dense_variant(heads, 2048, short_rows=short)
        for next_n, rows in rows_by_next_n.items():
            build = base.decode_build(64, next_n)
            assert (build.rows, build.page_block_size) == (rows, 64) and rows <= base.rows
            assert dense_rejection_reason(build) is None


def test_tune_runs_the_decode_grid_unless_told_not_to():
    import argparse

    from generator.tune import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args([]).decode and not p.parse_args(["--no-decode"]).decode


def test_the_shipped_decode_table_is_found_where_the_user_has_none(tmp_path, monkeypatch):
    from runtime.table import SHIPPED_TABLE_DIR

    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(tmp_path))
    forget_recent()
    table = decode_table(identify("NVIDIA H200", (9, 0), 132))
    assert table.path == SHIPPED_TABLE_DIR / "decode" / "H200-132SM.json"
    assert table.entries or "other kernel code" in table.why  # (stale: `tools/restamp_table.py --decode` or re-time)


def test_the_decode_grid_times_its_three_calls_in_alternating_rounds(monkeypatch):
    """decode --tune's choice is between times taken round by round, each call's median over the rounds,
    so that a disturbance meets all three (graphs_replay_ms; CPU: the graphs and the timer stood in for)."""
    import generator.paged_bench as pb

    class Graph:
        def __init__(self, name):
            self.replay = lambda: order.append(name)

    order: list[str] = []
    monkeypatch.setattr(pb, "captured", lambda fn: Graph(fn()))
    slow = iter([9.0] + [1.0] * 1000)  # the first round's first run is disturbed: the median leaves it out
    got = pb.graphs_replay_ms({n: (lambda n=n: n) for n in ("kernel", "dense", "planned")},
                              timer=lambda fn: (fn(), next(slow) * {"kernel": 3, "dense": 2, "planned": 1}[order[-1]])[1])
    assert got == {"kernel": 3.0, "dense": 2.0, "planned": 1.0}
    rounds = order[3 * 3:]  # (after three warm-up runs of each)
    assert rounds[:6] == ["kernel", "dense", "planned"] * 2 and len(rounds) % 3 == 0


def test_the_decode_grid_times_no_step_past_its_token_cap(monkeypatch):
    """decode --tune --max-tokens: steps of more tokens are not timed (they take their nearest timed
    step's choice); the default cap, TUNE_MAX_TOKENS, takes the whole grid; a step whose cache does not
    fit the GPU's free memory is skipped (CPU: the step's data, kernels and memory stood in for)."""
    import argparse

    import generator.paged_bench as pb

    class Cache:
        shape = (0, 0)

    made = []
    monkeypatch.setattr(pb, "random_step", lambda b, c, *a, **k: made.append((b, c)) or (None, Cache, None, None, None))
    monkeypatch.setattr(pb, "decode_layout", lambda *a: None)
    monkeypatch.setattr(pb, "with_heads", lambda step, h: step)
    monkeypatch.setattr(pb, "check_paged_inputs", lambda *a, **k: None)
    monkeypatch.setattr(pb, "paged_variant_for", lambda problem: None)  # (nothing to time)
    monkeypatch.setattr(pb, "free_device_bytes", lambda: 1 << 40)
    pb.tune_decode((64, 256), (131072, 1 << 20), (1,), (64,), (2048,), max_tokens=16 << 20)
    assert made == [(64, 131072)]  # 8M tokens; the others are 64M, 32M and 256M
    made.clear()
    pb.tune_decode((64, 256), (131072, 1 << 20), (1,), (64,), (2048,))
    assert made == [(64, 131072), (64, 1 << 20), (256, 131072), (256, 1 << 20)]  # the default: the whole grid
    assert pb.TUNE_MAX_TOKENS == 256 << 20
    # A step whose cache does not fit the GPU's free memory is skipped, and says so.
    made.clear()
    monkeypatch.setattr(pb, "free_device_bytes", lambda: 8 << 30)
    log = io.StringIO()
    pb.tune_decode((64, 256), (131072, 1 << 20), (1,), (64,), (2048,), max_tokens=256 << 20, out=log)
    assert made == [(64, 131072), (256, 131072)]  # caches of 1.03 and 4.1 GiB (and 2 of slack) in 8 GiB free
    skipped = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [(r["batch"], r["context"]) for r in skipped] == [(64, 1 << 20), (256, 1 << 20)]
    assert "10.2 GiB, 8.0 GiB free" in skipped[0]["skipped"]
    p = argparse.ArgumentParser()
    pb.add_arguments(p)
    assert p.parse_args([]).max_tokens == pb.TUNE_MAX_TOKENS and p.parse_args(["--max-tokens", "5"]).max_tokens == 5
