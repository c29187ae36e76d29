"""The contract's correctness rule (README.md), two-sided, checked row by row against exact scores.

For every row i with n = ke - ks visible keys and c = min(top_k, n):
  * out[i, :c] are distinct indices in [0, n) and out[i, c:] are all -1;
  * no key left out beats a selected key by more than the two keys' rounding bounds:
        max over left-out j of (s_j - E_j)  <=  min over selected i of (s_i + E_i).
Checking only that every selected key reaches the k-th score minus a bound (the rule before this
one) lets an answer drop the best keys and take those just outside the top k: the selected minimum
barely moves. The two-sided rule compares the best key left out with the worst key taken.

Which scores s and bounds E. A kernel's score is k_scale_j * sum_h w_ih relu(d_ihj), with the dot
products d accumulated by its tensor cores and the rest in fp32. An answer is accepted when it
passes the rule for one of two arithmetics (runtime/tensor_core.py has the measurements):

  "exact"  s = the exact score (fp64 from the exact fp8 values), E = 2^-16 B, where
           B_ij = k_scale_j sum_h |w_ih| sum_d |q_ihd| |k_jd| bounds every term's magnitude. This
           covers fp32 accumulation in any order (each 128-term dot within 128 u S, u = 2^-24, S
           the sum of its terms' magnitudes: 2^-17 S), the portable mma.sync kernels on Hopper (eight
           16-product fp16 HMMA steps of 25 fraction bits and four fp32 adds: under 176 2^-25 S =
           2^-17.5 S) and the fp32 head sum and key scale of every path ((H + 2) u B <= 2^-18 B).
  "wgmma"  s = the score from the dot products exactly as Hopper's fp8 wgmma computes them
           (tensor_core.wgmma_dots, bit for bit), E = 2 (H + 2) 2^-24 B: only the fp32 head sum
           and scale are left to round, in whatever order a kernel adds the heads.

The wgmma's own error has no useful bound of that kind: each step truncates every term to 13 bits
below the step's largest, so where every score shares a large offset the worst case is about 1% of
a score, more than the gap between the best key and the k-th. A cheap bound of it still serves as a
filter: an answer that fails the rule with E_loose (below) fails under the wgmma arithmetic too,
and is rejected without computing the wgmma's dot products. Per step t of a head's dot product the
wgmma truncates 33 terms (32 products and the running sum C) by less than 2^(M_t - 13) each, M_t the
exponent of the step's largest term, and its result by less than 2^-13 of itself, so

    |d - exact| <= 2^-13 (1 + 1/32) sum_t [33 max(p_t, S_<t) + S_<=t],

with p_t >= 2^(M_t) from the largest |q| and |k| of the step (subnormal factors counted as 2^-6),
S_<t the magnitudes of the earlier steps' terms (|C| is at most that, plus its error: the 1/32) and
max(a, b) <= a + b: per key two small matrix products, like B.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from runtime.scoring import head_sum, row_pieces, score_block

from .tensor_core import FP8_MIN_EXPONENT, WGMMA_STEP, wgmma_dots

EXACT_EPS = 2.0**-16
WGMMA_EPILOGUE_U = 2.0**-24  # fp32 unit roundoff: E = 2 (H + 2) u B under the wgmma arithmetic
ARITHMETICS = ("exact", "wgmma")


def fp64_product(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r, h, d = q.shape
    return (q.reshape(r * h, d).double() @ k.double().T).view(r, h, -1)


def exact_scores(q, k_fp8, k_scale, weights, rows, lo: int, hi: int) -> torch.Tensor:
    """Exact scores (fp64) [rows, hi - lo] of keys [lo, hi)."""
    return score_block(fp64_product, q, k_fp8, k_scale.double(), weights.double(), rows, lo, hi,
                       work_bytes=256 << 20)


def magnitude_bound(q, k_fp8, k_scale, weights, rows, lo: int, hi: int) -> torch.Tensor:
    """B [rows, hi - lo] (fp64): k_scale_j sum_h |w_ih| sum_d |q_ihd| |k_jd|, at least every score's
    magnitude and every term's: the scale of fp32-like rounding for the pair."""
    u = (weights[rows].double().abs()[:, :, None] * q[rows].double().abs()).sum(1)  # [r, 128]
    return (u @ k_fp8[lo:hi].double().abs().T) * k_scale[lo:hi].double()


