"""The verifier must reject wrong answers, not only accept right ones.

Each mutant below turns the reference's (correct) answer into a wrong one in one way a kernel can go
wrong; on every workload family the verifier must flag every row the mutant changed, except where
the family's scores make the mutant indistinguishable from a right answer (named in INDISTINGUISHABLE
with the reason). Rows whose visible scores are all exactly equal are skipped by the score mutants:
there any k keys are a right answer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from generator.check import POISON
from generator.verify import exact_scores, verify_topk
from generator.workloads import FAMILIES, OFFSET_FAMILIES, make_workload
from runtime import reference_mqa_topk

# A mutant maps (a row's answer [top_k] int32, its visible count n, its ks, its exact visible scores)
# to a changed answer, or None where it does not apply to the row.
Mutant = Callable[[torch.Tensor, int, int, torch.Tensor], "torch.Tensor | None"]


def _swap_best(ans, n, scores, count):
    """The answer's `count` best keys left out, the `count` best keys it left out taken instead."""
    c = min(n, ans.numel())
    if n < c + count:
        return None
    chosen = ans[:c].long()
    taken = torch.zeros(n, dtype=torch.bool)
    taken[chosen] = True
    best_taken = chosen[scores[chosen].argsort(descending=True, stable=True)[:count]]
    rest = (~taken).nonzero()[:, 0]
    best_rest = rest[scores[rest].argsort(descending=True, stable=True)[:count]]
    out = ans.clone()
    for a, b in zip(best_taken.tolist(), best_rest.tolist()):
        out[(ans == a).nonzero()[0, 0]] = b
    return out


def best_for_next(ans, n, ks, scores):
    """The best key left out and the best key outside the answer (the (k+1)-th) taken instead."""
    return _swap_best(ans, n, scores, 1)


