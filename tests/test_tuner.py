"""The tuner's bookkeeping, with a fake measurer standing in for the GPU."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from generator.space import neighbors, rejection_reason, starting_points, valid_variants
from generator.tune import (
    NEIGHBOR_AXES,
    TUNED_AXES,
    Bucket,
    Comparison,
    VerificationError,
    likely_candidates,
    merge_entries,
    refresh,
    run,
    tunable_choices,
    tune_bucket,
)
from runtime.defaults import default_variant, default_variants
from runtime.table import Entry, load_table
from runtime.variant import Variant

REPO = Path(__file__).resolve().parent.parent


class FakeMeasurer:
    """Time is a made-up function of the parameters; one configuration is 'wrong'."""

    def __init__(self, dense=5.0, reps=3):
        self.dense = dense
        self.reps = reps
        self.fused_calls: list[str] = []  # variants searched
        self.compared: list[str] = []  # variants settled against dense
        self.played: list[list[str]] = []  # the trials timed side by side before a pick (tune.pick)

    def dense_ms(self, bucket):
        return self.dense * (bucket.keys / 65536) ** 2  # dense loses ground as keys grow

    def time_of(self, v: Variant, bucket):
        assert rejection_reason(v) is None, "the tuner must never measure an invalid point"
        if v.stages == 2 and v.warps == 4:
            raise VerificationError("1 bad row")  # fast but wrong: must never win
        return (1.0 + 0.1 * v.stages + (0.3 if v.warps == 4 else 0.0) + v.buffer / 1e5) * bucket.keys / 65536 * (
            0.1 if (v.stages, v.warps) == (2, 4) else 1.0)

    def fused_samples(self, v: Variant, bucket):
        self.fused_calls.append(v.name)
        ms = self.time_of(v, bucket)
        for _ in range(self.reps):
            yield ms

    def compare(self, v: Variant, bucket):
        self.compared.append(v.name)
        return Comparison(self.time_of(v, bucket), 0.0, self.dense_ms(bucket), 0.0)

    def playoff(self, variants, bucket):
        from generator.timing import Timed

        self.played.append([v.name for v in variants])
        return {v.name: Timed(self.time_of(v, bucket), 0.0) for v in variants}


def test_choices_only_hold_values_some_valid_variant_uses():
    choices = tunable_choices("sm90a", 32, 2048)
    assert choices["mma"] == ["mmasync", "wgmma"]
    assert min(choices["buffer"]) >= 2048 + 128
    assert tunable_choices("sm89", 32, 2048)["mma"] == ["mmasync"]  # no wgmma off Hopper
    assert 4 not in tunable_choices("sm89", 32, 2048)["rows"]  # 128 query columns never fit mma.sync registers


def test_a_study_finds_the_best_verified_variant():
    m = FakeMeasurer()
    bucket = Bucket(32, 1024, 4096, 65536)
    built = []
    r = tune_bucket(bucket, m, "sm90a", trials=14, batch=5, build_fn=built.extend, log=lambda s: None)
    # the known-good defaults go first, the arch's own default first of all
    defaults = default_variants(32, 1024)
    assert m.fused_calls[0] == default_variant(32, 1024).name
    assert set(m.fused_calls[:len(starting_points(32, 1024))]) >= {v.name for v in defaults}
    assert len(m.fused_calls) == len(set(m.fused_calls))  # each variant measured once
    assert set(m.fused_calls) <= {v.name for v in built}  # built before measured
    assert r.best is not None and not (r.best.stages == 2 and r.best.warps == 4)
    verified = [Variant.from_name(n) for n in set(m.fused_calls)]
    measured = {v.name: m.time_of(v, bucket) for v in verified if (v.stages, v.warps) != (2, 4)}
    assert r.comparison.fused_ms == pytest.approx(min(measured.values()))
    assert r.comparison.dense_ms == pytest.approx(5.0)
    assert r.trials == 14 and m.compared == [r.best.name]  # the winner settled against dense once


def test_run_writes_and_merges_the_table(tmp_path):
    out = tmp_path / "tables"
    old = Entry(64, 512, 1024, 8192, default_variant(64, 512, mma="mmasync").name, 9.0, 1.0)  # a bucket tuned earlier
    from runtime.table import save_table, table_path
    save_table(table_path("Fake GPU", out), "Fake GPU", [old], {"arch": "sm90a"})
    buckets = [Bucket(32, 512, 4096, 32768), Bucket(32, 512, 16384, 131072)]
    results = run(buckets, FakeMeasurer(dense=1.2), "Fake GPU", "sm90a", trials=6, out_dir=out, log=lambda s: None)
    assert len(results) == 2
    entries = load_table(table_path("Fake GPU", out))
    assert len(entries) == 3 and old in entries
    data = json.loads(table_path("Fake GPU", out).read_text())
    by_keys = {e["keys"]: e for e in data["entries"] if e["heads"] == 32}
    assert by_keys[32768]["use"] == "dense"  # 0.6 ms dense beats every fake fused time there
    assert by_keys[131072]["use"] == "fused"
    assert data["arch"] == "sm90a" and "updated" in data


def test_refresh_retimes_entries_and_drops_wrong_ones(tmp_path):
    from runtime.table import save_table, table_path
    good = Entry(32, 512, 16384, 131072, default_variant(32, 512, mma="mmasync").name, 0.5, 9.0)
    wrong_variant = Variant.from_name(good.variant.replace("_s3_", "_s2_").replace("_w8_", "_w4_"))
    assert (wrong_variant.stages, wrong_variant.warps) == (2, 4)  # FakeMeasurer calls that configuration wrong
    wrong = Entry(64, 512, 4096, 32768, wrong_variant.name, 0.1, 9.0)
    save_table(table_path("Fake GPU", tmp_path), "Fake GPU", [good, wrong], {"arch": "sm90a"})
    m = FakeMeasurer(dense=0.1)  # the dense path got much faster since the table was written
    (fresh,) = refresh(m, "Fake GPU", "sm90a", tmp_path, log=lambda s: None)
    assert m.compared == [good.variant, wrong.variant]
    assert (fresh.variant, fresh.dense_ms) == (good.variant, round(m.dense_ms(Bucket(32, 512, 16384, 131072)), 4))
    assert good.use == "fused" and fresh.use == "dense"  # the crossover moved
    assert load_table(table_path("Fake GPU", tmp_path)) == [fresh]


def test_a_refresh_names_the_default_buckets_its_table_lacks_and_the_table_keeps_its_runs(tmp_path):
    from generator.tune import DEFAULT_SHAPES, default_buckets
    from runtime.table import save_table, table_meta, table_path

    held = [Entry(b.heads, b.top_k, b.rows, b.keys, default_variant(b.heads, b.top_k).name, 1.0, 2.0, requests=b.requests)
            for b in default_buckets() if b.requests == 1]  # a table from before the packed buckets
    path = table_path("Fake GPU", tmp_path)
    save_table(path, "Fake GPU", held, {"arch": "sm90a", "command": "python -m generator tune", "updated": "day 1"})
    lines = []
    refresh(FakeMeasurer(), "Fake GPU", "sm90a", tmp_path, meta={"command": "python -m generator tune --refresh",
                                                                 "started": "day 2"}, log=lines.append)
    (note,) = [s for s in lines if "not in this table" in s]
    packed = [s for s in DEFAULT_SHAPES if len(s) == 3]
    assert packed and note.startswith(f"{6 * len(packed)} bucket(s)") and note.count("--shape") == len(packed)
    assert "--shape 16384x32768x8" in note and "h32_k1024_m16384_n32768_q8" in note
    history = table_meta(path)["history"]
    assert [h["command"] for h in history] == ["python -m generator tune", "python -m generator tune --refresh"]
    lines.clear()
    refresh(FakeMeasurer(), "Fake GPU", "sm90a", tmp_path, meta={"command": "python -m generator tune --refresh",
                                                                 "started": "day 2"}, log=lines.append)
    assert len(table_meta(path)["history"]) == 2  # the same run is named once


def test_a_one_trial_study_measures_the_arch_default():
    m = FakeMeasurer()
    tune_bucket(Bucket(32, 2048, 16384, 524288), m, "sm90a", trials=1, log=lambda s: None)
    assert m.fused_calls == [default_variant(32, 2048, "sm90a").name]


def test_studies_start_from_the_known_good_points():
    m = FakeMeasurer()
    points = starting_points(32, 2048, "sm90a")
    assert {(v.gated, v.warps) for v in points} >= {(True, 12), (True, 8)}  # both gated shapes that won a bucket
    tune_bucket(Bucket(32, 2048, 16384, 524288), m, "sm90a", trials=len(points), log=lambda s: None)
    assert m.fused_calls == [v.name for v in points]


def test_neighbors_differ_in_one_axis_and_are_valid():
    v = starting_points(32, 2048, "sm90a")[1]  # the gated 2 x 2 shape
    near = neighbors(v, NEIGHBOR_AXES)
    assert near and len(set(near)) == len(near) and v not in near
    for w in near:
        assert rejection_reason(w) is None
        assert sum(getattr(w, a) != getattr(v, a) for a in TUNED_AXES) == 1
    assert {w.sample_tiles for w in near} >= {8, 16} and {w.stages for w in near} >= {2, 3}
    moved = [next(i for i, a in enumerate(NEIGHBOR_AXES) if getattr(w, a) != getattr(v, a)) for w in near]
    assert moved == sorted(moved) and moved[0] == 0  # in NEIGHBOR_AXES order
    assert {w.select_warps for w in near if w.select_warps != v.select_warps} == {3, 7}


def test_after_the_starting_points_a_study_walks_the_best_points_neighbors_then_the_model_proposes():
    from generator.design import DEFAULT_DESIGN
    from generator.search import trial_sources

    m = FakeMeasurer()
    bucket = Bucket(32, 2048, 16384, 524288)
    points = starting_points(32, 2048, "sm90a")
    best = min(points, key=lambda v: FakeMeasurer().time_of(v, bucket))
    near = neighbors(best, NEIGHBOR_AXES)[:DEFAULT_DESIGN.neighbours_afresh]  # (no table: afresh)
    assert len(near) == DEFAULT_DESIGN.neighbours_afresh == 4
    result = tune_bucket(bucket, m, "sm90a", trials=len(points) + len(near) + 4, batch=4, log=lambda s: None)
    assert m.fused_calls[:len(points) + len(near)] == [v.name for v in points] + [w.name for w in near]
    assert trial_sources(result.study) == {"start": len(points), "table": 0, "neighbour": 4, "model": 4}
    assert len(set(m.fused_calls)) == len(m.fused_calls) == len(points) + 8  # (the model's points are new ones)


def test_with_a_tables_choice_the_default_design_walks_four_neighbours_then_the_model():
    from generator.design import DEFAULT_DESIGN
    from generator.search import trial_sources
    from generator.tune import open_study, search_bucket

    bucket = Bucket(32, 2048, 16384, 524288)
    incumbent = Variant.from_name("mqa_topk_wgmma_sm90a_h32_k2048_r4_t192_w12_s2_b16384_m16")
    study = open_study(bucket, "sm90a", incumbent=incumbent, design=DEFAULT_DESIGN)
    search_bucket(study, bucket, FakeMeasurer(), "sm90a", trials=16, log=lambda s: None)
    sources = trial_sources(study)
    assert sources["table"] == 1 and sources["neighbour"] == DEFAULT_DESIGN.neighbours == 4
    assert sources["model"] == 16 - sources["start"] - 1 - 4


def test_a_retune_measures_the_tables_choice_second(tmp_path):
    bucket = Bucket(32, 1024, 16384, 131072)
    incumbent = Variant.from_name("mqa_topk_wgmma_sm90a_h32_k1024_r4_t192_w12_s2_b16384_m16")
    assert incumbent not in starting_points(32, 1024, "sm90a")
    run([bucket], FakeMeasurer(), "Fake GPU", "sm90a", trials=1, out_dir=tmp_path, log=lambda s: None)
    entry = load_table(next(tmp_path.glob("*.json")))[0]
    path = next(tmp_path.glob("*.json"))
    text = json.loads(path.read_text())
    text["entries"][0]["variant"] = incumbent.name
    path.write_text(json.dumps(text))
    m = FakeMeasurer()
    run([bucket], m, "Fake GPU", "sm90a", trials=2, out_dir=tmp_path, log=lambda s: None)
    assert m.fused_calls == [default_variant(32, 1024).name, incumbent.name]
    assert entry.variant == default_variant(32, 1024).name


def test_a_study_into_a_fresh_directory_measures_the_shipped_tables_choice_second(tmp_path, monkeypatch):
    from runtime.table import TABLE_DIR_ENV, save_table, table_path

    bucket = Bucket(32, 1024, 16384, 131072)
    shipped = Variant.from_name("mqa_topk_wgmma_sm90a_h32_k1024_r4_t192_w12_s2_b16384_m16")
    monkeypatch.setenv(TABLE_DIR_ENV, str(tmp_path / "shipped"))
    save_table(table_path("Fake GPU"), "Fake GPU", [Entry(32, 1024, 16384, 131072, shipped.name, 9.0, 12.0)], {"arch": "sm90a"})
    m = FakeMeasurer()
    run([bucket], m, "Fake GPU", "sm90a", trials=2, out_dir=tmp_path / "study", log=lambda s: None)
    assert m.fused_calls == [default_variant(32, 1024).name, shipped.name]
    assert [e.variant for e in load_table(table_path("Fake GPU"))] == [shipped.name]  # the shipped table is only read


def test_prebuilt_candidates_cover_what_a_study_measures_first(tmp_path):
    """`generator build --candidates`: the starting points, the tables' choices and their neighbours,
    for every heads and top_k, all valid, for the asked arch only."""
    from runtime.table import save_table, table_path

    chosen = replace(default_variant(32, 1024), stages=2, sample_tiles=16)
    other_arch = default_variant(64, 512, arch="sm89")
    path = table_path("Fake GPU", tmp_path)
    save_table(path, "Fake GPU", [Entry(32, 1024, 16384, 131072, chosen.name, 9.0, 12.0),
                                  Entry(64, 512, 16384, 131072, other_arch.name, 9.0, 12.0)], {"arch": "sm90a"})
    got = set(likely_candidates("sm90a", [path]))
    assert all(v.arch == "sm90a" and rejection_reason(v) is None for v in got)
    for h in (32, 64):
        for k in (512, 1024, 2048):
            assert set(starting_points(h, k, "sm90a")) <= got
    assert chosen in got and set(neighbors(chosen, NEIGHBOR_AXES)) <= got
    assert other_arch not in got
    # nothing beyond those: without a table only the starting points
    assert set(likely_candidates("sm90a", [])) == {v for h in (32, 64) for k in (512, 1024, 2048)
                                                     for v in starting_points(h, k, "sm90a")}


def test_time_budget_starts_no_more_buckets_even_within_a_wave(tmp_path, monkeypatch):
    """A wave of long buckets runs for minutes (on the H200 on 2026-12-06 a run with an 8-minute budget
    was still in its wave when its job's limit killed it at 8.6 minutes): once the budget is spent no
    bucket is started, in a wave either; those started are finished and settled, the first always runs."""
    import generator.tune as tune

    buckets = [Bucket(32, 512, 4096, 32768), Bucket(64, 512, 4096, 32768), Bucket(32, 512, 512, 32768)]
    monkeypatch.setattr(tune, "WAVE", 2)
    logs = []
    results = run(buckets, FakeMeasurer(), "Fake GPU", "sm90a", trials=3, out_dir=tmp_path, time_budget_s=0.0,
                  log=logs.append)
    assert [r.bucket for r in results] == buckets[:1] and [s for s in logs if "budget" in s] == [
        "time budget of 0 s spent; 2 buckets left untuned"]
    assert all(r.trials == 3 for r in results)  # (settled on its whole budget of trials)
    everything = run(buckets, FakeMeasurer(), "Fake GPU", "sm90a", trials=3, out_dir=tmp_path / "b", time_budget_s=60.0,
                     log=lambda s: None)
    assert [r.bucket for r in everything] == buckets


def test_with_a_kept_storage_the_budget_stops_a_wave_between_buckets_and_resume_goes_on(tmp_path, monkeypatch):
    """A wave of long buckets ran minutes past the budget into its job's limit (the H100's default run
    on 2026-12-06: killed twice, the second time with a batch of asked trials out). Where the studies
    are kept (--storage), the buckets a wave searched but did not settle are left to --resume once the
    budget is spent, the trials asked for them released unmeasured (their points free again); the
    resumed run settles each bucket on its whole budget of measured trials."""
    from types import SimpleNamespace

    from optuna.trial import TrialState

    import generator.tune as tune
    from generator.study import counts
    from generator.workers import storage_for

    clock = [0.0]

    class Clocked(FakeMeasurer):  # each candidate measured takes a second of the run's time
        def fused_samples(self, v, bucket):
            clock[0] += 1.0
            return super().fused_samples(v, bucket)

    monkeypatch.setattr(tune, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(tune, "WAVE", 3)
    buckets = [Bucket(32, 512, 4096, 32768), Bucket(64, 512, 4096, 32768), Bucket(32, 512, 512, 32768)]
    url = f"journal:{tmp_path / 'journal.log'}"
    logs = []
    # (a budget the wave's searches up to the model's turn stay within: the third starts by 20 s)
    first = run(buckets, Clocked(), "Fake GPU", "sm90a", trials=12, out_dir=tmp_path, time_budget_s=20.0,
                storage=storage_for(url), log=logs.append)
    assert [r.bucket for r in first] == buckets[:1] and [s for s in logs if "budget" in s] == [
        "time budget of 20 s spent; 2 buckets left untuned (2 of them part-searched: --resume goes on from their trials)"]
    storage = storage_for(url)
    released = [t for b in buckets[1:] for t in tune.tuning_study(b, "sm90a", storage, [None], "Fake GPU",
                                                                  tune.DEFAULT_DESIGN, False, 12).trials
                if "reclaimed" in t.user_attrs]
    assert released and all(t.state == TrialState.FAIL for t in released)
    rest = run(buckets[1:], Clocked(), "Fake GPU", "sm90a", trials=12, out_dir=tmp_path, storage=storage, log=lambda s: None)
    assert [r.bucket for r in rest] == buckets[1:] and all(r.trials == 12 for r in rest)
    assert all(counts(r.study)["running"] == 0 and counts(r.study)["measured"] == 12 for r in rest)
    assert sum(counts(r.study)["reclaimed"] for r in rest) == len(released)  # (not measured, not counted)


def test_a_waves_model_proposals_compile_in_one_build_after_every_bucket_reached_the_models_turn(tmp_path):
    """run searches a wave's buckets up to the model's turn (what first_candidates compiled), then
    compiles the model's first proposals of all of them at once: one nvcc round for the wave."""
    from generator.search import trial_sources
    from generator.tune import first_candidates

    buckets = [Bucket(32, 2048, 4096, 32768), Bucket(32, 2048, 16384, 131072), Bucket(64, 2048, 16384, 131072)]
    compiled = set(first_candidates(buckets, "sm90a", []))
    calls = []

    def build_fn(variants):
        new = [v for v in variants if v not in compiled]
        if new:
            calls.append(new)
        compiled.update(variants)

    results = run(buckets, FakeMeasurer(), "Fake GPU", "sm90a", trials=12, out_dir=tmp_path, build_fn=build_fn,
                  log=lambda s: None)
    model = {Variant.from_name(t.user_attrs["variant"]) for r in results for t in r.study.trials
             if t.system_attrs.get("source") == "model"}
    assert all(trial_sources(r.study)["model"] == 2 for r in results)  # (12 - 6 starting points - 4 neighbours, afresh)
    assert sum(1 for new in calls if model & set(new)) == 1  # one nvcc round for the three buckets' model points
    assert all(r.search_s >= 0 and r.trials == 12 for r in results)
    from runtime.table import table_meta, table_path

    assert "wave_build_s" in table_meta(table_path("Fake GPU", tmp_path))  # (the shared builds, apart from tune_s)


