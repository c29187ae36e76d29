"""Tuned tables: file naming, nearest-bucket lookup, and the dispatch rules built on them."""

import json
from dataclasses import replace

import pytest
import torch

from generator.space import rejection_reason
from runtime import choose_variant
from runtime.contract import Problem
from runtime.defaults import default_variant
from runtime.dispatch import select_variant
from runtime.gpu import identify
from runtime.table import (
    TABLE_DIR_ENV,
    Entry,
    load_table,
    nearest,
    save_table,
    SHIPPED_TABLE_DIR,
    table_for,
    table_path,
)
from runtime.variant import Variant


def entry(heads=32, top_k=2048, rows=4096, keys=131072, fused=1.0, dense=2.0, variant=None):
    variant = variant or default_variant(heads, top_k).name
    return Entry(heads, top_k, rows, keys, variant, fused, dense)


def problem(heads=32, top_k=2048, rows=4096, keys=131072, device="cuda", visible_keys=None):
    return Problem(rows=rows, keys=keys, heads=heads, top_k=top_k, device=torch.device(device), visible_keys=visible_keys)


@pytest.mark.parametrize("name, capability, sms, key", [
    ("NVIDIA H200", (9, 0), 132, "H200-132SM"),
    ("NVIDIA H200 NVL", (9, 0), 132, "H200-NVL-132SM"),
    ("NVIDIA H100 80GB HBM3", (9, 0), 132, "H100-SXM-132SM"),
    ("NVIDIA H100 PCIe", (9, 0), 114, "H100-PCIe-114SM"),
    ("NVIDIA H100 NVL", (9, 0), 132, "H100-NVL-132SM"),
    ("NVIDIA H800", (9, 0), 132, "H800-132SM"),
    ("NVIDIA H20", (9, 0), 78, "H20-78SM"),
    ("NVIDIA GH200 480GB", (9, 0), 132, "GH200-132SM"),
    ("NVIDIA L40S", (8, 9), 142, "L40S-142SM"),
])
def test_gpu_identity_is_family_and_sm_count(name, capability, sms, key):
    identity = identify(name, capability, sms)
    assert identity.key == key
    assert table_path(identity.key).name == f"{key}.json"
    assert identity.arch == ("sm90a" if capability == (9, 0) else "sm89")


def test_a_gpu_without_a_table_borrows_the_nearest_portable_one_of_its_arch(tmp_path, monkeypatch):
    monkeypatch.setenv(TABLE_DIR_ENV, str(tmp_path))
    h20, h100 = identify("NVIDIA H20", (9, 0), 78), identify("NVIDIA H100 PCIe", (9, 0), 114)
    shipped = table_for(identify("NVIDIA H200", (9, 0), 132))
    assert shipped.path.name == "H200-132SM.json" and "own table" in shipped.why
    choice = table_for(h20)  # the shipped tables record portable_arch sm90a; of the two 132-SM ones, the first by name
    assert choice.path.name == "H100-SXM-132SM.json" and "borrowed H100-SXM-132SM" in choice.why and choice.borrowed
    assert f"never on {choice.why.split(':')[0].removeprefix('no table for ')}" in choice.why  # says it was not measured here
    save_table(table_path("H100-PCIe-114SM"), "H100-PCIe-114SM", [entry()],
               {"arch": "sm90a", "sms": 114, "portable_arch": "sm90a"})
    assert table_for(h20).path.name == "H100-PCIe-114SM.json"  # nearer in SM count
    assert "own table" in table_for(h100).why and not table_for(h100).borrowed
    save_table(table_path("H100-PCIe-114SM"), "H100-PCIe-114SM", [entry()], {"arch": "sm90a", "sms": 114})
    assert table_for(h20).path.name == "H100-SXM-132SM.json"  # a table that does not say it is portable is not borrowed
    ada = table_for(identify("NVIDIA L40S", (8, 9), 142))
    assert ada.path is None and "none tuned on another sm89 GPU" in ada.why