def best_tenth(ans, n, ks, scores):
    """The best tenth of the answer left out, the same number of the best keys outside it taken instead."""
    return _swap_best(ans, n, scores, -(-ans.numel() // 10))


def bottom_k(ans, n, ks, scores):
    """The k worst keys instead of the k best."""
    k = ans.numel()
    if n < 2 * k:
        return None
    return scores.argsort(descending=True, stable=True)[n - k:].to(torch.int32)


def _shifted(ans, n, by: int):
    """Every valid index moved by `by` (None where the row has none, or `by` is 0)."""
    c = min(n, ans.numel())
    if c == 0 or by == 0:
        return None
    out = ans.clone()
    out[:c] += by
    return out


def index_plus_one(ans, n, ks, scores):
    return _shifted(ans, n, 1)


def index_minus_one(ans, n, ks, scores):
    return _shifted(ans, n, -1)


def absolute_indices(ans, n, ks, scores):
    """Indices of the whole key array instead of relative to ks."""
    return _shifted(ans, n, ks)


def duplicate(ans, n, ks, scores):
    if min(n, ans.numel()) < 2:
        return None
    out = ans.clone()
    out[1] = out[0]
    return out


def padding_in_the_middle(ans, n, ks, scores):
    """A -1 among the valid entries, the rest moved up one place."""
    c = min(n, ans.numel())
    if c < 2:
        return None
    out = ans.clone()
    mid = c // 2
    out[mid + 1:] = ans[mid:-1].clone()
    out[mid] = -1
    return out


def valid_to_padding(ans, n, ks, scores):
    """One valid key replaced by -1."""
    c = min(n, ans.numel())
    if c == 0:
        return None
    out = ans.clone()
    out[c // 2] = -1
    return out


def unpadded(ans, n, ks, scores):
    """A row that sees fewer than k keys with a key where its padding should be."""
    if n >= ans.numel():
        return None
    out = ans.clone()
    out[n] = 0 if n == 0 else ans[0]
    return out


def unwritten(ans, n, ks, scores):
    """One entry left as the poison the output held before the kernel ran (check.POISON)."""
    out = ans.clone()
    out[min(n, ans.numel()) // 2] = POISON
    return out


MUTANTS: dict[str, Mutant] = {
    "best_for_next": best_for_next,
    "best_tenth": best_tenth,
    "bottom_k": bottom_k,
    "index_plus_one": index_plus_one,
    "index_minus_one": index_minus_one,
    "absolute_indices": absolute_indices,
    "duplicate": duplicate,
    "padding_in_the_middle": padding_in_the_middle,
    "valid_to_padding": valid_to_padding,
    "unpadded": unpadded,
    "unwritten": unwritten,
}
SCORE_MUTANTS = ("best_for_next", "best_tenth", "bottom_k", "index_plus_one", "index_minus_one", "absolute_indices")

# (family, mutant) pairs the scores cannot tell apart from a right answer, and why.
INDISTINGUISHABLE = {
    ("all_equal", "index_plus_one"): "every key has the same score: a shifted set that stays in range is as good",
    ("all_equal", "index_minus_one"): "every key has the same score: a shifted set that stays in range is as good",
    ("all_equal", "absolute_indices"): "every key has the same score: a shifted set that stays in range is as good",
}


def _rows_tied(scores_row: torch.Tensor) -> bool:
    return scores_row.numel() > 0 and bool((scores_row == scores_row[0]).all())


@pytest.fixture(scope="module", params=[(32, 512), (64, 1024)], ids=lambda p: f"h{p[0]}_k{p[1]}")
def heads_topk(request):
    return request.param


_cache: dict = {}


def _answer(family, heads, top_k):
    key = (family, heads, top_k)
    if key not in _cache:
        # (12 rows, 4,096 keys: the rows the wgmma arithmetic must settle cost ~0.1 s each on a CPU)
        wl = make_workload(family, 12, 4096, heads, top_k, seed=101)
        _cache[key] = (wl, reference_mqa_topk(*wl.args()), exact_scores(wl.q, wl.k_fp8, wl.k_scale, wl.weights,
                                                                         slice(None), 0, wl.keys))
    return _cache[key]


@pytest.mark.parametrize("family", FAMILIES)
def test_verifier_accepts_the_reference(family, heads_topk):
    wl, ans, _ = _answer(family, *heads_topk)
    report = verify_topk(ans, *wl.args())
    assert report.ok, report.summary()


@pytest.mark.parametrize("mutant", MUTANTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_verifier_rejects_every_mutant(family, mutant, heads_topk):
    if (family, mutant) in INDISTINGUISHABLE:
        pytest.skip(INDISTINGUISHABLE[(family, mutant)])
    wl, ans, scores = _answer(family, *heads_topk)
    bad = ans.clone()
    mutated, tied = [], 0
    for row in range(wl.rows):
        ks, ke = int(wl.ks[row]), int(wl.ke[row])
        visible = scores[row, ks:ke]
        if mutant in SCORE_MUTANTS and _rows_tied(visible):
            tied += 1
            continue
        changed = MUTANTS[mutant](ans[row], ke - ks, ks, visible)
        if changed is not None and not torch.equal(changed, ans[row]):
            bad[row] = changed
            mutated.append(row)
    if not mutated:
        pytest.skip(f"{mutant}: every row of {family} has all its scores tied" if tied == wl.rows else
                    f"{mutant} changes no row of {family} (every row starts at key 0, or sees too few keys)")
    report = verify_topk(bad, *wl.args(), max_failures=wl.rows)
    flagged = {int(f.split(":")[0].split()[1]) for f in report.failures}
    assert flagged == set(mutated), f"missed rows {sorted(set(mutated) - flagged)}: {report.summary()}"


def test_every_mutant_is_exercised_somewhere():
    """No mutant may be skipped on every family: the index-origin mutant needs rows that start past key 0."""
    assert set(OFFSET_FAMILIES) <= set(FAMILIES)
    for mutant in MUTANTS:
        assert any((f, mutant) not in INDISTINGUISHABLE for f in FAMILIES), mutant


# ---- strict mode: the determinism contract's order and tie-break -----------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_strict_accepts_the_reference(family, heads_topk):
    """The reference breaks ties by index and returns each row ascending: strict accepts it everywhere."""
    wl, ans, _ = _answer(family, *heads_topk)
    report = verify_topk(ans, *wl.args(), strict=True)
    assert report.ok, report.summary()


def out_of_order(ans, n, ks, scores):
    """The right keys, two of them swapped in place (any order passed before the contract had one)."""
    c = min(n, ans.numel())
    if c < 2:
        return None
    out = ans.clone()
    out[0], out[c - 1] = ans[c - 1], ans[0]
    return out


def tie_by_larger_index(ans, n, ks, scores):
    """At a tie across the k-th place, the smallest tied key taken swapped for the largest one left out
    (a right answer by the two-sided rule, not by the tie-break), then put in ascending order."""
    c = min(n, ans.numel())
    if n <= ans.numel():
        return None
    chosen = ans[:c].long()
    taken = torch.zeros(n, dtype=torch.bool)
    taken[chosen] = True
    tied = scores == scores[chosen].min()
    took, left = (tied & taken).nonzero().flatten(), (tied & ~taken).nonzero().flatten()
    if not took.numel() or not left.numel() or int(left.max()) < int(took.min()):
        return None
    out = ans.clone()
    out[(ans == took.min()).nonzero()[0, 0]] = int(left.max())
    out[:c] = out[:c].sort().values
    return out


STRICT_MUTANTS = {"out_of_order": out_of_order, "tie_by_larger_index": tie_by_larger_index}


@pytest.mark.parametrize("mutant", STRICT_MUTANTS)
@pytest.mark.parametrize("family", ["random", "all_equal", "boundary_ties", "integer_ties", "relu_plateau",
                                    "duplicate_keys"])
def test_strict_rejects_what_only_the_contract_forbids(family, mutant, heads_topk):
    """Each strict mutant is a right answer by the two-sided rule (the plain verifier accepts every
    changed row) and wrong by the determinism contract (strict flags every changed row)."""
    wl, ans, scores = _answer(family, *heads_topk)
    bad, mutated = ans.clone(), []
    for row in range(wl.rows):
        ks, ke = int(wl.ks[row]), int(wl.ke[row])
        changed = STRICT_MUTANTS[mutant](ans[row], ke - ks, ks, scores[row, ks:ke])
        if changed is not None and not torch.equal(changed, ans[row]):
            bad[row] = changed
            mutated.append(row)
    if not mutated:
        pytest.skip(f"{mutant} changes no row of {family} (no tie across the k-th place)")
    assert verify_topk(bad, *wl.args(), max_failures=wl.rows).ok
    report = verify_topk(bad, *wl.args(), max_failures=wl.rows, strict=True)
    flagged = {int(f.split(":")[0].split()[1]) for f in report.failures}
    assert flagged == set(mutated), f"missed rows {sorted(set(mutated) - flagged)}: {report.summary()}"


def test_the_tie_mutant_is_exercised():
    """Families of exact ties must give the tie mutant rows to change (else its test proves nothing)."""
    wl, ans, scores = _answer("integer_ties", 32, 512)
    assert any(tie_by_larger_index(ans[r], int(wl.ke[r] - wl.ks[r]), 0, scores[r, int(wl.ks[r]):int(wl.ke[r])])
               is not None for r in range(wl.rows))