def wgmma_loose_bound(q, k_fp8, k_scale, weights, rows, lo: int, hi: int, magnitude: torch.Tensor) -> torch.Tensor:
    """E_loose [rows, hi - lo] (fp64): at least |wgmma score - exact score| for every pair (see above);
    `magnitude` is magnitude_bound's B for the same pairs."""
    steps = q.shape[-1] // WGMMA_STEP
    w = weights[rows].double().abs()  # [r, H]
    qa = q[rows].double().abs()  # [r, H, 128]
    ka = k_fp8[lo:hi].double().abs()  # [n, 128]
    # sum_t [33 S_<t + S_<=t]: a dim of step s counts 33 (steps - 1 - s) + (steps - s) times
    coeff = torch.tensor([33 * (steps - 1 - s) + (steps - s) for s in range(steps)], dtype=torch.float64,
                         device=q.device).repeat_interleave(WGMMA_STEP)
    linear = ((w[:, :, None] * qa).sum(1) * coeff) @ ka.T
    # 33 sum_t p_t, p_t = (largest |q| of the step, at least 2^-6) x (the same for k)
    floor = 2.0**FP8_MIN_EXPONENT
    qmax = torch.where(qa > 0, qa.clamp(min=floor), qa).view(*qa.shape[:2], steps, WGMMA_STEP).amax(-1)  # [r, H, t]
    kmax = torch.where(ka > 0, ka.clamp(min=floor), ka).view(-1, steps, WGMMA_STEP).amax(-1)  # [n, t]
    largest = 33 * ((w[:, :, None] * qmax).sum(1) @ kmax.T)
    epilogue = wgmma_bound(magnitude, q.shape[1])
    return 2.0**-13 * (1 + 1 / 32) * (linear + largest) * k_scale[lo:hi].double() + epilogue