def test_the_call_path_looks_at_the_table_files_again_after_a_while(tmp_path, monkeypatch):
    from runtime import table

    monkeypatch.setenv(TABLE_DIR_ENV, str(tmp_path))
    clock = [1000.0]
    monkeypatch.setattr(table.time, "monotonic", lambda: clock[0])
    gpu = identify("NVIDIA H100 PCIe", (9, 0), 114)
    assert table.current_table(gpu)[0].path.name == "H100-SXM-132SM.json"  # borrowed
    save_table(table_path(gpu.key), gpu.key, [entry()], {"arch": "sm90a", "sms": 114})
    assert table.current_table(gpu)[0].path.name == "H100-SXM-132SM.json"  # trusted for RECHECK_S
    clock[0] += table.RECHECK_S
    choice, mtime = table.current_table(gpu)
    assert choice.path.name == "H100-PCIe-114SM.json" and mtime == choice.path.stat().st_mtime_ns
    monkeypatch.setenv(TABLE_DIR_ENV, str(tmp_path / "elsewhere"))  # a new directory is looked at at once
    assert table.current_table(gpu)[0].path.name == "H100-SXM-132SM.json"


def test_nearest_is_by_log_distance_within_heads_and_top_k():
    entries = [entry(rows=4096, keys=32768), entry(rows=16384, keys=131072), entry(heads=64, rows=4096, keys=131072)]
    assert nearest(entries, 32, 2048, 4000, 30000).keys == 32768
    assert nearest(entries, 32, 2048, 16000, 1 << 20).keys == 131072
    assert nearest(entries, 32, 2048, 100, 70000).rows == 4096
    assert nearest(entries, 64, 2048, 16384, 32768).heads == 64
    assert nearest(entries, 64, 512, 16384, 32768) is None


def test_a_chunk_of_packed_requests_is_looked_up_by_its_longest_row():
    from dataclasses import replace

    single = [entry(rows=16384, keys=16384), entry(rows=4096, keys=8192), entry(rows=16384, keys=131072)]
    packed = replace(entry(rows=16384, keys=32768), requests=8)  # eight 4K-key requests
    assert packed.longest_row == 4096 and packed.bucket[-1] == 8
    assert nearest(single, 32, 2048, 16384, 4096, 8).keys == 16384  # without it: the single 16K x 16K bucket
    assert nearest(single + [packed], 32, 2048, 16384, 4096, 8) == packed
    assert nearest(single + [packed], 32, 2048, 8192, 4096, 8) == packed
    assert nearest(single + [packed], 32, 2048, 16384, 16384).requests == 1
    assert nearest(single + [packed], 32, 2048, 4096, 8192).requests == 1
    # eight 2K-row requests of 16K keys: the rows and longest row of the causal 16K x 16K chunk, but
    # twice its keys a row; the requests tell them apart
    packed16 = replace(entry(rows=16384, keys=131072), requests=8)
    assert nearest(single + [packed, packed16], 32, 2048, 16384, 16384, 8) == packed16
    assert nearest(single + [packed, packed16], 32, 2048, 16384, 16384, 1).bucket == (32, 2048, 16384, 16384, 1)


def test_the_requests_a_chunk_packs_come_from_its_shapes():
    def packing(keys, visible):
        return problem(rows=16384, keys=keys, visible_keys=visible).packing

    assert packing(131072, 16384) == 8  # eight requests of 16K keys side by side
    assert packing(131072, None) == 1  # the longest row not known: one request of all the keys
    assert packing(16384, 16384) == 1 and packing(100_000, 30_000) == 3 and packing(1000, 0) == 1


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "GPU.json"
    from dataclasses import replace

    entries = [entry(), entry(top_k=512, fused=3.0, dense=2.0), replace(entry(top_k=1024), requests=8)]
    save_table(path, "Some-GPU-100SM", entries, {"arch": "sm90a"})
    data = json.loads(path.read_text())
    assert data["identity"] == "Some-GPU-100SM" and data["arch"] == "sm90a"
    assert {e["use"] for e in data["entries"]} == {"fused", "dense"}
    assert sorted(load_table(path), key=lambda e: e.top_k) == sorted(entries, key=lambda e: e.top_k)
    assert load_table(tmp_path / "missing.json") is None


