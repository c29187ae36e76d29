"""The paged kernel's merge protocol, modelled on the CPU over random schedules.

templates/paged_mqa_topk_wgmma.cu.j2 (finish_part, await_parts; variants `_m<ctas>`): persistent CTAs
claim work items (part i % parts of request i / parts) in item order into their Q stages; a part's
scan ends by releasing its Q stage (the CTA's producer may then claim another) and publishing its
lists. The CTAs that finish a request's last min(parts, ctas) parts take its rows from a counter and
merge them (the model takes ctas = next_n); all but the last part's first wait until every part is
published, unless one of their request's parts sits in their own Q stages (claimed after their
item), where they leave the rows to the others.
The kernel also bounds the wait by its clock; the model has no such bound, so a schedule that would
deadlock without it shows here as a run that never ends.

The model checks, over random interleavings of every CTA's producer and math warps: every run ends,
every row is merged exactly once, and only after all of its request's parts are published. Two
mutants show the check can fail: without the queue check CTAs wait on themselves, without the wait
rows merge before their parts are published.
"""

from __future__ import annotations

import random

import pytest


def run_step(batch, parts, next_n, ctas, q_stages, seed, *, queue_check=True, wait=True, limit=200_000):
    """One decode step's launch under a random schedule: returns (ended, merges, early), merges a
    {(request, row): times merged} and early the rows merged before their parts were published."""
    rng = random.Random(seed)
    items = batch * parts
    claim = 0
    finished = [0] * batch
    rows_taken = [0] * batch
    merges: dict = {}
    early = []
    cta = [{"stages": [], "phase": "next", "item": None, "ticks": 0, "exhausted": False} for _ in range(ctas)]

    def producer(c):
        nonlocal claim
        if c["exhausted"] or len(c["stages"]) >= q_stages:
            return
        item = claim if claim < items else -1
        claim += 1
        c["stages"].append(item)
        c["exhausted"] = item < 0

    def math(c):
        phase = c["phase"]
        if phase == "next":
            if not c["stages"]:
                return  # (its Q stage is not filled yet)
            if c["stages"][0] < 0:
                c["phase"] = "done"
                return
            c["item"], c["phase"], c["ticks"] = c["stages"][0], "scan", rng.randint(1, 6)
        elif phase == "scan":
            c["ticks"] -= 1
            if c["ticks"] == 0:
                c["stages"].pop(0)  # the Q stage released: the producer may claim behind it
                request = c["item"] // parts
                before = finished[request]
                finished[request] += 1  # published
                if before == parts - 1 or (before >= parts - next_n and not wait):
                    c["phase"] = "merge"
                elif next_n > 1 and before >= parts - next_n:
                    c["phase"] = "wait"
                else:
                    c["phase"] = "next"
        elif phase == "wait":
            request = c["item"] // parts
            if finished[request] == parts:
                c["phase"] = "merge"
            elif queue_check and any(c["item"] < s < (request + 1) * parts for s in c["stages"]):
                c["phase"] = "next"
        elif phase == "merge":
            request = c["item"] // parts
            row = rows_taken[request]
            rows_taken[request] += 1
            if row >= next_n:
                c["phase"] = "next"
                return
            merges[(request, row)] = merges.get((request, row), 0) + 1
            if finished[request] != parts:
                early.append((request, row))

    for _ in range(limit):
        if all(c["phase"] == "done" for c in cta):
            return True, merges, early
        c = rng.choice(cta)
        (producer if rng.random() < 0.4 else math)(c)
    return False, merges, early


CASES = [  # (batch, parts, next_n, ctas, q_stages)
    (1, 4, 4, 1, 2), (1, 4, 4, 2, 1), (1, 15, 4, 3, 2), (2, 8, 2, 3, 2), (3, 5, 4, 4, 1),
    (4, 3, 4, 16, 2), (1, 2, 4, 2, 2), (5, 7, 3, 2, 2), (1, 30, 4, 132, 2), (8, 2, 1, 3, 2),
]


@pytest.mark.parametrize("batch,parts,next_n,ctas,q_stages", CASES)
def test_every_row_is_merged_once_after_its_parts_whatever_the_schedule(batch, parts, next_n, ctas, q_stages):
    for seed in range(40):
        ended, merges, early = run_step(batch, parts, next_n, ctas, q_stages, seed)
        assert ended, f"seed {seed}: the step never ended"
        assert early == [], f"seed {seed}: rows merged before their parts were published: {early}"
        assert merges == {(b, r): 1 for b in range(batch) for r in range(next_n)}, f"seed {seed}"


def test_without_the_queue_check_a_cta_waits_on_itself():
    hung = sum(not run_step(1, 4, 4, 1, 2, seed, queue_check=False, limit=20_000)[0] for seed in range(10))
    assert hung == 10


def test_without_the_wait_rows_merge_before_their_parts_are_published():
    early = sum(bool(run_step(2, 8, 4, 6, 2, seed, wait=False)[2]) for seed in range(20))
    assert early > 0
