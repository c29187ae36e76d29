"""A tuning bucket and what its study found: the names, counts and results the tuner writes and
the report reads (one module below both, so neither imports the other)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from runtime.kernel_code import code_digest
from runtime.table import Entry, longest_row
from runtime.variant import Variant


@dataclass(frozen=True, order=True)
class Bucket:
    heads: int
    top_k: int
    rows: int
    keys: int
    requests: int = 1  # equal causal requests side by side (generator.workloads.packed_workload)

    @property
    def name(self) -> str:
        return f"h{self.heads}_k{self.top_k}_m{self.rows}_n{self.keys}" + (f"_q{self.requests}" if self.requests > 1 else "")

    @property
    def longest_row(self) -> int:
        return longest_row(self.keys, self.requests)

    @staticmethod
    def of(entry: Entry) -> "Bucket":
        return Bucket(entry.heads, entry.top_k, entry.rows, entry.keys, entry.requests)


class VerificationError(RuntimeError):
    """A variant's output broke the contract on the bucket's inputs."""


@dataclass(frozen=True)
class Comparison:
    """A fused variant and the dense path timed alike: medians (ms) and relative spreads."""

    fused_ms: float
    fused_spread: float
    dense_ms: float
    dense_spread: float


@dataclass
class BucketResult:
    bucket: Bucket
    best: Variant | None
    comparison: Comparison | None
    trials: int  # measured candidates (complete, failed, or stopped by the pruner)
    rejected: int
    failed: int
    pruned: int = 0
    study: object = None  # the optuna study (for the report's plots)
    search_s: float = 0.0  # wall seconds of the search here (0: searched by workers, or not searched)
    settle_s: float = 0.0  # wall seconds of the settling (tune.pick's side-by-side timing, Measurer.compare)
    trial_sources: dict | None = None  # measured trials by where their point came from (design.SOURCES)
    kind_ms: dict | None = None  # the best median each kernel kind reached (search.kind_times)

    def entry(self, verified: str = "") -> Entry | None:
        if self.best is None or self.comparison is None:
            return None
        b, c = self.bucket, self.comparison
        return Entry(b.heads, b.top_k, b.rows, b.keys, self.best.name, round(c.fused_ms, 4), round(c.dense_ms, 4),
                     round(c.fused_spread, 4), round(c.dense_spread, 4), now(), code_digest(), self.trials, verified,
                     b.requests, round(self.search_s + self.settle_s, 1), self.trial_sources, self.kind_ms)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def study_name(arch: str, bucket: Bucket, gpu: str, code: str | None = None) -> str:
    """A study per GPU identity, kernel code and bucket: a stored study never mixes GPUs or code.
    code: the digest the study measured (an entry's `code`, what the report finds its study by);
    default this code's."""
    return f"{gpu}_{code_digest() if code is None else code}_{arch}_{bucket.name}"


def counts(study) -> dict[str, int]:
    """Trials of a study by what became of them: measured (complete, failed, pruned on its timings),
    running, rejected (an invalid point), duplicate (a point another trial had), reclaimed (a dead
    worker's, ended by search.reclaim_stale: not measured)."""
    from optuna.trial import TrialState as S

    out = dict.fromkeys(("measured", "running", "rejected", "duplicate", "reclaimed", "failed", "pruned"), 0)
    for t in study.get_trials(deepcopy=False):
        kind = next((k for k in ("rejected", "duplicate", "reclaimed") if k in t.user_attrs), None)
        if kind:
            out[kind] += 1
        elif t.state == S.RUNNING:
            out["running"] += 1
        elif t.state in (S.COMPLETE, S.FAIL, S.PRUNED):
            out["measured"] += 1
            out["failed"] += t.state == S.FAIL
            out["pruned"] += t.state == S.PRUNED
    return out