def test_dispatch_rules():
    fused_wins, dense_wins = entry(keys=131072), entry(keys=8192, fused=2.0, dense=1.0)
    table = [fused_wins, dense_wins]
    assert select_variant(table, "sm90a", problem(keys=200_000)) == Variant.from_name(fused_wins.variant)
    assert select_variant(table, "sm90a", problem(keys=8000)) is None  # the table says dense wins there
    assert select_variant(table, "sm90a", problem(keys=8000), force_fused=True) == Variant.from_name(dense_wins.variant)
    # a chunk of packed requests is looked up by its longest row, not its total keys
    assert select_variant(table, "sm90a", problem(keys=200_000, visible_keys=8000)) is None
    packed_wins = replace(entry(keys=32768, fused=1.0, dense=2.0), requests=8)  # eight 4K-key requests
    assert select_variant(table + [packed_wins], "sm90a", problem(keys=32768, visible_keys=4096)) is not None
    assert select_variant(table + [packed_wins], "sm90a", problem(keys=4096, visible_keys=4096)) is None
    assert select_variant(table, None, problem()) is None  # no fp8 tensor cores


def test_a_fused_win_does_not_carry_down_to_fewer_rows_than_any_bucket():
    small = entry(rows=64, keys=524288, fused=1.0, dense=2.0)  # fused won at the fewest rows tuned
    table = [small, entry(rows=4096, keys=524288)]
    assert select_variant(table, "sm90a", problem(rows=64, keys=524288)) == Variant.from_name(small.variant)
    assert select_variant(table, "sm90a", problem(rows=100, keys=524288)) is not None
    assert select_variant(table, "sm90a", problem(rows=63, keys=524288)) is None
    assert select_variant(table, "sm90a", problem(rows=1, keys=524288)) is None
    assert select_variant(table, "sm90a", problem(rows=1, keys=524288), force_fused=True) == Variant.from_name(small.variant)
    # the fewest rows are counted per heads and top_k: a 16-row bucket of other heads does not lower them
    other = entry(heads=64, rows=16, keys=524288)
    assert select_variant(table + [other], "sm90a", problem(rows=32, keys=524288)) is None
    assert select_variant([replace(small, rows=16)], "sm90a", problem(rows=32, keys=524288)) is not None
    assert select_variant([], "sm90a", problem()) is None  # no table for this GPU
    assert select_variant(table, "sm100a", problem()) is None  # a table of another arch's builds
    forced = select_variant([], "sm90a", problem(heads=64, top_k=512), force_fused=True)
    assert forced == default_variant(64, 512) and forced.mma == "wgmma"  # the arch's fastest core
    assert select_variant([], "sm89", problem(), force_fused=True).mma == "mmasync"


def test_cpu_tensors_and_forced_dense_take_the_dense_path(monkeypatch):
    assert choose_variant(problem(device="cpu")) is None
    monkeypatch.setenv("FUSED_MQA_TOPK_PATH", "dense")
    assert choose_variant(problem(device="cuda")) is None
    monkeypatch.setenv("FUSED_MQA_TOPK_PATH", "sideways")
    with pytest.raises(ValueError, match="FUSED_MQA_TOPK_PATH"):
        choose_variant(problem(device="cuda"))


def test_shipped_tables_name_valid_variants_of_their_arch():
    paths = sorted(SHIPPED_TABLE_DIR.glob("*.json"))
    assert paths, "ship at least one tuned table"
    for path in paths:
        data = json.loads(path.read_text())
        assert path.name == table_path(data['identity']).name
        assert data["portable_arch"] == data["arch"] and data["sms"] > 0
        for e in load_table(path):
            v = Variant.from_name(e.variant)
            assert rejection_reason(v) is None, (path.name, e.variant)
            assert v.arch == data["arch"] and (v.heads, v.top_k) == (e.heads, e.top_k)
            assert e.fused_ms > 0 and e.dense_ms > 0