def test_tune_compiles_first_what_each_study_measures_first(tmp_path):
    from generator.tune import first_candidates, prebuild
    from runtime.build import BuildError
    from runtime.table import save_table, table_path

    bucket, other = Bucket(32, 512, 4096, 32768), Bucket(64, 2048, 4096, 32768)
    choice = neighbors(default_variant(32, 512), NEIGHBOR_AXES)[0]
    path = table_path("Fake GPU", tmp_path)
    save_table(path, "Fake GPU", [Entry(32, 512, 4096, 32768, choice.name, 1.0, 2.0)], {"arch": "sm90a"})
    got = set(first_candidates([bucket, other], "sm90a", [path]))
    assert set(starting_points(32, 512, "sm90a")) | set(starting_points(64, 2048, "sm90a")) <= got
    assert choice in got and set(neighbors(choice, NEIGHBOR_AXES)) <= got
    assert got == set(starting_points(32, 512, "sm90a")) | set(starting_points(64, 2048, "sm90a")) | {choice} | set(
        neighbors(choice, NEIGHBOR_AXES))  # nothing of buckets not being tuned
    built, logs = [], []
    seconds = prebuild(sorted(got, key=lambda v: v.name), built.append, logs.append)
    assert built == [sorted(got, key=lambda v: v.name)] and str(len(got)) in logs[0]
    assert seconds >= 0 and logs[1].startswith("0 of them compiled in")  # (the stand-in compiles nothing)

    def failing(variants):
        raise BuildError("nvcc not found")
    prebuild([choice], failing, logs.append)  # a failed build is left to the search
    assert "not all of them built" in logs[-2] and "found built" not in logs[-1]