def wgmma_scores(q, k_fp8, k_scale, weights, rows, lo: int, hi: int) -> torch.Tensor:
    """The scores [rows, hi - lo] (fp64) from wgmma's own dot products, the rest exact."""
    w = weights[rows].double()
    scores = torch.empty((w.shape[0], hi - lo), dtype=torch.float64, device=q.device)
    step = max(16, (64 << 20) // (8 * w.numel()) // 16 * 16)  # keys a chunk: [r, H, step] fp64 dots
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        dots = wgmma_dots(q[rows], k_fp8[a:b])  # [r, H, b - a]
        scores[:, a - lo:b - lo] = head_sum(dots.clamp(min=0) * w[:, :, None]) * k_scale[a:b].double()
    return scores


def wgmma_bound(magnitude: torch.Tensor, heads: int) -> torch.Tensor:
    """E under the wgmma arithmetic, from magnitude_bound's B: the fp32 head sum and key scale only."""
    return 2 * (heads + 2) * WGMMA_EPILOGUE_U * magnitude


@dataclass
class VerifyReport:
    rows_checked: int = 0
    failures: list[str] = field(default_factory=list)
    rows_by_arithmetic: dict[str, int] = field(default_factory=lambda: {a: 0 for a in ARITHMETICS})
    # Over rows: the share of its rounding budget the row's critical pair used under the arithmetic
    # that accepted it, (s_out - s_in) / (E_out + E_in) for the best key left out and the worst
    # taken (<= 1 passes; negative when the best left out scores below the worst taken).
    worst_budget_used: float = float("-inf")

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        status = "ok" if self.ok else f"{len(self.failures)} bad rows, first: {self.failures[0]}"
        how = ", ".join(f"{n} {a}" for a, n in self.rows_by_arithmetic.items() if n)
        used = f"; worst pair used {self.worst_budget_used:.2f} of its bound" if self.worst_budget_used > -1e300 else ""
        return f"{status} ({self.rows_checked} rows{': ' + how if how else ''}{used})"


def verify_topk(out: torch.Tensor, q, kv, weights, ks, ke, top_k: int, rows=None, budget_bytes: int = 256 << 20,
                max_failures: int = 20, arithmetics: tuple[str, ...] = ARITHMETICS, strict: bool = False) -> VerifyReport:
    """Checks out [M, top_k] (int32, any device) for the given rows (default: all). Scores are
    computed on the inputs' device; `arithmetics` narrows what an answer may be exact for.

    strict also checks the determinism contract (README.md, "Same answer every time"): each row's
    indices in ascending order, and, under the arithmetic that accepted the row, among the keys whose
    score equals the lowest taken one (a tie at the k-th place), the smallest indices taken. The tie
    test compares the model's scores exactly, so it speaks for a path where the model computes the
    path's own scores bit for bit: every path on families of exact ties (identical key vectors, relu
    zeros, integer-valued inputs whose sums fp32 holds exactly); elsewhere a rounding-level
    difference between model and kernel could make or break a tie the kernel did not see."""
    unknown = set(arithmetics) - set(ARITHMETICS)
    if unknown:
        raise ValueError(f"arithmetics: unknown {sorted(unknown)}; known: {ARITHMETICS}")
    k_fp8, k_scale = kv
    m = q.shape[0]
    report = VerifyReport()
    if tuple(out.shape) != (m, top_k) or out.dtype != torch.int32:
        report.failures.append(f"output has shape {tuple(out.shape)} dtype {out.dtype}, expected ({m}, {top_k}) int32")
        return report
    row_ids = list(range(m)) if rows is None else sorted({int(r) for r in rows})
    ks_h, ke_h = ks.tolist(), ke.tolist()
    out_cpu = out.cpu()

    def fail(row, msg) -> bool:
        report.failures.append(f"row {row}: {msg}" if len(report.failures) < max_failures else "...")
        return len(report.failures) > max_failures

    def settles(arithmetic: str, row, scores, bound, chosen) -> bool:
        """Whether `arithmetic`'s scores and bound pass the row by the two-sided rule; if so the row is
        counted under it, and with strict its ties at the k-th place are checked too (a failure
        recorded)."""
        used = _budget_used(scores, bound, chosen)
        if used > 1:
            return False
        report.rows_by_arithmetic[arithmetic] += 1
        report.worst_budget_used = max(report.worst_budget_used, used)
        if strict and (msg := _tie_break(scores, chosen, "exact scores" if arithmetic == "exact" else "wgmma's scores")):
            fail(row, msg)
        return True

    # Score the checked rows in groups of consecutive rows whose union span fits the budget (fp64
    # scores and two bounds a pair).
    for a, b, lo, hi in row_pieces([ks_h[r] for r in row_ids], [ke_h[r] for r in row_ids], budget_bytes // 24):
        group = row_ids[a:b]
        index = torch.tensor(group, device=q.device)
        sub = (q, k_fp8, k_scale, weights, index, lo, hi)
        if hi > lo:
            scores = exact_scores(*sub).cpu()
            magnitude = magnitude_bound(*sub)
            tight = EXACT_EPS * magnitude.cpu()
            loose = wgmma_loose_bound(*sub, magnitude).cpu() if "wgmma" in arithmetics else tight
        undecided = []  # rows only the wgmma arithmetic can settle
        for j, row in enumerate(group):
            report.rows_checked += 1
            sel = out_cpu[row]
            msg = _structure(sel, ks_h[row], ke_h[row], top_k, strict)
            if msg:
                if fail(row, msg):
                    return report
                continue
            n = max(0, ke_h[row] - ks_h[row])
            if n <= top_k:  # nothing to compare: every visible key is taken
                continue
            span = slice(ks_h[row] - lo, ke_h[row] - lo)
            chosen = sel[: min(top_k, n)].long()
            if "exact" in arithmetics and settles("exact", row, scores[j, span], tight[j, span], chosen):
                if len(report.failures) > max_failures:
                    return report
                continue
            if "wgmma" in arithmetics and _budget_used(scores[j, span], loose[j, span], chosen) <= 1:
                undecided.append(j)
                continue
            if fail(row, _describe(scores[j, span], tight[j, span], chosen, "exact scores")):
                return report
        if undecided:
            index = torch.tensor([group[j] for j in undecided], device=q.device)
            w_scores = wgmma_scores(q, k_fp8, k_scale, weights, index, lo, hi).cpu()
            w_bound = wgmma_bound(tight[undecided] / EXACT_EPS, q.shape[1])
            for i, j in enumerate(undecided):
                row = group[j]
                span = slice(ks_h[row] - lo, ke_h[row] - lo)
                chosen = out_cpu[row][: min(top_k, ke_h[row] - ks_h[row])].long()
                if settles("wgmma", row, w_scores[i, span], w_bound[i, span], chosen):
                    if len(report.failures) > max_failures:
                        return report
                elif fail(row, _describe(w_scores[i, span], w_bound[i, span], chosen, "wgmma's scores")
                          + "; " + _describe(scores[j, span], tight[j, span], chosen, "exact scores")):
                    return report
    return report


def _structure(sel: torch.Tensor, ks: int, ke: int, top_k: int, strict: bool = False) -> str | None:
    """What is wrong with a row's indices regardless of scores: count, padding, range, duplicates
    (strict: and the order, ascending)."""
    n = max(0, ke - ks)
    c = min(top_k, n)
    chosen, rest = sel[:c], sel[c:]
    if bool((rest != -1).any()):
        return f"entries after the first {c} must be -1, got {rest[rest != -1][:5].tolist()}"
    if bool(((chosen < 0) | (chosen >= n)).any()):
        bad = chosen[(chosen < 0) | (chosen >= n)][:5].tolist()
        return f"indices outside [0, {n}) among the first {c}: {bad}"
    if c and chosen.unique().numel() != c:
        return f"duplicate indices among the first {c}"
    if strict and c > 1 and not bool((chosen[1:] > chosen[:-1]).all()):
        at = int((chosen[1:] <= chosen[:-1]).nonzero()[0])
        return f"indices not in ascending order: {int(chosen[at])} then {int(chosen[at + 1])} at places {at}, {at + 1}"
    return None


def _tie_break(scores: torch.Tensor, chosen: torch.Tensor, what: str) -> str | None:
    """Where keys tie (exactly, by these scores) with the lowest taken one, whether the taken ones are
    the smallest indices among them."""
    taken = torch.zeros(scores.numel(), dtype=torch.bool)
    taken[chosen] = True
    tied = scores == scores[chosen].min()
    left, took = (tied & ~taken).nonzero().flatten(), (tied & taken).nonzero().flatten()
    if left.numel() and took.numel() and int(left.min()) < int(took.max()):
        return (f"by {what}, {int(tied.sum())} keys tie at the k-th score {float(scores[chosen].min()):.9g}: key "
                f"{int(left.min())} left out but key {int(took.max())} taken (the smallest indices must be)")
    return None


def _critical_pair(scores: torch.Tensor, bound: torch.Tensor, chosen: torch.Tensor):
    """(best key left out by s - E, worst key taken by s + E), positions in the row's visible keys."""
    taken = torch.zeros(scores.numel(), dtype=torch.bool)
    taken[chosen] = True
    low = torch.where(taken, scores + bound, torch.full_like(scores, float("inf")))
    high = torch.where(taken, torch.full_like(scores, float("-inf")), scores - bound)
    return int(high.argmax()), int(low.argmin())


def _budget_used(scores, bound, chosen) -> float:
    j, i = _critical_pair(scores, bound, chosen)
    gap = float(scores[j] - scores[i])
    budget = float(bound[j] + bound[i])
    if budget > 0:
        return gap / budget
    return float("-inf") if gap < 0 else 0.0 if gap == 0 else float("inf")


def _describe(scores, bound, chosen, what: str) -> str:
    j, i = _critical_pair(scores, bound, chosen)
    return (f"by {what}, key {j} (left out, {float(scores[j]):.9g}) beats key {i} (taken, {float(scores[i]):.9g}) "
            f"by {float(scores[j] - scores[i]):.3g}, more than their rounding bounds {float(bound[j] + bound[i]):.3g}")