def test_the_shipped_tables_are_for_this_kernel_code():
    """Every shipped entry was timed on (or re-stamped to) this checkout's kernel code. A change that
    moves a digest (a template, or a module that renders them) leaves the runtime distrusting the
    prefill table's close calls and ignoring the decode table whole, on the GPU only, where no CI runs:
    7453c54's addition to runtime/render.py did so, unseen, until the tables were re-stamped at
    4f9a242's code. Re-stamp with tools/restamp_table.py where the kernels did not move, else re-time."""
    from runtime.decode_table import DECODE_FOLDER, decode_code
    from runtime.kernel_code import code_digest

    for path in sorted(SHIPPED_TABLE_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        assert {e["code"] for e in data["entries"]} | {data["code"]} == {code_digest()}, path.name
    for path in sorted((SHIPPED_TABLE_DIR / DECODE_FOLDER).glob("*.json")):
        assert json.loads(path.read_text())["code"] == decode_code(), path.name


def test_decide_says_which_table_bucket_and_variant_and_why(tmp_path, monkeypatch):
    import runtime.dispatch as dispatch

    monkeypatch.setenv(TABLE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(dispatch, "device_identity", lambda index: identify("NVIDIA H20", (9, 0), 78))
    d = dispatch.decide(problem(rows=16384, keys=131072, device="cuda:0"))
    assert d.gpu == "H20-78SM" and "borrowed H100-SXM-132SM" in d.table
    assert d.entry is not None and (d.entry.rows, d.entry.keys) == (16384, 131072)
    assert d.path == ("fused" if d.entry.use == "fused" else "dense") and "nearest bucket" in d.why
    text = str(d)
    assert d.entry.variant in text and "fused" in text and "dense" in text
    packed = dispatch.decide(problem(rows=16384, keys=32768, visible_keys=4096, device="cuda:0"))
    assert packed.entry.requests == 8 and "32768 keys in 8 requests" in str(packed)  # the shipped packed bucket
    assert packed.path == packed.entry.use
    # one row of 512K keys: its nearest bucket (64 rows) is fused in the shipped table, the chunk is not
    one_row = dispatch.decide(problem(rows=1, keys=524288, top_k=512, device="cuda:0"))
    assert one_row.entry.rows == 64 and one_row.entry.use == "fused"
    assert one_row.path == "dense" and "fewer than any tuned bucket's (64)" in one_row.why


def test_explain_on_cpu_tensors():
    from generator.workloads import make_workload
    from runtime import explain

    args = make_workload("random", 4, 1000, 32, 512).args()
    d = explain(*args)
    assert d.path == "dense" and "cpu" in d.why
    assert "longest row 1000 keys (the chunk's N" in str(d)  # unknown: N assumed, and it says so
    assert "longest row 700 keys (measured or told)" in str(explain(*args, max_visible_keys=700))


def test_the_dense_path_picks_its_top_k_by_the_longest_row(monkeypatch):
    from generator.workloads import make_workload
    from runtime import dense

    asked = []
    monkeypatch.setattr(dense, "dense_variant_for", lambda device, heads, top_k, longest=None: asked.append(longest))
    wl = make_workload("random", 4, 1000, 32, 512)
    dense.dense_mqa_topk(*wl.args(), validate=False)
    dense.dense_mqa_topk(*wl.args(), validate=False, max_visible_keys=300)
    dense.dense_mqa_topk(*wl.args())
    assert asked == [1000, 300, int((wl.ke - wl.ks).max())]


def test_an_entry_for_other_kernel_code_is_trusted_only_by_a_margin():
    from generator.provenance import code_digest
    from runtime.dispatch import STALE_MARGIN

    old_code = "0" * 16
    assert code_digest() != old_code and len(code_digest()) == 16
    close = entry(fused=1.0, dense=STALE_MARGIN - 0.05, variant=default_variant(32, 2048).name)
    clear = entry(fused=1.0, dense=STALE_MARGIN + 0.5, variant=default_variant(32, 2048).name)
    assert select_variant([close], "sm90a", problem()) is not None  # no code recorded: trusted as it is
    assert select_variant([replace(close, code=code_digest())], "sm90a", problem()) is not None  # this code
    assert select_variant([replace(close, code=old_code)], "sm90a", problem()) is None  # stale, close: dense
    assert select_variant([replace(clear, code=old_code)], "sm90a", problem()) is not None  # stale, clear win


def test_fused_is_chosen_only_beyond_the_measured_noise():
    assert entry(fused=1.0, dense=1.05).use == "fused"
    assert replace(entry(fused=1.0, dense=1.05), fused_spread=0.03, dense_spread=0.03).use == "dense"
    assert replace(entry(fused=1.0, dense=1.10), fused_spread=0.03, dense_spread=0.03).use == "fused"
