"""SPEC's correctness rule, checked row by row against the exact reference.

For every row i with n_i = ke - ks visible keys and c = min(top_k, n_i):
  * out[i, :c] are distinct indices in [0, n_i) and out[i, c:] are all -1;
  * every selected key's reference score is at least the row's c-th largest reference score minus
    a rounding bound: eps * (B[i, j] + B[i, kth]), with B from reference.score_error_bound.
Ties at the boundary and rounding-level near-ties may go either way; nothing else may.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .reference import reference_scores, score_error_bound
from .scoring import row_pieces

# Relative accumulation error allowed per dot product: fp32 is ~1e-7; Hopper's fp8 tensor cores
# keep fewer bits while accumulating (measured ~1e-4 relative error on logits). 2^-9 leaves margin
# and still fails any selection that drops a clearly better key.
ROUNDING_EPS = 2.0**-9


@dataclass
class VerifyReport:
    rows_checked: int = 0
    failures: list[str] = field(default_factory=list)
    # Largest (kth - selected score) / (B_selected + B_kth) seen: how much of the eps budget was used
    # (0 when every selected key is at or above the k-th score).
    worst_margin: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        status = "ok" if self.ok else f"{len(self.failures)} bad rows, first: {self.failures[0]}"
        return f"{status} ({self.rows_checked} rows, worst margin {self.worst_margin:.2e} of eps {ROUNDING_EPS:.2e})"


def verify_topk(out: torch.Tensor, q, kv, weights, ks, ke, top_k: int, rows=None, eps: float = ROUNDING_EPS,
                budget_bytes: int = 256 << 20, max_failures: int = 20) -> VerifyReport:
    """Checks out [M, top_k] (int32, any device) for the given rows (default: all)."""
    k_fp8, k_scale = kv
    m = q.shape[0]
    report = VerifyReport()
    if tuple(out.shape) != (m, top_k) or out.dtype != torch.int32:
        report.failures.append(f"output has shape {tuple(out.shape)} dtype {out.dtype}, expected ({m}, {top_k}) int32")
        return report
    row_ids = list(range(m)) if rows is None else sorted({int(r) for r in rows})
    ks_h, ke_h = ks.tolist(), ke.tolist()
    out_cpu = out.cpu()
    # Score the checked rows in groups of consecutive rows whose union span fits the budget.
    for a, b, lo, hi in row_pieces([ks_h[r] for r in row_ids], [ke_h[r] for r in row_ids], budget_bytes // 2):
        group = row_ids[a:b]
        scores = bound = None
        if hi > lo:
            index = torch.tensor(group, device=q.device)
            sub = (q[index], k_fp8, k_scale, weights[index], slice(None), lo, hi)
            scores = reference_scores(*sub).cpu()
            bound = score_error_bound(*sub).cpu()
        for j, row in enumerate(group):
            msg, margin = _check_row(out_cpu[row], ks_h[row], ke_h[row], lo, top_k, eps,
                                     None if scores is None else scores[j], None if bound is None else bound[j])
            report.rows_checked += 1
            report.worst_margin = max(report.worst_margin, margin)
            if msg and len(report.failures) < max_failures:
                report.failures.append(f"row {row}: {msg}")
            elif msg:
                report.failures.append("...")
                return report
    return report


def _check_row(sel: torch.Tensor, ks: int, ke: int, lo: int, top_k: int, eps: float, scores, bound):
    n = max(0, ke - ks)
    c = min(top_k, n)
    chosen, rest = sel[:c], sel[c:]
    if bool((rest != -1).any()):
        return f"entries after the first {c} must be -1, got {rest[rest != -1][:5].tolist()}", 0.0
    if c == 0:
        return None, 0.0
    if bool(((chosen < 0) | (chosen >= n)).any()):
        bad = chosen[(chosen < 0) | (chosen >= n)][:5].tolist()
        return f"indices outside [0, {n}): {bad}", 0.0
    if chosen.unique().numel() != c:
        return f"duplicate indices among the first {c}", 0.0
    visible = scores[ks - lo:ke - lo]
    vb = bound[ks - lo:ke - lo]
    top = visible.topk(c)
    kth_value, kth_pos = top.values[-1], top.indices[-1]
    chosen = chosen.long()
    allowed = eps * (vb[chosen] + vb[kth_pos])
    shortfall = kth_value - visible[chosen]
    margin = float((shortfall / (vb[chosen] + vb[kth_pos]).clamp(min=1e-30)).max().clamp(min=0))
    bad = shortfall > allowed
    if bool(bad.any()):
        j = int(bad.nonzero()[0])
        return (f"key {int(chosen[j])} scores {float(visible[chosen[j]]):.6g}, below the {c}-th largest "
                f"{float(kth_value):.6g} by more than rounding ({float(allowed[j]):.3g})"), margin
    return None, margin
