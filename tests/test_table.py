"""Tuned tables: file naming, nearest-bucket lookup, and the dispatch rules built on them."""

import json

import pytest
import torch

from generator.space import default_variant, rejection_reason
from generator.variant import Variant
from runtime import choose_variant
from runtime.contract import Problem
from runtime.dispatch import select_variant
from runtime.table import Entry, load_table, nearest, save_table, shipped_table_dir, table_key, table_path


def entry(heads=32, top_k=2048, rows=4096, keys=131072, fused=1.0, dense=2.0, variant=None):
    variant = variant or default_variant(heads, top_k).name
    return Entry(heads, top_k, rows, keys, variant, fused, dense)


def problem(heads=32, top_k=2048, rows=4096, keys=131072, device="cuda"):
    return Problem(rows=rows, keys=keys, heads=heads, top_k=top_k, device=torch.device(device))


def test_table_key_is_the_only_name_folding():
    assert table_key("NVIDIA H200") == "NVIDIA_H200"
    assert table_key("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3"
    assert table_path("NVIDIA H200").name == "NVIDIA_H200.json"


def test_nearest_is_by_log_distance_within_heads_and_top_k():
    entries = [entry(rows=4096, keys=32768), entry(rows=16384, keys=131072), entry(heads=64, rows=4096, keys=131072)]
    assert nearest(entries, 32, 2048, 4000, 30000).keys == 32768
    assert nearest(entries, 32, 2048, 16000, 1 << 20).keys == 131072
    assert nearest(entries, 32, 2048, 100, 70000).rows == 4096
    assert nearest(entries, 64, 2048, 16384, 32768).heads == 64
    assert nearest(entries, 64, 512, 16384, 32768) is None


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "GPU.json"
    entries = [entry(), entry(top_k=512, fused=3.0, dense=2.0)]
    save_table(path, "Some GPU", entries, {"arch": "sm90a"})
    data = json.loads(path.read_text())
    assert data["gpu"] == "Some GPU" and data["arch"] == "sm90a"
    assert {e["use"] for e in data["entries"]} == {"fused", "dense"}
    assert sorted(load_table(path), key=lambda e: e.top_k) == sorted(entries, key=lambda e: e.top_k)
    assert load_table(tmp_path / "missing.json") is None


def test_dispatch_rules():
    fused_wins, dense_wins = entry(keys=131072), entry(keys=8192, fused=2.0, dense=1.0)
    table = [fused_wins, dense_wins]
    assert select_variant(table, "sm90a", problem(keys=200_000)) == Variant.from_name(fused_wins.variant)
    assert select_variant(table, "sm90a", problem(keys=8000)) is None  # the table says dense wins there
    assert select_variant(table, "sm90a", problem(keys=8000), force_fused=True) == Variant.from_name(dense_wins.variant)
    assert select_variant(table, None, problem()) is None  # no fp8 tensor cores
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
    paths = sorted(shipped_table_dir().glob("*.json"))
    assert paths, "ship at least one tuned table"
    for path in paths:
        data = json.loads(path.read_text())
        assert path.name == f"{table_key(data['gpu'])}.json"
        for e in load_table(path):
            v = Variant.from_name(e.variant)
            assert rejection_reason(v) is None, (path.name, e.variant)
            assert v.arch == data["arch"] and (v.heads, v.top_k) == (e.heads, e.top_k)
            assert e.fused_ms > 0 and e.dense_ms > 0
