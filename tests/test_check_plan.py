"""`python -m generator check`'s plan on CPU: every check named before it runs, names unique, and a
run cut short finished by --resume without repeating or skipping a check."""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from generator import check
from generator.check import Check, Pending, passed_in_log, run_checks, shipped_checks, shipped_paged_checks
from generator.provenance import code_digest
from generator.shipped import shipped_dense_variants, shipped_paged_variants, shipped_variants
from generator.workloads import FAMILIES

REPO = Path(__file__).resolve().parent.parent


def test_shipped_checks_are_named_uniquely_and_cover_every_shipped_variant():
    for keys in (12_288, 4096):  # (4096 = 2 x top-2048: the windows of two top_k keys meet the short ones)
        pending = shipped_checks(FAMILIES, 384, keys, sms=132)
        names = [p.what for p in pending]
        assert len(names) == len(set(names)), "a resumed run would skip a check that shares a passed one's name"
        for v in [*shipped_variants(), *shipped_dense_variants()]:
            assert sum(n.startswith(v.name + " ") for n in names) >= len(FAMILIES), v.name
    split = [n for n in names if n.endswith("(split tail)")]
    assert split and all(f"M={(132 + 3) * int(n.split('_r')[1][0])} " in n for n in split)


def test_shipped_paged_checks_cover_every_paged_variant_on_every_family_and_a_split_request():
    names = [p.what for p in shipped_paged_checks(FAMILIES)]
    assert len(names) == len(set(names))
    for v in shipped_paged_variants():
        mine = [n for n in names if n.startswith(v.name + " ")]
        assert {n.split()[1] for n in mine} == set(FAMILIES), v.name
        assert any("contexts=200000 " in n for n in mine), "no check splits one long request across the GPU"
        dense = [n for n in names if n.startswith(f"dense decode h{v.heads} k{v.top_k} n{v.next_n} ")]
        assert {n.split()[5] for n in dense} == set(FAMILIES), v.name  # (the dense path the decode table may take)
        assert any("contexts=200000 " in n for n in dense), "no check of the dense path's long-row kernels"


def test_a_check_is_called_what_its_plan_called_it(monkeypatch):
    """A pending check's Check carries the name the plan gave it: else --resume would never recognise
    a passed one. (The workload, the launch and the verifier are stood in for: no GPU here.)"""
    import torch

    @dataclass
    class Workload:
        q = k_fp8 = k_scale = weights = None
        ks: torch.Tensor = torch.zeros(384, dtype=torch.int32)
        ke: torch.Tensor = torch.zeros(384, dtype=torch.int32)

        def longest_row(self):
            return 20_000

        def args(self):
            return ()

    report = SimpleNamespace(ok=True, summary=lambda: "ok")
    monkeypatch.setattr(check, "make_workload", lambda *a, **k: Workload())
    monkeypatch.setattr(check, "run_poisoned", lambda v, wl, stats: torch.zeros(384, 2048, dtype=torch.int32))
    monkeypatch.setattr(check, "run_dense", lambda *a: None)
    monkeypatch.setattr(check, "verify_topk", lambda *a, **k: report)
    monkeypatch.setattr(torch, "full", lambda shape, value, **k: torch.zeros(shape, dtype=torch.int32))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(check, "logits_window", lambda longest, keys: longest)
    v, d = shipped_variants()[0], shipped_dense_variants()[0]
    selector = next(v for v in shipped_variants() if v.select_warps)
    for p in (check.pending_variant(v, "random", 384, 12_288, 401),
              check.pending_split_tail(selector, "increasing", sms=132),
              check.pending_variant(v, "random", 384, 12_288, 7, sample_rows=48),
              check.pending_dense(d.heads, d.top_k, "random", 384, 2048, 650, d, told=2048),
              check.pending_dense(d.heads, d.top_k, "random", 384, 20_000, 500, d),
              check.pending_dense(32, 2048, "random", 384, 12_288, 200)):  # (--dense: the default dense kernels)
        c = p.run()
        assert c.ok and c.what == p.what, (c.what, p.what)


def test_passed_in_log_keeps_only_passed_checks_of_this_code(tmp_path):
    log = tmp_path / "check.jsonl"
    code = code_digest()
    lines = [
        {"check": "a", "ok": True, "detail": "", "code": code},
        {"check": "b", "ok": False, "detail": "1 bad row", "code": code},
        {"check": "c", "ok": True, "detail": "", "code": "0123456789abcdef"},  # other kernel code
        {"check": "d", "ok": True, "detail": ""},  # a log of before the code was recorded
        {"timing": {"variant": "x"}, "gpu": "H200"},
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"check": "e", "ok": tr')  # the last cut by a kill
    assert passed_in_log(log, code) == {"a"}
    assert passed_in_log(tmp_path / "absent.jsonl", code) == set()


def test_run_checks_skips_what_passed_and_stops_at_its_budget(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(check.time, "monotonic", lambda: clock[0])
    ran = []

    def pending(name, seconds):
        def run():
            ran.append(name)
            clock[0] += seconds
            return Check(name, True, "")
        return Pending(name, run)

    plan = [pending("a", 5), pending("b", 5), pending("c", 5), pending("d", 5)]
    recorded = []
    left = run_checks(plan, recorded.append, done={"b"}, budget_s=7)
    assert ran == ["a", "c"] and [c.what for c in recorded] == ["a", "c"]  # c started at 5 s, d would at 10
    assert [p.what for p in left] == ["d"]
    ran.clear()
    assert run_checks(plan, recorded.append, done={"a", "b", "c"}, budget_s=None) == [] and ran == ["d"]


def test_resume_needs_a_log(capsys):
    args = SimpleNamespace(resume=True, log=None)
    assert check.main(args) == 2
    assert "--log" in capsys.readouterr().out


def test_decode_narrows_shipped_to_the_paged_checks_and_needs_it(capsys):
    whole = [c.what for c in check.shipped_plan(FAMILIES, 384, 12_288, 132, "sm90a", decode=False)]
    decode = [c.what for c in check.shipped_plan(FAMILIES, 384, 12_288, 132, "sm90a", decode=True)]
    paged = [c.what for c in shipped_paged_checks(FAMILIES)]
    assert decode == paged and whole[-len(paged):] == paged and len(whole) > len(paged)
    assert check.shipped_plan(FAMILIES, 384, 12_288, 132, "sm100a", decode=True) == []
    assert check.main(SimpleNamespace(resume=False, log=None, decode=True, shipped=False)) == 2
    assert "--shipped" in capsys.readouterr().out
    done = subprocess.run([sys.executable, "-m", "generator", "check", "--help"], cwd=REPO, capture_output=True, text=True)
    assert "--decode" in done.stdout