def test_resume_tunes_only_the_buckets_the_table_lacks_for_this_code_or_settled_short(tmp_path):
    from generator.provenance import code_digest
    from generator.tune import untuned
    from runtime.table import save_table, table_path

    done, stale, missing = Bucket(32, 512, 4096, 32768), Bucket(64, 512, 4096, 32768), Bucket(32, 512, 16384, 131072, 8)
    entry = Entry(32, 512, 4096, 32768, default_variant(32, 512).name, 1.0, 2.0, code=code_digest())
    path = table_path("Fake GPU", tmp_path)
    save_table(path, "Fake GPU", [entry, replace(entry, heads=64, variant=default_variant(64, 512).name,
                                                 code="older-kernels")], {"arch": "sm90a"})
    assert untuned([done, stale, missing], path) == [stale, missing]  # measured for other code: tuned again
    assert untuned([done, missing], tmp_path / "none.json") == [done, missing]
    save_table(path, "Fake GPU", [replace(entry, trials=12), replace(entry, rows=16384, keys=131072, requests=8, trials=9)],
               {"arch": "sm90a"})
    assert untuned([done, missing], path, trials=12) == [missing]  # settled on 9 of 12 trials: searched again
    assert untuned([done, missing], path, trials=9) == []


def test_a_bucket_settled_short_starts_again_from_the_table_the_uncut_study_started_from(tmp_path):
    from generator.tune import first_candidates, table_choice
    from runtime.table import save_table

    bucket = Bucket(64, 2048, 16384, 1048576)
    short_pick, shipped_pick = neighbors(default_variant(64, 2048), NEIGHBOR_AXES)[:2]
    own, shipped = tmp_path / "own" / "G.json", tmp_path / "shipped" / "G.json"
    entry = Entry(64, 2048, 16384, 1048576, short_pick.name, 1.0, 2.0, trials=7)
    save_table(own, "G", [entry], {"arch": "sm90a"})
    save_table(shipped, "G", [replace(entry, variant=shipped_pick.name, trials=12)], {"arch": "sm90a"})
    assert table_choice(bucket, [own, shipped], trials=12) == shipped_pick  # its 7 trials: cut short
    assert table_choice(bucket, [own, shipped], trials=7) == short_pick  # settled: the run's own pick
    assert table_choice(bucket, [own, shipped]) == short_pick
    assert table_choice(bucket, [own, None], trials=12) == short_pick  # nothing settled: the short pick, not none
    assert shipped_pick in first_candidates([bucket], "sm90a", [own, shipped], trials=12)


def test_a_stored_study_resumes(tmp_path):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    bucket = Bucket(64, 2048, 4096, 65536)
    m1 = FakeMeasurer()
    tune_bucket(bucket, m1, "sm90a", trials=5, storage=storage, log=lambda s: None)
    m2 = FakeMeasurer()
    r = tune_bucket(bucket, m2, "sm90a", trials=8, storage=storage, log=lambda s: None)
    assert len(m2.fused_calls) <= 3  # only the trials the stored study lacked
    assert r.best is not None


def test_merge_replaces_same_bucket_only():
    a = Entry(32, 512, 1, 2, "x", 1.0, 2.0)
    b = Entry(32, 512, 1, 2, "y", 0.5, 2.0)
    c = Entry(32, 512, 1, 4, "z", 1.0, 2.0)
    assert sorted(merge_entries([a, c], [b]), key=lambda e: e.keys) == [b, c]
    packed = Entry(32, 512, 1, 2, "p", 1.0, 2.0, requests=2)  # another bucket: the same chunk size, packed
    assert sorted(merge_entries([a, c], [packed]), key=lambda e: (e.keys, e.requests)) == [a, packed, c]


def test_shapes_name_packed_buckets():
    from generator.tune import DEFAULT_SHAPES, default_buckets, parse_shapes

    assert parse_shapes(["4096x32768", "16384x32768x8"]) == ((4096, 32768), (16384, 32768, 8))
    for bad in ("16384x32768x3", "4096", "0x8192", "axb"):
        with pytest.raises(SystemExit, match="--shape"):
            parse_shapes([bad])
    packed = Bucket(32, 512, 16384, 32768, 8)
    assert packed.name == "h32_k512_m16384_n32768_q8" and packed.longest_row == 4096
    assert Bucket(32, 512, 16384, 32768).name == "h32_k512_m16384_n32768"
    assert packed in default_buckets(shapes=DEFAULT_SHAPES)
    from generator.tune import BucketResult

    e = BucketResult(packed, default_variant(32, 512), Comparison(1.0, 0.0, 2.0, 0.0), 12, 0, 0).entry()
    assert e.requests == 8 and Bucket.of(e) == packed  # (what --refresh re-times)


def test_tune_without_a_gpu_says_what_to_do_instead():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([sys.executable, "-m", "generator", "tune"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr and "python -m generator build --shipped" in proc.stderr
    replay = next(line.split("--replay ")[1].strip() for line in proc.stderr.splitlines() if "--replay" in line)
    assert (REPO / replay).exists()  # (the replay it suggests runs in a checkout)



class SlowOnes(FakeMeasurer):
    """Seven timings a candidate; counts how many each candidate was asked for."""

    def __init__(self, slow: set[str], **kw):
        super().__init__(reps=7, **kw)
        self.slow = slow
        self.timings: dict[str, int] = {}

    def fused_samples(self, v, bucket):
        self.fused_calls.append(v.name)
        ms = self.time_of(v, bucket) * (3.0 if v.name in self.slow else 1.0)
        for _ in range(self.reps):
            self.timings[v.name] = self.timings.get(v.name, 0) + 1
            yield ms


def test_trials_within_three_percent_of_the_best_are_timed_side_by_side_before_the_pick():
    """Timed one after another a trial can read 1% fast (the card cooler after its check); the
    finalists timed in the same rounds decide, and one more than 3% off never plays."""
    from generator.timing import Timed
    from generator.tune import PLAYOFF_MOST, PLAYOFF_WITHIN, finalists, open_study

    bucket = Bucket(32, 2048, 16384, 131072)
    a, b, c, d = starting_points(32, 2048, "sm90a")[:4]
    alone = {a.name: 1.00, b.name: 1.01, c.name: 1.02, d.name: 1.10}  # (their trials' timings)
    side_by_side = {a.name: 1.03, b.name: 1.00, c.name: 1.01}

    class Cooler(FakeMeasurer):
        def fused_samples(self, v, bucket):
            for _ in range(self.reps):
                yield alone[v.name]

        def playoff(self, variants, bucket):
            self.played.append([v.name for v in variants])
            return {v.name: Timed(side_by_side[v.name], 0.0) for v in variants}

    m, lines = Cooler(), []
    r = tune_bucket(bucket, m, "sm90a", trials=4, log=lines.append)
    assert m.played == [[a.name, b.name, c.name]] and r.best == b and m.compared == [b.name]
    assert any("3 trials within 3% of the best, timed side by side" in s and s.endswith(f"taken: {b.name}")
               for s in lines)
    assert PLAYOFF_WITHIN == 0.03 and PLAYOFF_MOST == 3
    study = open_study(bucket, "sm90a")  # (an empty study: nothing to pick)
    assert finalists(study) == []


def test_a_warmed_measurer_runs_a_candidate_back_to_back_for_warm_ms_before_its_timings(monkeypatch):
    """GpuMeasurer(warm_ms=): the warm-up runs until that much of the candidate's own time has passed
    (tools/rerun_fastest.sh measures whether that steadies a recording); by default one run."""
    import generator.timing as timing
    from generator.tune import GpuMeasurer

    runs = []
    monkeypatch.setattr(timing, "event_ms", lambda fn, hide_launch=False: (fn(), 3.0)[1])
    monkeypatch.setattr(GpuMeasurer, "_verified", lambda self, v, b: lambda: runs.append(1))
    bucket, v = Bucket(32, 2048, 16384, 131072), starting_points(32, 2048, "sm90a")[0]
    assert list(GpuMeasurer(warm_ms=10).fused_samples(v, bucket)) == [3.0] * 7
    assert len(runs) == 4 + 7  # 3 + 3 + 3 + 3 >= 10 ms of warm-up
    runs.clear()
    assert len(list(GpuMeasurer().fused_samples(v, bucket))) == 7 and len(runs) == 1 + 7


def test_the_side_by_side_timing_alternates_the_finalists_round_by_round(monkeypatch):
    import generator.timing as timing
    from generator.tune import GpuMeasurer

    order = []
    monkeypatch.setattr(timing, "event_ms", lambda fn, hide_launch=False: fn())
    monkeypatch.setattr(GpuMeasurer, "_verified", lambda self, v, b: lambda: order.append(v.name) or float(len(v.name)))
    bucket, finals = Bucket(32, 2048, 16384, 131072), starting_points(32, 2048, "sm90a")[:3]
    timed = GpuMeasurer().playoff(finals, bucket, reps=4)
    names = [v.name for v in finals]
    assert order == names + names * 4  # a warm-up of each, then each once a round
    assert {n: t.ms for n, t in timed.items()} == {n: float(len(n)) for n in names}


def test_a_study_with_one_trial_near_the_best_plays_off_nothing():
    m = FakeMeasurer()
    bucket = Bucket(32, 1024, 4096, 65536)
    first = starting_points(32, 1024, "sm90a")[0]
    r = tune_bucket(bucket, m, "sm90a", trials=1, log=lambda s: None)
    assert r.best == first and m.played == [] and m.compared == [first.name]


def test_a_hopeless_candidate_is_stopped_on_its_first_timings():
    bucket = Bucket(32, 2048, 16384, 524288)
    first, second = starting_points(32, 2048, "sm90a")[:2]
    m = SlowOnes(slow={second.name})
    r = tune_bucket(bucket, m, "sm90a", trials=2, log=lambda s: None)
    assert m.timings == {first.name: 7, second.name: 2}  # three times the best: stopped after two timings
    assert r.trials == 2 and r.pruned == 1 and r.best == first


def test_after_its_known_points_and_neighbours_the_study_hands_over_to_optuna_s_sampler():
    import optuna

    from generator.search import KnownGoodSampler
    from generator.tune import counts, search_bucket

    bucket = Bucket(32, 1024, 4096, 65536)
    known = default_variant(32, 1024)
    sampler = KnownGoodSampler([known], lambda v: [], optuna.samplers.TPESampler(seed=3))
    study = optuna.create_study(sampler=sampler)
    m = FakeMeasurer()
    search_bucket(study, bucket, m, "sm90a", trials=6, log=lambda s: None)
    assert m.fused_calls[0] == known.name and len(m.fused_calls) == 6
    assert len(set(m.fused_calls)) == 6  # the model-based points skip what was measured
    assert counts(study)["measured"] == 6


def test_entries_record_their_provenance_and_the_table_its_code(tmp_path):
    from generator.provenance import code_digest
    from runtime.table import table_path

    run([Bucket(32, 512, 16384, 131072)], FakeMeasurer(), "Fake GPU", "sm90a", trials=3, out_dir=tmp_path,
        meta={"gpu": "Fake", "driver": "1.0"}, log=lambda s: None)
    data = json.loads(table_path("Fake GPU", tmp_path).read_text())
    (e,) = data["entries"]
    assert data["code"] == e["code"] == code_digest() and data["driver"] == "1.0"
    assert e["trials"] == 3 and "two-sided verifier" in e["verified"] and e["measured"].startswith("20")
    assert {"fused_spread", "dense_spread"} <= set(e)


def test_the_software_a_table_records_is_read_without_a_gpu():
    """tune's table records torch, its CUDA and nvcc (generator.provenance.software_record): an import
    of it that broke made every GPU run of `tune` fail before its first trial."""
    import torch

    from generator.provenance import software_record
    from runtime.toolchain import nvcc_version_or_none

    record = software_record()
    assert record["torch"] == torch.__version__ and record.get("nvcc") == nvcc_version_or_none()


def test_a_stored_study_is_never_reused_for_another_gpu(tmp_path):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    bucket = Bucket(64, 2048, 4096, 65536)
    tune_bucket(bucket, FakeMeasurer(), "sm90a", trials=3, storage=storage, gpu="H200-132SM", log=lambda s: None)
    other = FakeMeasurer()
    tune_bucket(bucket, other, "sm90a", trials=3, storage=storage, gpu="H100-SXM-132SM", log=lambda s: None)
    assert len(other.fused_calls) == 3  # measured afresh, not read from the H200's study


WORKER = """
import sys, time
sys.path.insert(0, {tests!r}); sys.path.insert(0, {repo!r})
from test_tuner import FakeMeasurer
from generator.tune import Bucket, open_study, search_bucket
from generator.workers import storage_for

class Slow(FakeMeasurer):
    def fused_samples(self, v, bucket):
        time.sleep(0.05)  # long enough for the other worker to ask meanwhile
        yield from super().fused_samples(v, bucket)

m = Slow()
bucket = Bucket(32, 1024, 4096, 65536)
study = open_study(bucket, "sm90a", storage_for({storage!r}), gpu="Fake")
# Start together: a worker that finished importing seconds before the other (a loaded 2-core CI
# machine) would otherwise take every trial before the other asks for one.
import os, pathlib
ready = pathlib.Path({ready!r})
(ready / str(os.getpid())).touch()
deadline = time.time() + 120
while len(list(ready.iterdir())) < 2 and time.time() < deadline:
    time.sleep(0.01)
search_bucket(study, bucket, m, "sm90a", trials=16, batch=2, log=lambda s: None)
print(" ".join(m.fused_calls))
"""


@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_two_workers_share_one_study_without_measuring_a_variant_twice(tmp_path, kind, request):
    """Two worker processes, one storage: a journal file (one host), or a PostgreSQL server (several
    hosts, as README tells them to share a study; a private server started for the test)."""
    from generator.search import trial_workers
    from generator.tune import counts, open_study, record, settle_bucket
    from generator.workers import storage_for
    from runtime.table import load_table, table_path

    storage = f"journal:{tmp_path / 'journal.log'}" if kind == "journal" else request.getfixturevalue("postgres_url")
    (tmp_path / "ready").mkdir()
    script = WORKER.format(tests=str(REPO / "tests"), repo=str(REPO), storage=storage, ready=str(tmp_path / "ready"))
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    measured = [out.split() for out, _ in outs]
    assert all(measured), measured  # both workers measured
    every = measured[0] + measured[1]
    assert len(every) == len(set(every)), "a variant was measured twice"
    bucket = Bucket(32, 1024, 4096, 65536)
    study = open_study(bucket, "sm90a", storage_for(storage), gpu="Fake")
    assert 16 <= counts(study)["measured"] <= 17  # (a worker may start one more as the other finishes)
    lines: list[str] = []
    result = settle_bucket(study, bucket, FakeMeasurer(), log=lines.append)  # the table, settled from the study
    workers = trial_workers(study)  # each trial's worker recorded: the two processes, what each measured
    assert sorted(workers.values()) == sorted(map(len, measured)) and len(workers) == 2
    assert all(f":{p.pid}" in w for w, p in zip(sorted(workers, key=lambda w: int(w.rsplit(":", 1)[1])),
                                                sorted(procs, key=lambda p: p.pid)))
    assert "measured by 2 workers" in lines[-1]
    record(table_path("Fake", tmp_path), "Fake", "sm90a", result, None, log=lambda s: None)
    (entry,) = load_table(table_path("Fake", tmp_path))
    assert entry.variant == result.best.name and entry.trials == counts(study)["measured"]


def test_workers_get_this_command_with_the_shared_storage():
    from generator.workers import worker_argv

    argv = ["--heads", "32", "--gpus", "all", "--storage=sqlite:///x.db", "--workers-per-gpu", "2", "--trials", "4"]
    assert worker_argv(argv, "journal:/t/j.log") == ["--heads", "32", "--trials", "4", "--worker", "--storage",
                                                     "journal:/t/j.log"]


def test_the_report_lists_every_bucket(tmp_path):
    from generator.report import write_report
    from runtime.table import table_path

    results = run([Bucket(32, 512, 4096, 32768), Bucket(32, 512, 16384, 131072)], FakeMeasurer(dense=1.2),
                  "Fake GPU", "sm90a", trials=3, out_dir=tmp_path, log=lambda s: None)
    text = write_report(table_path("Fake GPU", tmp_path), results).read_text()
    assert "H = 32, top-512" in text and "h32_k512_m4096_n32768" in text and "h32_k512_m16384_n131072" in text
    assert text.count("| fused |") + text.count("| dense |") == 2


def test_a_landscape_records_each_point_once_and_a_second_run_goes_on_where_the_first_stopped(tmp_path):
    from generator.regret import Landscape, record

    bucket, path = Bucket(32, 2048, 16384, 524288), tmp_path / "landscape.jsonl"
    space = [v for v in valid_variants(arch="sm90a", heads=32, top_k=2048)]
    m = FakeMeasurer()
    assert record(bucket, m, space[:40], path, log=lambda s: None) == 40
    assert record(bucket, m, space[:60], path, log=lambda s: None) == 20  # (the first 40 are in the file)
    assert len(m.fused_calls) == len(set(m.fused_calls)) == 60
    points = Landscape.read(path).points[bucket]
    wrong = [v.name for v in space[:60] if (v.stages, v.warps) == (2, 4)]
    assert wrong and all(points[n] is None for n in wrong)  # a wrong point is recorded as such, never timed
    assert all(points[v.name] == [m.time_of(v, bucket)] * 3 for v in space[:60] if v.name not in wrong)


def test_a_recording_in_parts_measures_every_point_once(tmp_path):
    """--part K/N splits a bucket's points into N even parts that together are the whole (each part one
    call of a machine lent a call at a time), in whatever order they run; a bad part is refused by name."""
    from generator.regret import Landscape, points_to_record, record

    bucket, path = Bucket(32, 2048, 16384, 131072), tmp_path / "landscape.jsonl"
    space = valid_variants(arch="sm90a", heads=32, top_k=2048)
    parts = [points_to_record(space, 0, f"{k}/3") for k in (3, 1, 2)]
    assert sorted(v.name for part in parts for v in part) == sorted(v.name for v in space)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    m = FakeMeasurer()
    for part in parts:
        record(bucket, m, part, path, log=lambda s: None)
    assert set(Landscape.read(path).points[bucket]) == {v.name for v in space}
    assert len(m.fused_calls) == len(set(m.fused_calls))
    assert len(points_to_record(space, 60, "2/2")) == 30  # (a sample, then its part)
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(SystemExit, match="--part"):
            points_to_record(space, 0, bad)


def test_a_recording_times_a_hopeless_point_twice_only(tmp_path):
    from generator.regret import HOPELESS, Landscape, record

    bucket, path = Bucket(32, 2048, 16384, 524288), tmp_path / "landscape.jsonl"

    class Slow(FakeMeasurer):  # the second point is 10x the first
        def time_of(self, v, bucket):
            return 10.0 if v == space[1] else 1.0

    space = [v for v in valid_variants(arch="sm90a", heads=32, top_k=2048) if (v.stages, v.warps) != (2, 4)][:3]
    record(bucket, Slow(reps=7), space, path, log=lambda s: None)
    points = Landscape.read(path).points[bucket]
    assert 10.0 > HOPELESS and points[space[1].name] == [10.0, 10.0]
    assert points[space[0].name] == points[space[2].name] == [1.0] * 7


def test_searches_replayed_over_the_whole_space_find_its_best_and_say_where_their_trials_came_from(tmp_path):
    from generator.regret import DESIGNS, Landscape, markdown, record, replay, summary

    bucket, path = Bucket(32, 2048, 16384, 524288), tmp_path / "landscape.jsonl"
    space = valid_variants(arch="sm90a", heads=32, top_k=2048)
    record(bucket, FakeMeasurer(), space, path, log=lambda s: None)
    landscape = Landscape.read(path)
    best_name, best_ms = landscape.best(bucket)
    assert best_ms == min(FakeMeasurer().time_of(v, bucket) for v in space if (v.stages, v.warps) != (2, 4))
    rows = []
    for name in ("default", "random", "tpe"):
        runs = replay(landscape, bucket, DESIGNS[name], range(3), trials=12)
        assert len(runs) == 3 and all(r.regret >= 0 and r.measured == 12 and r.unrecorded == 0 for r in runs)
        assert all(landscape.median(bucket, r.pick) == pytest.approx(best_ms * (1 + r.regret)) for r in runs)
        rows.append(summary(bucket, landscape, name, runs))
    default, random_search, tpe = rows
    assert default["sources"]["start"] > 0 and random_search["sources"] == {**random_search["sources"], "start": 0}
    assert len(set(random_search["picks"])) > 1  # the seeds change what a run proposes
    assert "h32_k2048_m16384_n524288" in markdown(rows) and "| random |" in markdown(rows)


def test_a_resampled_replay_times_each_run_anew_and_judges_its_pick_by_the_recorded_medians(tmp_path):
    import json

    from generator.regret import DESIGNS, Landscape, replay
    from generator.space import starting_points

    bucket, path = Bucket(32, 2048, 16384, 131072), tmp_path / "landscape.jsonl"
    first, second, *others = starting_points(32, 2048)
    timings = {first: [1.0] * 4 + [1.3] * 3, second: [1.05] * 7, **{v: [2.0] * 7 for v in others}}
    path.write_text("".join(json.dumps({"bucket": [32, 2048, 16384, 131072, 1], "variant": v.name, "ms": ms}) + "\n"
                            for v, ms in timings.items()))
    landscape = Landscape.read(path)
    design = DESIGNS["neighbours"]  # (its proposals do not depend on the seed)
    fixed = replay(landscape, bucket, design, range(20), trials=len(timings))
    assert {r.pick for r in fixed} == {first.name} and all(r.regret == 0 for r in fixed)
    resampled = replay(landscape, bucket, design, range(20), trials=len(timings), resample=True)
    # (the first point's median of 7 draws is 1.3 where 4 or more of them are: about 1 run in 3)
    assert {r.pick for r in resampled} == {first.name, second.name}
    assert {round(r.regret, 6) for r in resampled} == {0.0, 0.05}
    # A point's first timing (the card not yet at its power cap) is not drawn: not noise, a position.
    import random

    from generator.regret import Replayed
    landscape.points[bucket][first.name] = [0.5] + [1.0] * 6
    assert set(Replayed(landscape, random.Random(0)).fused_samples(first, bucket)) == {1.0}


def test_a_replay_over_a_sample_of_the_space_counts_the_points_it_lacked(tmp_path):
    from generator.regret import DESIGNS, Landscape, markdown, record, replay, summary

    bucket, path = Bucket(32, 2048, 16384, 524288), tmp_path / "landscape.jsonl"
    record(bucket, FakeMeasurer(), valid_variants(arch="sm90a", heads=32, top_k=2048)[::5], path, log=lambda s: None)
    landscape = Landscape.read(path)
    runs = replay(landscape, bucket, DESIGNS["random"], range(2), trials=12)
    assert sum(r.unrecorded for r in runs) > 0  # a failed trial each, not a time
    space = len(valid_variants(arch="sm90a", heads=32, top_k=2048))
    row = summary(bucket, landscape, "random", runs)  # its table says the regret is over part of the space
    assert f"| {len(landscape.points[bucket])} of {space} |" in markdown([row])


def test_a_design_limits_the_neighbours_and_hands_the_rest_to_the_model():
    from generator.design import Design
    from generator.search import trial_sources
    from generator.tune import open_study, search_bucket

    bucket = Bucket(32, 2048, 16384, 524288)
    study = open_study(bucket, "sm90a", design=Design(neighbours=2))
    search_bucket(study, bucket, FakeMeasurer(), "sm90a", trials=14, log=lambda s: None)
    sources = trial_sources(study)
    known = len(starting_points(32, 2048))
    assert sources == {"start": known, "table": 0, "neighbour": 2, "model": 14 - known - 2}


def test_the_report_draws_its_plots_where_matplotlib_is(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'report' extra): the report is text only")
    from generator.report import write_report
    from runtime.table import table_path

    results = run([Bucket(32, 512, 4096, 32768)], FakeMeasurer(), "Fake GPU", "sm90a", trials=10, out_dir=tmp_path,
                  log=lambda s: None)
    text = write_report(table_path("Fake GPU", tmp_path), results).read_text()
    pngs = {p.name for p in tmp_path.glob("*.png")}
    assert {"Fake_GPU-h32-k512.png", "Fake_GPU-h32_k512_m4096_n32768-history.png"} <= pngs
    assert all(name in text for name in pngs)


def test_entries_and_the_report_say_where_the_gpu_time_went(tmp_path, monkeypatch):
    """Each entry records its bucket's wall seconds (search and settling; a refresh: its re-timing),
    and the report sums this run's and names the buckets that took most."""
    import generator.tune as tune
    from generator.report import write_report
    from runtime.table import table_path

    clock = [0.0]
    monkeypatch.setattr(tune.time, "monotonic", lambda: clock[0])

    class Clocked(FakeMeasurer):  # a fused timing takes a second per chunk key in 32K; settling 10 s
        def fused_samples(self, v, bucket):
            for ms in super().fused_samples(v, bucket):
                clock[0] += bucket.keys / 32768
                yield ms

        def compare(self, v, bucket):
            clock[0] += 10
            return super().compare(v, bucket)

    small, large = Bucket(32, 512, 4096, 32768), Bucket(32, 512, 16384, 131072)
    results = run([small, large], Clocked(dense=1.2), "Fake GPU", "sm90a", trials=3, out_dir=tmp_path, log=lambda s: None)
    entries = {e.keys: e for e in load_table(table_path("Fake GPU", tmp_path))}
    for r in results:
        samples = 3 * r.trials * r.bucket.keys / 32768  # (FakeMeasurer: 3 timings a candidate, none stopped early)
        assert (r.search_s, r.settle_s) == (pytest.approx(samples), 10)
        assert entries[r.bucket.keys].tune_s == pytest.approx(samples + 10, abs=0.05)
    text = write_report(table_path("Fake GPU", tmp_path), results).read_text()
    total = sum(r.search_s + r.settle_s for r in results)
    assert f"This run spent {total:.0f} s on 2 buckets; most: {large.name}" in text
    (fresh, _) = sorted(refresh(Clocked(dense=1.2), "Fake GPU", "sm90a", tmp_path, log=lambda s: None), key=lambda e: e.keys)
    assert fresh.tune_s == 10  # re-timed only


def test_every_trial_says_where_its_point_came_from(tmp_path):
    """start (the starting points), table (the table's current choice), neighbour (one axis from the
    best so far), model (TPE): recorded per trial, counted into the result, the table entry, the
    report and the console line."""
    from runtime.table import table_path

    bucket = Bucket(32, 512, 16384, 131072)
    starts = starting_points(bucket.heads, bucket.top_k, "sm90a")
    incumbent = next(v for v in neighbors(starts[0], NEIGHBOR_AXES) if v not in starts and rejection_reason(v) is None)
    lines = []
    trials = len(starts) + 1 + 4
    r = tune_bucket(bucket, FakeMeasurer(), "sm90a", trials=trials, incumbent=incumbent, log=lines.append)
    sources = r.trial_sources
    assert sum(sources.values()) == r.trials == trials
    assert sources["start"] == len(starts) and sources["table"] == 1 and sources["neighbour"] >= 1
    assert any("came from:" in line and f"{sources['start']} start" in line for line in lines)
    run([bucket], FakeMeasurer(), "Fake GPU", "sm90a", trials=trials, out_dir=tmp_path, log=lambda s: None)
    (e,) = json.loads(table_path("Fake GPU", tmp_path).read_text())["entries"]
    assert set(e["trial_sources"]) == {"start", "table", "neighbour", "model"} and sum(e["trial_sources"].values()) == trials
    assert load_table(table_path("Fake GPU", tmp_path))[0].trial_sources == e["trial_sources"]


def test_model_trials_are_counted_as_the_models():
    """With the known points and their neighbours used up, the rest of the budget is TPE's: every
    trial past them is counted as "model"."""
    from generator.search import trial_sources
    from generator.tune import open_study, search_bucket

    bucket = Bucket(32, 512, 16384, 131072)
    study = open_study(bucket, "sm90a")
    study.sampler._neighbours = lambda v: []  # no neighbours: the model proposes after the starting points
    search_bucket(study, bucket, FakeMeasurer(), "sm90a", trials=len(starting_points(32, 512, "sm90a")) + 3,
                  log=lambda s: None)
    sources = trial_sources(study)
    assert sources["model"] == 3 and sources["neighbour"] == 0


def test_a_candidate_that_does_not_build_or_run_fails_alone_and_the_run_goes_on():
    from runtime.toolchain import BuildError

    bucket = Bucket(32, 512, 16384, 131072)
    starts = starting_points(bucket.heads, bucket.top_k, "sm90a")
    broken, crashing = starts[1], starts[2]

    def build_fn(variants):
        if broken in variants:
            raise BuildError(f"nvcc failed for ['{broken.name}']:\nptxas error: too many resources")

    class Crashing(FakeMeasurer):
        def fused_samples(self, v, bucket):
            if v == crashing:
                raise RuntimeError("launch failed: an illegal memory access")
            yield from super().fused_samples(v, bucket)

    lines = []
    r = tune_bucket(bucket, Crashing(), "sm90a", trials=len(starts) + 2, build_fn=build_fn, log=lines.append)
    assert r.best is not None and r.best not in (broken, crashing)
    assert r.failed == 2 and r.trials == len(starts) + 2  # both failed trials count, the run used its budget
    reasons = {t.user_attrs["variant"]: t.user_attrs["failed"] for t in r.study.get_trials() if "failed" in t.user_attrs}
    assert reasons[broken.name].startswith("build: nvcc failed") and reasons[crashing.name].startswith("run: RuntimeError")
    assert any("BUILD FAILED" in line for line in lines) and any("FAILED (run:" in line for line in lines)


def test_a_dead_workers_running_trial_is_reclaimed_and_its_point_measured():
    from optuna.trial import TrialState

    from generator.search import claim, claim_of
    from generator.study import counts
    from generator.tune import open_study, search_bucket

    bucket = Bucket(32, 512, 16384, 131072)
    study = open_study(bucket, "sm90a")
    first = starting_points(bucket.heads, bucket.top_k, "sm90a")[0]
    dead = study.ask()  # a worker that claimed the first point and died
    claim(study, dead, first.name)
    m = FakeMeasurer()
    search_bucket(study, bucket, m, "sm90a", trials=3, log=lambda s: None, stale_after_s=0.0)
    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL and "reclaimed" in trials[0].user_attrs and claim_of(trials[0]) is None
    assert first.name in m.fused_calls  # measured again, by a live trial
    assert counts(study)["measured"] == 3 and counts(study)["reclaimed"] == 1


def gone_pid() -> str:
    """The process id of a process that has exited (a worker killed with its batch)."""
    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()


def test_a_resumed_run_reclaims_at_once_the_trials_its_killed_process_left_running():
    """A run killed between asking a batch and measuring it (a job's time limit) leaves the batch's
    trials RUNNING, each recorded with its worker when asked. The same host's next run reclaims them
    at once, whatever their age, so the bucket still measures its starting points and its full
    budget (before, a run resumed within the hour counted them as running: a bucket cut so on the
    H200 on 2026-12-06 measured 7 model trials and none of its starting points). A live process's
    trial, or another host's, waits out its age."""
    import socket

    from optuna.trial import TrialState

    from generator.search import WORKER, WORKER_PROCESS, claim_of, gone_worker, process_identity
    from generator.study import counts
    from generator.tune import ask_batch, open_study, search_bucket

    bucket = Bucket(32, 512, 16384, 131072)
    study = open_study(bucket, "sm90a")
    asked, _ = ask_batch(study, bucket, "sm90a", 3, 100, 12)
    assert len(asked) == 3 and all(t.system_attrs[WORKER].endswith(f":{os.getpid()}") for t in study.get_trials()
                                   if t.state == TrialState.RUNNING)  # (recorded when asked)
    dead = gone_pid()
    host = socket.gethostname()
    workers = {asked[0][0]._trial_id: f"{host}:gpu*:{dead}",  # killed with its batch
               asked[1][0]._trial_id: f"{host}:gpu*:{os.getppid()}",  # alive
               asked[2][0]._trial_id: f"another-host:gpu0:{dead}"}
    for trial_id, worker in workers.items():
        study._storage.set_trial_system_attr(trial_id, WORKER, worker)
    # (which process each was, where /proc tells: the live one's own, not the asking process's)
    study._storage.set_trial_system_attr(asked[1][0]._trial_id, WORKER_PROCESS, process_identity(os.getppid()))
    running = {t._trial_id: t for t in study.get_trials(states=(TrialState.RUNNING,))}
    assert [gone_worker(running[i]) for i in workers] == [True, False, False]
    killed = claim_of(running[asked[0][0]._trial_id])
    m = FakeMeasurer()
    search_bucket(study, bucket, m, "sm90a", trials=6, log=lambda s: None)  # (the default age: an hour)
    by_id = {t._trial_id: t for t in study.get_trials()}
    assert by_id[asked[0][0]._trial_id].state == TrialState.FAIL
    assert "is gone" in by_id[asked[0][0]._trial_id].user_attrs["reclaimed"]
    assert [by_id[asked[i][0]._trial_id].state for i in (1, 2)] == [TrialState.RUNNING] * 2
    assert killed in m.fused_calls  # its point measured again
    assert counts(study)["measured"] == 4 and counts(study)["running"] == 2  # 6 = 4 measured + 2 still running


@pytest.mark.skipif(not Path("/proc/sys/kernel/random/boot_id").exists(), reason="needs Linux's /proc (boot_id, a process's start time)")
def test_a_worker_is_told_gone_by_its_machine_boot_and_start_time_not_its_host_name_and_pid_alone():
    """Fresh cloud machines share one host name ("vm") and hand out the same low process ids: on
    2026-12-06 a resumed run on a new machine found its killed predecessor's pid held by another
    process. A trial records its worker's boot and start time (search.process_identity) beside host
    and pid: a live process of another start time is a reused pid (gone); a trial of another boot may
    be a live machine of the same name (not gone: its age decides)."""
    import socket
    from types import SimpleNamespace

    from generator.search import WORKER, WORKER_PROCESS, boot_id, gone_worker, process_identity

    host = socket.gethostname()
    boot = boot_id()
    dead = gone_pid()
    parent = os.getppid()

    def trial(pid, identity):
        return SimpleNamespace(system_attrs={WORKER: f"{host}:gpu*:{pid}", WORKER_PROCESS: identity})

    assert not gone_worker(trial(parent, process_identity(parent)))  # alive, the same process
    assert gone_worker(trial(parent, f"{boot}:1"))  # its pid now another process's (started at another time)
    assert gone_worker(trial(dead, f"{boot}:1"))  # no such process
    assert not gone_worker(trial(dead, "another-boot:1"))  # another machine called so, or before a reboot
    assert not gone_worker(trial(parent, "another-boot:1"))
    assert not gone_worker(SimpleNamespace(system_attrs={WORKER: f"elsewhere:gpu*:{dead}", WORKER_PROCESS: f"{boot}:1"}))


def test_a_kind_that_lost_every_bucket_of_a_class_by_a_wide_margin_is_not_started_there(tmp_path):
    """tune.losing_kinds reads each entry's per-kind evidence (kind_ms): a kind over 1.3x the best in
    every bucket of the class (heads, top-k, rows) with evidence, at least two of them, loses its
    starting points; the arch's default is measured whatever the evidence."""
    from generator.space import kind_of
    from generator.tune import losing_kinds, record
    from runtime.table import save_table

    def entry(keys, **kind_ms):
        return Entry(32, 2048, 4096, keys, "v", 1.0, 2.0, kind_ms=kind_ms)

    path = tmp_path / "t.json"
    save_table(path, "Fake", [entry(8192, gated=1.0, mmasync=1.5, streaming=1.2),
                              entry(32768, gated=1.0, mmasync=4.0, streaming=2.0)], {})
    bucket = Bucket(32, 2048, 4096, 16384)
    assert losing_kinds(bucket, [None, path]) == {"mmasync"}  # (streaming won by under 1.3x once)
    assert losing_kinds(Bucket(32, 2048, 16384, 16384), [path]) == set()  # another class: no evidence
    save_table(path, "Fake", [entry(8192, gated=1.0, mmasync=1.5)], {})
    assert losing_kinds(bucket, [path]) == set()  # one bucket is not evidence enough
    points = starting_points(32, 2048, "sm90a", skip_kinds={"gated", "mmasync"})
    assert points[0] == starting_points(32, 2048)[0] and kind_of(points[0]) == "gated"  # (the default stays)
    assert {kind_of(v) for v in points[1:]} == {"streaming"}

    # and a tuning run records the evidence its study gathered
    result = tune_bucket(bucket, FakeMeasurer(), "sm90a", trials=8, log=lambda s: None)
    record(tmp_path / "new.json", "Fake", "sm90a", result, None, log=lambda s: None)
    (e,) = load_table(tmp_path / "new.json")
    assert set(e.kind_ms) == {kind_of(Variant.from_name(t.user_attrs["variant"])) for t in result.study.trials
                              if t.value is not None}
    assert e.kind_ms["gated"] == pytest.approx(min(t.value for t in result.study.trials if t.value is not None
                                                   and Variant.from_name(t.user_attrs["variant"]).gated), abs=1e-4)


def test_a_tables_kind_evidence_is_filled_from_the_journal_of_the_run_that_wrote_it(tmp_path):
    """tools/kind_evidence.py: each entry whose bucket's study the journal holds gets that study's
    per-kind times (the same as a tuning run now records), with a line in the history; the others
    stay without."""
    from generator.search import kind_times
    from generator.tune import record
    from generator.workers import storage_for

    journal = tmp_path / "tune-journal.log"
    tuned, other = Bucket(32, 2048, 4096, 32768), Bucket(32, 2048, 16384, 131072)
    result = tune_bucket(tuned, FakeMeasurer(), "sm90a", trials=8, storage=storage_for(f"journal:{journal}"),
                         gpu="Fake", log=lambda s: None)
    table = tmp_path / "Fake.json"
    for r in (result, tune_bucket(other, FakeMeasurer(), "sm90a", trials=3, log=lambda s: None)):  # (the second in memory)
        record(table, "Fake", "sm90a", replace(r, kind_ms=None), None, log=lambda s: None)
    done = subprocess.run([sys.executable, str(REPO / "tools" / "kind_evidence.py"), "--journal", str(journal),
                           "--table", str(table)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    entries = {Bucket.of(e): e for e in load_table(table)}
    assert entries[tuned].kind_ms == kind_times(result.study) and set(entries[tuned].kind_ms) >= {"gated"}
    assert entries[other].kind_ms is None
    assert "kind_ms of 1 of 2 entries" in json.loads(table.read_text())["history"][-1]["kind_evidence"]


def test_a_kind_left_out_of_the_start_can_still_win_through_the_model():
    """Where the evidence misleads (here the streaming kernel is twice as fast), the model still
    proposes the kinds left out of the start: at 12 trials 2 of these 5 seeds find one; starting every
    kind (tune --every-kind) finds one every time."""
    from generator.space import kind_of
    from generator.tune import open_study, search_bucket

    class StreamingWins(FakeMeasurer):
        def time_of(self, v, bucket):
            return (0.5 if kind_of(v) == "streaming" else 1.0) + v.stages * 0.01

    bucket = Bucket(32, 2048, 16384, 524288)

    def winner(seed, skip):
        study = open_study(bucket, "sm90a", seed=seed, skip_kinds=skip)
        search_bucket(study, bucket, StreamingWins(), "sm90a", trials=12, log=lambda s: None)
        return kind_of(Variant.from_name(min((t for t in study.trials if t.value is not None),
                                             key=lambda t: t.value).user_attrs["variant"]))

    pruned = [winner(seed, frozenset({"streaming", "mmasync"})) for seed in range(5)]
    assert 1 <= pruned.count("streaming") < 5
    assert all(winner(seed, frozenset()) == "streaming" for seed in range(5))


def test_with_the_shipped_table_the_model_proposes_one_to_four_of_the_default_trials():
    """What README.md says a default run does where the shipped table names the bucket's variant: the
    starting points, the table's choice, four neighbours, and the model's 1 to 4 of the 12 trials."""
    from generator.search import trial_sources
    from generator.tune import default_buckets, losing_kinds, table_choice

    tables = [REPO / "tuned_configs" / "H200-132SM.json"]
    buckets = default_buckets()[::8]  # (15 of the 120, every class of rows among them)
    model = []
    for bucket in buckets:
        result = tune_bucket(bucket, FakeMeasurer(), "sm90a", trials=12, incumbent=table_choice(bucket, tables),
                             skip_kinds=losing_kinds(bucket, tables), log=lambda s: None)
        sources = trial_sources(result.study)
        assert sum(sources.values()) == 12 and sources["neighbour"] == 4
        model.append(sources["model"])
    assert 1 <= min(model) and max(model) <= 4 and len(set(model)) > 1


def test_a_gpu_without_its_own_table_starts_from_the_one_the_runtime_serves_it(tmp_path, monkeypatch):
    """An H800 has no shipped table; the runtime serves it the nearest one of its arch (132 SMs: of the
    H100 SXM's and the H200's, the first by name). tune starts its studies from that table as it would
    from its own: the table's choice measured first, its evidence sparing the losing kinds' starting
    points (where it started afresh before, as on a new arch)."""
    from generator.search import trial_sources
    from generator.tune import incumbent_tables, run
    from runtime.gpu import GpuIdentity
    from runtime.table import find_table, table_for

    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(tmp_path / "user-tables"))
    h800 = GpuIdentity("H800", 132, (9, 0), "NVIDIA H800")
    served = table_for(h800).path
    assert find_table(h800.key) is None and served == REPO / "tuned_configs" / "H100-SXM-132SM.json"
    tables = incumbent_tables(h800.key, tmp_path / "out", served)
    assert tables == [tmp_path / "out" / "H800-132SM.json", served]
    bucket = Bucket(32, 2048, 16384, 131072)  # (a bucket the served table holds)
    (with_table,) = run([bucket], FakeMeasurer(), h800.key, "sm90a", 12, tmp_path / "out", tables=tables,
                        log=lambda s: None)
    (afresh,) = run([bucket], FakeMeasurer(), h800.key, "sm90a", 12, tmp_path / "out2", log=lambda s: None)
    assert trial_sources(with_table.study)["table"] == 1 and trial_sources(afresh.study)["table"] == 0
    assert trial_sources(with_table.study)["start"] < trial_sources(afresh.study)["start"]  # (losing kinds spared)


def test_a_resumed_run_on_a_gpu_without_a_table_still_starts_its_buckets_from_the_borrowed_one(tmp_path, monkeypatch):
    """The default run writes where the runtime reads: cut short, the H800's own table holds some buckets,
    and table_for serves it that partial table. On --resume the buckets it lacks still start from the
    table borrowed before (the H100 SXM's; its choice measured first, its evidence sparing the losing
    kinds), as they would have in the uninterrupted run, not afresh."""
    from generator.search import trial_sources
    from generator.tune import run, starting_tables
    from runtime.gpu import GpuIdentity
    from runtime.table import table_for

    out = tmp_path / "user-tables"
    monkeypatch.setenv("FUSED_MQA_TOPK_TABLES", str(out))
    h800 = GpuIdentity("H800", 132, (9, 0), "NVIDIA H800")
    borrowed = REPO / "tuned_configs" / "H100-SXM-132SM.json"
    first, later = Bucket(32, 2048, 4096, 32768), Bucket(32, 2048, 16384, 131072)  # (both in the borrowed table)
    said = []
    tables = starting_tables(h800, out, said.append)
    assert tables == [out / "H800-132SM.json", borrowed] and "borrowed H100-SXM-132SM" in said[0]
    run([first], FakeMeasurer(), h800.key, "sm90a", 12, out, tables=tables, log=lambda s: None)  # (then cut short)
    own = out / "H800-132SM.json"
    assert table_for(h800).path == own and not table_for(h800).borrowed
    resumed = starting_tables(h800, out)
    assert resumed == [own, borrowed]  # (what the runtime served before the partial table)
    (bare,) = run([later], FakeMeasurer(), h800.key, "sm90a", 12, tmp_path / "x", tables=[own, own], log=lambda s: None)
    assert trial_sources(bare.study)["table"] == 0  # (what the resumed run did before: afresh)
    (result,) = run([later], FakeMeasurer(), h800.key, "sm90a", 12, out, tables=resumed, log=lambda s: None)
    assert trial_sources(result.study)["table"] == 1
    assert trial_sources(result.study)["start"] < trial_sources(bare.study)["start"]  # (losing kinds spared)


def test_a_point_that_does_not_build_is_recorded_as_failed_and_the_recording_goes_on(tmp_path):
    from generator.regret import Landscape, record
    from runtime.toolchain import BuildError

    bucket, path = Bucket(32, 2048, 16384, 524288), tmp_path / "landscape.jsonl"
    space = [v for v in valid_variants(arch="sm90a", heads=32, top_k=2048) if (v.stages, v.warps) != (2, 4)][:4]

    def build_fn(variants):
        if space[1] in variants:
            raise BuildError("nvcc: ptxas fatal")

    assert record(bucket, FakeMeasurer(), space, path, build_fn=build_fn, log=lambda s: None) == 4
    points = Landscape.read(path).points[bucket]
    assert points[space[1].name] is None and all(points[v.name] for v in space if v != space[1])
    assert "ptxas fatal" in [json.loads(l) for l in path.read_text().splitlines()][1]["failed"]


def test_reclaim_after_takes_another_machines_running_trial_for_a_dead_workers_sooner(tmp_path):
    """A run resumed on a fresh machine of the same host name cannot tell its killed predecessor's
    trials from a live machine's, and by default waits an hour for them; `--reclaim-after 0` tells it
    no other worker shares the storage, and the bucket measures its whole budget now."""
    import argparse

    import optuna
    from optuna.trial import TrialState

    from generator.design import DEFAULT_DESIGN
    from generator.search import WORKER, claim
    from generator.study import counts
    from generator.tune import add_arguments, run, tuning_study

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args([]).reclaim_after == 60 and p.parse_args(["--reclaim-after", "0"]).reclaim_after == 0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(SystemExit):
            p.parse_args(["--reclaim-after", bad])

    bucket = Bucket(32, 512, 16384, 131072)

    def left_running(study):
        trial = study.ask()
        claim(study, trial, starting_points(32, 512, "sm90a")[0].name)
        study._storage.set_trial_system_attr(trial._trial_id, WORKER, "another-machine:gpu*:684")

    for stale_after_s, measured, running in ((3600.0, 2, 1), (0.0, 3, 0)):
        storage = optuna.storages.InMemoryStorage()
        study = tuning_study(bucket, "sm90a", storage, [None], "Fake GPU", DEFAULT_DESIGN, False, 3)
        left_running(study)
        run([bucket], FakeMeasurer(), "Fake GPU", "sm90a", trials=3, out_dir=tmp_path / str(stale_after_s),
            storage=storage, tables=[None], log=lambda s: None, stale_after_s=stale_after_s)
        assert (counts(study)["measured"], counts(study)["running"]) == (measured, running)
        assert any(t.state == TrialState.FAIL for t in study.get_trials()) == (stale_after_s == 0)
