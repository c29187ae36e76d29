"""`python -m generator tune`: per shape bucket, an optuna study over the variant space on this GPU.

For each bucket (heads, top_k, rows, keys) the tuner
  1. searches: optuna asks for variants (generator.design and generator.search: the known-good
     points first, then four of the best point's one-axis neighbours, then TPE), rejects invalid
     points with their reason, builds the rest in parallel, verifies each one's output against the
     reference before timing it (a wrong variant is a failed trial, never a time) and stops a
     hopeless one on its first timings (the pruner);
  2. settles: picks the fastest trial's variant (where others came within 3% of it, the fastest of
     them timed again side by side: pick), times it and the dense path alike, interleaved, and
     records both medians with their spreads in <GPU>.json (runtime.table.table_dir); fused is taken
     where it wins by more than the spreads together. Each entry says when, for which kernel code,
     after how many trials, and after which verification it was measured; the table says on which
     GPU and software.
The table is rewritten after every bucket, merged with the buckets it already holds. Studies are
keyed by the GPU identity and the kernel code's digest, so a stored study (--storage) resumes only
on the same GPU model and code. With --gpus, one worker a GPU searches each bucket's study through
one storage, and this process settles the buckets (generator.workers).

The measuring is behind a small interface (Measurer) so the bookkeeping runs on a CPU in tests.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runtime.arch import arch_for_capability
from runtime.table import (
    Entry,
    find_table,
    load_table,
    save_table,
    served_table,
    table_dir,
    table_meta,
    table_path,
    table_paths,
)
from runtime.variant import Variant

from .design import DEFAULT_DESIGN, DESIGNS, Design
from .provenance import code_digest
from .space import AXES, enumerate_space, neighbors, rejection_reason, starting_points
from .study import (
    Bucket,
    BucketResult,
    Comparison,
    VerificationError,
    counts,
    now,
    study_name,
)

if TYPE_CHECKING:
    from .timing import Timed

TUNED_AXES = ("mma", "rows", "key_tile", "warps", "stages", "buffer", "sample_tiles", "select_warps")
# The order a study walks the best point's neighbours in (space.neighbors): who selects first (the
# largest single difference at short contexts), then the axes that moved the gated kernel's time
# most cheaply.
NEIGHBOR_AXES = ("select_warps", "sample_tiles", "stages", "buffer", "key_tile", "warps", "rows", "mma")
# (rows, keys) of the causal chunks a table is tuned at, from a short chunk to a 1M context; keys is
# the most keys one row sees, what the runtime looks buckets up by (runtime.dispatch). The runtime
# takes the nearest bucket on a log scale, so a table needs both sides of every crossover: fused
# against dense (8K keys against 32K), and between variants (128K against 512K keys). Chunks of 64 and
# 512 rows (decode-sized and short prefill chunks) have their own buckets, because a persistent launch
# with fewer row blocks than SMs is not timed like a long chunk; so do 16K x 16K (the first chunk of
# every long prompt) and 16K x 32K, which is as far from 4K x 32K as from 16K x 128K. Chunks of eight
# packed requests (16K rows, each row seeing most of its request's keys) have buckets too: a causal
# chunk of the same rows and longest row sees half as many keys on average, and the runtime tells the
# two apart by the requests the keys hold (Problem.packing). What each bucket measured:
# BENCHMARKS.md, "Every chunk a server sends". A shape is (rows, keys) or (rows, keys, requests).
DEFAULT_SHAPES = ((64, 8192), (64, 32_768), (64, 131_072), (64, 524_288), (512, 8192), (512, 32_768), (512, 131_072),
                  (512, 524_288), (4096, 8192), (4096, 16_384), (16_384, 16_384), (4096, 32_768), (16_384, 32_768), (16_384, 131_072),
                  (16_384, 262_144), (16_384, 524_288), (16_384, 1_048_576), (16_384, 32_768, 8), (16_384, 131_072, 8),
                  (16_384, 524_288, 8))


class Measurer(Protocol):
    def fused_samples(self, variant: Variant, bucket: Bucket) -> Iterator[float]:
        """Verifies `variant` on the bucket's inputs (raises VerificationError if wrong), then yields
        one timing (ms) after another."""
        ...

    def compare(self, variant: Variant, bucket: Bucket) -> Comparison:
        """`variant` (verified) and the dense path, timed interleaved with the same repeats."""
        ...

    def playoff(self, variants: list[Variant], bucket: Bucket) -> dict[str, Timed]:
        """`variants` (verified), timed interleaved with the same repeats: by name, median and spread."""
        ...


def tunable_choices(arch: str, heads: int, top_k: int) -> dict[str, list]:
    """Per tuned axis, the values that occur in at least one valid variant (the rest would only
    ever be rejected)."""
    return {a: list(values) for a, values in _tunable_choices(arch, heads, top_k).items()}


@lru_cache(maxsize=None)  # (a walk over the whole space, about 0.4 s: once per heads and top_k, not per bucket)
def _tunable_choices(arch: str, heads: int, top_k: int) -> dict[str, tuple]:
    seen: dict[str, set] = {a: set() for a in TUNED_AXES}
    for v, reason in enumerate_space(arch=arch, heads=heads, top_k=top_k):
        if reason is None:
            for a in TUNED_AXES:
                seen[a].add(getattr(v, a))
    return {a: tuple(sorted(values)) for a, values in seen.items()}


def open_study(bucket: Bucket, arch: str, storage=None, seed: int = 0, incumbent: Variant | None = None,
               gpu: str = "local", design: Design = DEFAULT_DESIGN, skip_kinds=frozenset()):
    """The bucket's study, with the search's sampler and pruner (generator.search) as `design` says:
    the starting points first (space.starting_points, less those of `skip_kinds`; the arch's default
    first of all, so that even a one-trial study measures it), `incumbent` (the table's current
    choice) second, so that a re-tune with few trials cannot end worse than the table it replaces."""
    import optuna

    from .search import KnownGoodSampler, SlowerThanBestPruner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    first, *others = starting_points(bucket.heads, bucket.top_k, arch, skip_kinds)
    if incumbent is not None and incumbent != first and incumbent.arch == arch and rejection_reason(incumbent) is None:
        others = [incumbent, *(v for v in others if v != incumbent)]
    table = {incumbent.name: "table"} if incumbent is not None and incumbent in others else {}
    sampler = KnownGoodSampler([first, *others] if design.known else [], lambda v: neighbors(v, NEIGHBOR_AXES),
                               design.model_sampler(seed), sources=table,
                               max_neighbours=design.neighbour_budget(incumbent is not None))
    return optuna.create_study(study_name=study_name(arch, bucket, gpu), storage=storage, load_if_exists=True,
                               direction="minimize", sampler=sampler, pruner=SlowerThanBestPruner())


STALE_TRIAL_S = 3600.0  # a trial RUNNING this long is taken as a dead worker's (a batch's builds run inside it),
# where its worker cannot be seen gone sooner (search.gone_worker)
BATCH = 8  # candidates asked (and built in parallel) at once
ASKS_PER_TRIAL = 100  # a search's cap on asks a measured trial: rejected points are pruned for free (a few ms each)


def search_bucket(study, bucket: Bucket, measurer: Measurer, arch: str, trials: int, batch: int = BATCH,
                  build_fn=None, log=print, progress=lambda: None, stale_after_s: float = STALE_TRIAL_S,
                  until_model: bool = False) -> None:
    """Measures candidates until the study holds `trials` measured ones (counting those other workers
    have running), or with until_model until the model's turn comes (run's first pass);
    `build_fn(variants)` compiles a batch before it is measured. A batch is asked at once (its builds
    run in parallel) and ends after the last known-good point, so that the neighbours asked next are
    those of the best known-good point, and after the last neighbour, so that the model's first
    proposals see them. A candidate whose build fails, or whose run fails or is wrong, becomes a
    failed trial with its reason (user attribute "failed") and the search goes on; a trial left
    RUNNING over stale_after_s (a dead worker's) is reclaimed first."""
    from .search import reclaim_stale

    asks_left = ASKS_PER_TRIAL * trials
    while asks_left > 0:
        for name, why in reclaim_stale(study, stale_after_s):
            log(f"[{bucket.name}] {name}: its trial was left RUNNING ({why}): reclaimed, the point is free again")
        if until_model and study.sampler.models_next(study):
            return
        c = counts(study)
        room = trials - c["measured"] - c["running"]
        if room <= 0:
            return
        asked, asks = ask_batch(study, bucket, arch, min(batch, room), asks_left, trials)
        asks_left -= asks
        unbuilt = build_failures(build_fn, sorted({v for _, v in asked})) if build_fn and asked else {}
        measure_batch(study, bucket, measurer, asked, unbuilt, log, progress)


def ask_batch(study, bucket: Bucket, arch: str, n: int, max_asks: int, trials: int) -> tuple[list, int]:
    """Asks the study for up to `n` candidates in at most `max_asks` asks, and no more than bring it to
    `trials` measured or running (workers sharing it ask at once): ([(trial, variant)] to measure,
    asks made). An invalid point is pruned with its reason, a model point another trial took as a
    duplicate (neither is measured, neither counts towards n); the batch ends after the last
    known-good point and where the model's turn comes next."""
    from optuna.trial import TrialState as S

    from .search import claim, set_source, set_worker, taken

    sampler = study.sampler  # a KnownGoodSampler (open_study)
    choices = tunable_choices(arch, bucket.heads, bucket.top_k)
    asked, asks = [], 0
    while len(asked) < n and asks < max_asks:
        c = counts(study)
        if c["measured"] + c["running"] >= trials:
            break
        trial = study.ask()
        asks += 1
        v = Variant(arch=arch, heads=bucket.heads, top_k=bucket.top_k,
                    **{a: trial.suggest_categorical(a, choices[a]) for a in TUNED_AXES})
        trial.set_user_attr("variant", v.name)
        reason = rejection_reason(v)
        proposed = sampler.proposed(trial)
        if reason:
            trial.set_user_attr("rejected", reason)
            study.tell(trial, state=S.PRUNED)
            continue
        if proposed is None:  # the model-based sampler's point: claimed here, skipped if taken
            if v.name in taken(study, trial.number):
                trial.set_user_attr("duplicate", True)
                study.tell(trial, state=S.PRUNED)
                continue
            claim(study, trial, v.name)
            set_source(study, trial, "model")
        set_worker(study, trial)
        asked.append((trial, v))
        if sampler.is_last_known(proposed) or (proposed is not None and sampler.models_next(study)):
            break
    return asked, asks


def measure_batch(study, bucket: Bucket, measurer: Measurer, asked: list, unbuilt: dict, log=print,
                  progress=lambda: None) -> None:
    """Measures each asked (trial, variant) and tells the study: its median, stopped by the pruner, or
    failed with its reason (a build in `unbuilt`, a wrong answer, a failed run)."""
    import optuna
    from optuna.trial import TrialState as S

    from .search import set_worker

    for trial, v in asked:
        progress()  # (one measured candidate more, whatever becomes of it)
        set_worker(study, trial)
        if v in unbuilt:
            fail(study, trial, f"build: {unbuilt[v]}", log, f"[{bucket.name}] {v.name}: BUILD FAILED")
            continue
        times: list[float] = []
        try:
            for i, ms in enumerate(measurer.fused_samples(v, bucket)):
                times.append(ms)
                trial.report(statistics.median(times), i)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        except VerificationError as e:
            fail(study, trial, f"verification: {e}", log, f"[{bucket.name}] {v.name}: WRONG")
            continue
        except optuna.TrialPruned:
            log(f"[{bucket.name}] {v.name}: stopped after {len(times)} timings ({statistics.median(times):.3f} ms)")
            tell(study, trial, state=S.PRUNED)
            continue
        except Exception as e:  # noqa: BLE001 -- a launch error, an unavailable kernel: this candidate's alone
            fail(study, trial, f"run: {type(e).__name__}: {e}", log, f"[{bucket.name}] {v.name}: FAILED")
            continue
        log(f"[{bucket.name}] {v.name}: {statistics.median(times):.3f} ms")
        tell(study, trial, statistics.median(times))


def build_failures(build_fn, variants: list[Variant]) -> dict[Variant, str]:
    """Builds `variants` (one parallel build); where it fails, each alone, to tell which: {variant:
    the first line of its error} for those that do not build."""
    from runtime.toolchain import BuildError

    try:
        build_fn(variants)
        return {}
    except BuildError:
        pass
    failures = {}
    for v in variants:
        try:
            build_fn([v])
        except BuildError as e:
            failures[v] = (str(e).strip().splitlines() or ["(no message)"])[0][:400]
    return failures


def tell(study, trial, *args, **kwargs) -> None:
    """study.tell, where a trial reclaimed meanwhile (search.reclaim_stale, by another worker that
    took this one for dead) is left as it is."""
    import optuna

    try:
        study.tell(trial, *args, **kwargs)
    except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
        pass


def fail(study, trial, reason: str, log, line: str) -> None:
    """Ends `trial` as failed, its reason in the user attribute "failed"."""
    from optuna.trial import TrialState as S

    trial.set_user_attr("failed", reason)
    log(f"{line} ({reason.splitlines()[0][:300]})")
    tell(study, trial, state=S.FAIL)


# A study's trials are timed one after another, each right after its answer is checked, while the
# card's clock slides to its power cap: on the long buckets the fastest points' timings spread wider
# than the gaps between them (BENCHMARKS.md, "Each run timed anew"). So the trials within
# PLAYOFF_WITHIN of the best, at most PLAYOFF_MOST of them, are timed again side by side before the
# pick: each round runs each once, and every one sees the same clocks.
PLAYOFF_WITHIN = 0.03
PLAYOFF_MOST = 3


def finalists(study) -> list[Variant]:
    """The study's fastest complete trial's variant and those within PLAYOFF_WITHIN of it, fastest
    first, at most PLAYOFF_MOST."""
    complete = sorted((t for t in study.get_trials(deepcopy=False) if t.value is not None and "variant" in t.user_attrs),
                      key=lambda t: t.value)
    names = [t.user_attrs["variant"] for t in complete if t.value <= (1 + PLAYOFF_WITHIN) * complete[0].value]
    return [Variant.from_name(n) for n in dict.fromkeys(names)][:PLAYOFF_MOST]


def pick(study, bucket: Bucket, measurer: Measurer, log=print) -> Variant | None:
    """The study's choice: its fastest trial's variant, or where others came within PLAYOFF_WITHIN of
    it, the fastest of them timed side by side (Measurer.playoff)."""
    finals = finalists(study)
    if len(finals) < 2:
        return finals[0] if finals else None
    timed = measurer.playoff(finals, bucket)
    best = min(finals, key=lambda v: timed[v.name].ms)
    log(f"[{bucket.name}] {len(finals)} trials within {PLAYOFF_WITHIN:.0%} of the best, timed side by side: "
        + ", ".join(f"{v.name} {timed[v.name].ms:.3f} ms (+-{timed[v.name].spread:.1%})" for v in finals)
        + f"; taken: {best.name}")
    return best


def settle_bucket(study, bucket: Bucket, measurer: Measurer, log=print) -> BucketResult:
    """The study's choice (pick), timed against the dense path (Measurer.compare)."""
    from .design import describe_sources
    from .search import kind_times, trial_sources, trial_workers

    c = counts(study)
    sources = trial_sources(study)
    workers = trial_workers(study)
    by_worker = (f"; measured by {len(workers)} workers: " + ", ".join(f"{w} {n}" for w, n in sorted(workers.items()))
                 if len(workers) > 1 else "")
    start = time.monotonic()
    best = pick(study, bucket, measurer, log)
    if best is None:
        return BucketResult(bucket, None, None, c["measured"], c["rejected"], c["failed"], c["pruned"], study,
                            trial_sources=sources)
    comparison = measurer.compare(best, bucket)
    log(f"[{bucket.name}] {best.name}: fused {comparison.fused_ms:.3f} ms (+-{comparison.fused_spread:.1%}), dense "
        f"{comparison.dense_ms:.3f} ms (+-{comparison.dense_spread:.1%}), timed alike; its "
        f"{c['measured']} trials came from: {describe_sources(sources)}{by_worker}")
    return BucketResult(bucket, best, comparison, c["measured"], c["rejected"], c["failed"], c["pruned"], study,
                        settle_s=time.monotonic() - start, trial_sources=sources, kind_ms=kind_times(study))


def tune_bucket(bucket: Bucket, measurer: Measurer, arch: str, trials: int, batch: int = BATCH, seed: int = 0,
                storage=None, build_fn=None, incumbent: Variant | None = None, gpu: str = "local",
                log=print, progress=lambda: None, skip_kinds=frozenset(), design: Design = DEFAULT_DESIGN) -> BucketResult:
    """One bucket's study: search it (search_bucket), then settle it (settle_bucket)."""
    study = open_study(bucket, arch, storage, seed, incumbent, gpu, design, skip_kinds)
    start = time.monotonic()
    search_bucket(study, bucket, measurer, arch, trials, batch, build_fn, log, progress)
    searched = time.monotonic() - start
    return replace(settle_bucket(study, bucket, measurer, log), search_s=searched)


def merge_entries(old: list[Entry], new: list[Entry]) -> list[Entry]:
    """New entries replace old ones of the same bucket; the others stay."""
    merged = {e.bucket: e for e in old}
    merged.update({e.bucket: e for e in new})
    return list(merged.values())


def incumbent_tables(gpu: str, out_dir: Path, runtime_table: Path | None = None) -> list[Path | None]:
    """Where a study looks for its bucket's incumbent (table_choice) and its kinds' evidence
    (losing_kinds): the run's own table, then the one the runtime reads for this GPU, given as
    runtime_table (runtime.table.table_for: its own, else one tuned on another GPU of its arch), by
    default this GPU's own (the user's, else the shipped one)."""
    return [table_path(gpu, out_dir), runtime_table or find_table(gpu)]


def starting_tables(identity, out_dir: Path, log=lambda s: None) -> list[Path | None]:
    """incumbent_tables for a run on the GPU of `identity` (runtime.gpu.GpuIdentity): its own table, then
    the one the runtime served it before that table existed. A GPU without a table of its own starts
    from one tuned on another GPU of its arch: its choices are starting points, measured here like any
    other; so does a run resumed after writing a partial table where the runtime reads (the buckets it
    lacks start from the borrowed table, not afresh)."""
    served = served_table(identity, without=table_path(identity.key, out_dir))
    if served.borrowed:
        log(f"starting from the table the runtime serves this GPU: {served.why}")
    return incumbent_tables(identity.key, out_dir, served.path)


LOSING_RATIO = 1.3  # a kind this much slower than the best in every bucket of a class is not started there


def losing_kinds(bucket: Bucket, tables: list[Path | None]) -> frozenset[str]:
    """The kernel kinds whose starting points a study of `bucket` skips: those that ran over
    LOSING_RATIO x the best kind's time in every bucket of its class (the same heads, top-k and rows)
    whose entry in the first of `tables` with such evidence (Entry.kind_ms) records it, with at least
    two buckets of evidence. The model-based sampler may still propose them (a new winner can be
    found); only the known-good start, measured in every study, is spared them (as Triton's
    early_config_prune spares the configs that cannot win)."""
    for path in tables:
        evidence = [e.kind_ms for e in load_table(path) or [] if e.kind_ms and (e.heads, e.top_k, e.rows) ==
                    (bucket.heads, bucket.top_k, bucket.rows)]
        if len(evidence) >= 2:
            kinds = set.intersection(*(set(ms) for ms in evidence))
            return frozenset(k for k in kinds if all(ms[k] > LOSING_RATIO * min(ms.values()) for ms in evidence))
    return frozenset()


def table_choice(bucket: Bucket, tables: list[Path], trials: int = 0) -> Variant | None:
    """The variant the first of `tables` that holds `bucket` names for it: a study's own table, then the
    shipped one, so that a study written to a fresh --out-dir still measures what the runtime runs
    today (the study logged in "2026-11-30: seven selector warps" did not, and could not say whether it
    beat the table). An entry settled on fewer than `trials` trials (its study cut short: what `untuned`
    searches again) is passed over for a later table's, so that the study goes on from the incumbent the
    uncut one started from, not from its short pick; where no table holds a settled entry, the first one's."""
    held = [e for path in tables for e in load_table(path) or [] if Bucket.of(e) == bucket]
    settled = [e for e in held if e.trials >= trials]
    return Variant.from_name((settled or held)[0].variant) if held else None


def tuning_study(bucket: Bucket, arch: str, storage, tables: list[Path | None], gpu: str, design: Design,
                 every_kind: bool, trials: int = 0):
    """The bucket's study as `tune` opens it: the tables' choice for it its incumbent, their evidence
    sparing it the losing kinds' starting points (unless every_kind)."""
    return open_study(bucket, arch, storage, incumbent=table_choice(bucket, tables, trials), gpu=gpu, design=design,
                      skip_kinds=frozenset() if every_kind else losing_kinds(bucket, tables))


WAVE = 16  # buckets searched together: their model proposals compile in one parallel build


def run(buckets: list[Bucket], measurer: Measurer, gpu: str, arch: str, trials: int, out_dir: Path,
        time_budget_s: float | None = None, storage=None, build_fn=None, meta: dict | None = None,
        log=print, progress=lambda: None, every_kind: bool = False, design: Design = DEFAULT_DESIGN,
        tables: list[Path | None] | None = None, stale_after_s: float = STALE_TRIAL_S) -> list[BucketResult]:
    """Tunes the buckets in waves of WAVE, rewriting the table after each bucket; once the time budget
    is spent, the buckets not yet started are skipped, in a wave too, and the first always runs. Those
    a wave started are finished where the studies live in memory (their trials would be lost); in a
    storage that keeps them, the ones not yet settled are left to `--resume` (the trials asked for them
    and not measured released: search.release), so that a run ends within about a bucket of its budget
    (a wave of long buckets ran minutes past it, into its job's limit). A wave's buckets
    are searched up to the model's turn first (their known points and neighbours, compiled before the
    search: first_candidates), then the model's first proposals of all of them are compiled in one
    parallel build (one nvcc round for the wave, not one a bucket), measured, and each bucket's search
    finished and settled. every_kind: start every kernel kind, whatever the tables' evidence. tables:
    where the studies start from (incumbent_tables; default this GPU's own). stale_after_s: a trial
    RUNNING this long is taken for a dead worker's (search.reclaim_stale)."""
    import optuna

    from .search import release

    path = table_path(gpu, out_dir)
    tables = tables or incumbent_tables(gpu, out_dir)
    results: list[BucketResult] = []
    start, build_s = time.monotonic(), 0.0  # (the waves' shared builds: in the table's header, not in tune_s)
    kept = storage is not None and not isinstance(storage, optuna.storages.InMemoryStorage)
    left_searched = 0  # buckets part-searched and left to --resume

    def spent() -> bool:
        return time_budget_s is not None and time.monotonic() - start > time_budget_s

    for first in range(0, len(buckets), WAVE):
        searched: list[tuple[Bucket, object, float]] = []  # (bucket, study, seconds of its search)
        for bucket in buckets[first:first + WAVE]:
            if (results or searched) and spent():  # (a wave of long buckets runs for minutes)
                break
            study = tuning_study(bucket, arch, storage, tables, gpu, design, every_kind, trials)
            t = time.monotonic()
            search_bucket(study, bucket, measurer, arch, trials, build_fn=build_fn, log=log, progress=progress,
                          stale_after_s=stale_after_s, until_model=True)
            searched.append((bucket, study, time.monotonic() - t))
        batches = [ask_batch(study, bucket, arch, BATCH, ASKS_PER_TRIAL * trials, trials)[0] for bucket, study, _ in searched]
        t = time.monotonic()
        variants = sorted({v for asked in batches for _, v in asked})
        unbuilt = build_failures(build_fn, variants) if build_fn and variants else {}
        build_s += time.monotonic() - t
        if build_fn and variants:
            log(f"the model's first proposals of {len(searched)} buckets: {len(variants)} variants compiled at once "
                f"in {time.monotonic() - t:.0f} s where not in the cache")
        for i, ((bucket, study, search_s), asked) in enumerate(zip(searched, batches)):
            if kept and results and spent():
                for (_, left_study, _), left_asked in zip(searched[i:], batches[i:]):
                    for trial, _ in left_asked:
                        release(left_study, trial, "the run's time budget was spent before it was measured")
                left_searched = len(searched) - i
                break
            t = time.monotonic()
            measure_batch(study, bucket, measurer, asked, unbuilt, log, progress)
            search_bucket(study, bucket, measurer, arch, trials, build_fn=build_fn, log=log, progress=progress,
                          stale_after_s=stale_after_s)
            search_s += time.monotonic() - t
            r = replace(settle_bucket(study, bucket, measurer, log), search_s=search_s)
            results.append(r)
            record(path, gpu, arch, r, {**(meta or {}), "wave_build_s": round(build_s, 1)}, log)
        if len(results) < len(buckets) and spent():
            part = (f" ({left_searched} of them part-searched: --resume goes on from their trials)"
                    if left_searched else "")
            log(f"time budget of {time_budget_s:.0f} s spent; {len(buckets) - len(results)} buckets left untuned{part}")
            break
    return results


VERIFIED = ("two-sided verifier (generator.verify), strict (ascending, ties by index), on 64 random rows and the first "
            "and last, outputs poisoned")


HISTORY = 20  # the runs a table's "history" keeps


def note_in_history(table: dict, command: str, **what: str) -> None:
    """Adds to a table file's data (json.loads of it) a history line for a change made to it by a tool
    rather than a tuning run: the command, when, and what it did (e.g. restamped="...")."""
    table["history"] = [*table.get("history", []), {"command": command, "started": now(), **what}][-HISTORY:]


def table_fields(path: Path, arch: str, meta: dict | None) -> dict:
    """The header of the table at `path` as this run writes it: `meta` (the GPU, the software, the
    command and when the run started), and a history of the runs that wrote its entries (a table
    refreshed, then extended by a tune of new buckets, names both commands)."""
    meta = meta or {}
    old = table_meta(path)
    history = list(old.get("history") or ([{"command": old["command"], "started": old.get("updated", "")}]
                                          if old.get("command") else []))
    run = {"command": meta.get("command", ""), "started": meta.get("started", "")}
    if run["command"] and run not in history:
        history.append(run)
    return {"arch": arch, "updated": now(), "code": code_digest(), **meta, "history": history[-HISTORY:]}


def record(path: Path, gpu: str, arch: str, result: BucketResult, meta: dict | None, log=print) -> None:
    """Merges a settled bucket into the table at `path`."""
    entry = result.entry(VERIFIED)
    if entry is None:
        return
    save_table(path, gpu, merge_entries(load_table(path) or [], [entry]), table_fields(path, arch, meta))
    log(f"[{result.bucket.name}] best {entry.variant}: fused {entry.fused_ms:.3f} ms, dense {entry.dense_ms:.3f} ms "
        f"-> {entry.use} ({entry.dense_ms / entry.fused_ms:.2f}x)")


def refresh(measurer: Measurer, gpu: str, arch: str, out_dir: Path, build_fn=None, meta: dict | None = None,
            log=print) -> list[Entry]:
    """Re-times every entry of this GPU's table, its fused variant (verified) against the dense path as
    it is now, without searching: the fused/dense crossover moves whenever either path changes. An
    entry whose variant no longer verifies is dropped (the runtime then uses its defaults there)."""
    path = table_path(gpu, out_dir)
    entries = load_table(path) or []
    if not entries:
        log(f"no table entries at {path}: nothing to refresh (tune first)")
        return []
    if build_fn:
        build_fn(sorted({Variant.from_name(e.variant) for e in entries}))
    fresh = []
    for e in entries:
        bucket = Bucket.of(e)
        start = time.monotonic()
        try:
            c = measurer.compare(Variant.from_name(e.variant), bucket)
        except VerificationError as err:
            log(f"[{bucket.name}] {e.variant}: WRONG ({err}); entry dropped")
            continue
        result = BucketResult(bucket, Variant.from_name(e.variant), c, e.trials, 0, 0, settle_s=time.monotonic() - start)
        new = replace(result.entry(VERIFIED), trial_sources=e.trial_sources, kind_ms=e.kind_ms)  # (not searched again)
        log(f"[{bucket.name}] {e.variant}: fused {e.fused_ms:.3f} -> {new.fused_ms:.3f} ms, dense {e.dense_ms:.3f} -> "
            f"{new.dense_ms:.3f} ms: {e.use} -> {new.use}")
        fresh.append(new)
    save_table(path, gpu, fresh, table_fields(path, arch, meta))
    held = {Bucket.of(e) for e in fresh}
    lacking = [b for b in default_buckets() if b not in held]
    if lacking:
        shapes = " ".join("--shape " + "x".join(map(str, s if s[2] > 1 else s[:2]))
                          for s in sorted({(b.rows, b.keys, b.requests) for b in lacking}))
        names = sorted(b.name for b in lacking)
        log(f"{len(names)} bucket(s) of the default budget are not in this table, and a refresh re-times only what "
            f"it holds ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}); to add them: "
            f"python -m generator tune {shapes} --out-dir {out_dir}")
    return fresh


class GpuMeasurer:
    """Times on the local GPU; inputs are a causal chunk of random data per bucket."""

    def __init__(self, seed: int = 0, verify_rows: int = 64, warm_ms: float = 0.0):
        self.seed = seed
        self.verify_rows = verify_rows
        self.warm_ms = warm_ms  # fused_samples' warm-up: at least this much of the candidate's GPU time
        self._workloads: dict[Bucket, object] = {}

    def workload(self, bucket: Bucket):
        from .workloads import packed_workload

        if bucket not in self._workloads:
            self._workloads.clear()  # one bucket's inputs on the GPU at a time
            self._workloads[bucket] = packed_workload(bucket.rows, bucket.keys, bucket.heads, bucket.top_k,
                                                      bucket.requests, seed=self.seed, device="cuda")
        return self._workloads[bucket]

    def _dense(self, bucket: Bucket):
        """The dense path entered where the fused path is (after the checks: run_dense, launch_variant),
        so that neither side's time holds host work the other's lacks."""
        from runtime.dense import run_dense

        wl = self.workload(bucket)
        return lambda: run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, bucket.longest_row)

    def _verified(self, variant: Variant, bucket: Bucket):
        """A call of `variant` into its output, once its run over a poisoned output verified on
        sampled rows."""
        from runtime.fused import launch_variant

        from .check import run_poisoned, sampled_rows
        from .verify import verify_topk

        wl = self.workload(bucket)
        out = run_poisoned(variant, wl)
        report = verify_topk(out, *wl.args(), rows=sampled_rows(wl.rows, self.verify_rows, self.seed), strict=True)
        if not report.ok:
            raise VerificationError(report.summary())
        return lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, out=out)

    def fused_samples(self, variant: Variant, bucket: Bucket, reps: int = 7) -> Iterator[float]:
        from .timing import event_ms

        call = self._verified(variant, bucket)
        # (warm-up: one run, or runs back to back for warm_ms: the card, idle while the answer was
        # checked, starts below its power cap and slows as the cap bites; tools/landscape_drift.py)
        warm = event_ms(call)
        while warm < self.warm_ms:
            warm += event_ms(call)
        for _ in range(reps):
            yield event_ms(call)

    def compare(self, variant: Variant, bucket: Bucket, reps: int | None = None) -> Comparison:
        """Fused and dense alternately, `reps` each after a warm-up of both: the clock the power cap
        sets is the same for both sides (a fused run and a dense run taken minutes apart were not)."""
        from .timing import interleaved_ms

        timed = interleaved_ms({"fused": self._verified(variant, bucket), "dense": self._dense(bucket)}, reps=reps)
        return Comparison(timed["fused"].ms, timed["fused"].spread, timed["dense"].ms, timed["dense"].spread)

    def playoff(self, variants: list[Variant], bucket: Bucket, reps: int | None = None) -> dict[str, Timed]:
        """The variants alternately, `reps` each after a warm-up of each (as compare)."""
        from .timing import interleaved_ms

        return interleaved_ms({v.name: self._verified(v, bucket) for v in variants}, reps=reps)


def with_neighbors(choice: Variant) -> set[Variant]:
    """A table's choice and its one-axis neighbours: what a study whose incumbent it is measures
    first after the starting points."""
    return {choice, *neighbors(choice, NEIGHBOR_AXES)}


def likely_candidates(arch: str = "sm90a", tables=None) -> list[Variant]:
    """What a default study is likely to measure before optuna's sampler starts, for every heads and
    top_k: the starting points, the tables' current choices and those choices' one-axis neighbours.
    `generator build --candidates` compiles them ahead, so a tuning run on the GPU measures instead of
    waiting for nvcc (249 of them took about 25 minutes on a 2-core machine: experiment log,
    "2026-11-29: lane-row columns")."""
    paths = table_paths() if tables is None else tables
    chosen = {Variant.from_name(e.variant) for path in paths for e in load_table(path) or []}
    out: set[Variant] = set()
    for h in AXES["heads"]:
        for k in AXES["top_k"]:
            out.update(starting_points(h, k, arch))
            for v in chosen:
                if (v.arch, v.heads, v.top_k) == (arch, h, k):
                    out.update(with_neighbors(v))
    return sorted(out, key=lambda v: v.name)


def first_candidates(buckets: list[Bucket], arch: str, tables: list[Path], trials: int = 0) -> list[Variant]:
    """What the buckets' studies measure first where the table's choice stays the best: each one's
    starting points, its table choice (table_choice) and that choice's one-axis neighbours. `tune`
    compiles them in one parallel build before it searches: the search builds each batch before it
    times it, so a batch of new variants waits for its slowest nvcc, bucket after bucket, where one
    build up front keeps every core busy."""
    out: set[Variant] = set()
    for b in buckets:
        out.update(starting_points(b.heads, b.top_k, arch))
        choice = table_choice(b, tables, trials)
        if choice is not None and choice.arch == arch and rejection_reason(choice) is None:
            out.update(with_neighbors(choice))
    return sorted(out, key=lambda v: v.name)


def prebuild(variants: list[Variant], build_fn, log=print) -> float:
    """Compiles `variants` at once (those not in the cache); a failure is left to the search, which
    builds each batch it measures again and reports it there. Returns its seconds (the table's header
    records them, apart from the studies' own)."""
    from runtime.build import BuildError
    from runtime.library_cache import cache_dir, read_manifest

    log(f"compiling the {len(variants)} variants the studies measure first, where not in the cache")
    before, t, rest = len(read_manifest(cache_dir())), time.monotonic(), ", the rest found built"
    try:
        build_fn(variants)
    except BuildError as err:
        log(f"not all of them built ({err}); the search builds its batches as it goes")
        rest = ""
    seconds = time.monotonic() - t
    log(f"{len(read_manifest(cache_dir())) - before} of them compiled in {seconds:.0f} s{rest}")
    return seconds


def parse_shapes(specs: list[str] | None) -> tuple:
    """--shape MxN or MxNxQ values (none: DEFAULT_SHAPES)."""
    if not specs:
        return DEFAULT_SHAPES
    shapes = []
    for spec in specs:
        try:
            shape = tuple(int(x) for x in spec.split("x"))
        except ValueError:
            shape = ()
        if len(shape) not in (2, 3) or min(shape) < 1 or (len(shape) == 3 and (shape[0] % shape[2] or shape[1] % shape[2])):
            raise SystemExit(f"--shape {spec}: expected ROWSxKEYS or ROWSxKEYSxREQUESTS, positive, the requests "
                             f"dividing rows and keys")
        shapes.append(shape)
    return tuple(shapes)


def untuned(buckets: list[Bucket], path: Path, trials: int = 0) -> list[Bucket]:
    """The buckets the table at `path` holds no entry for that was measured for this kernel code on at
    least `trials` trials (what `tune --resume` still tunes): a bucket settled short, its study's last
    trials left RUNNING by a run cut meanwhile, is searched again (its study in --storage goes on
    from the trials it measured)."""
    code = code_digest()
    held = {Bucket.of(e) for e in load_table(path) or [] if e.code == code and e.trials >= trials}
    return [b for b in buckets if b not in held]


def default_buckets(heads=None, top_k=None, shapes=DEFAULT_SHAPES) -> list[Bucket]:
    return [Bucket(h, k, *shape) for h in (heads or AXES["heads"]) for k in (top_k or AXES["top_k"]) for shape in shapes]


def minutes_at_least_zero(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"minutes, 0 or more: {text!r}")
    return value


def add_arguments(p) -> None:
    p.add_argument("--heads", type=int, action="append", choices=AXES["heads"], help="(repeatable) default: all")
    p.add_argument("--top-k", dest="top_k", type=int, action="append", choices=AXES["top_k"], help="(repeatable)")
    p.add_argument("--shape", action="append", metavar="MxN[xQ]",
                   help="chunk rows x keys of a bucket [x requests packed in it] (repeatable); default: "
                        + " ".join("x".join(map(str, s)) for s in DEFAULT_SHAPES))
    p.add_argument("--trials", type=int, default=12,
                   help="measured trials per bucket (default 12: the starting points, the table's choice, four "
                        "neighbours of the best, then optuna's TPE)")
    p.add_argument("--design", choices=("default", "neighbours"), default="default",
                   help="how a study proposes (generator/design.py): default, the known points, four neighbours, "
                        "then optuna's TPE (its points compiled a wave of 16 buckets at a time); neighbours, every "
                        "neighbour after the known points (most of them compiled before the search)")
    p.add_argument("--every-kind", action="store_true",
                   help="start every kernel kind in every bucket, also those the table shows losing there by over "
                        f"{LOSING_RATIO}x (a GPU unlike the one the table was measured on)")
    p.add_argument("--time-budget", type=float, default=25.0, help="minutes; no bucket starts once it is spent (with --storage, "
                   "the buckets a wave searched and did not settle are left to --resume)")
    p.add_argument("--storage", help="optuna storage: an RDB URL (sqlite:///tune.db, postgresql://...) or journal:PATH "
                                     "(a journal file); studies resume from it, keyed by GPU identity and kernel code")
    p.add_argument("--gpus", metavar="all|N", help="one search worker per local GPU, sharing one storage (default "
                                                   "journal:<out-dir>/tune-journal.log); this process then settles "
                                                   "each bucket and writes the table (generator/workers.py)")
    p.add_argument("--workers-per-gpu", type=int, default=1, metavar="K",
                   help="with --gpus: K search workers on each GPU (they share its time; for trying the shared "
                        "study where there is one GPU)")
    p.add_argument("--worker", action="store_true", help="search only, into --storage, and write no table (what "
                                                         "--gpus starts on each GPU; start it yourself on other hosts)")
    p.add_argument("--out-dir", type=Path, help="where to write <GPU>.json (default: FUSED_MQA_TOPK_TABLES, else ~/.local/share/fused-mqa-topk/tables; the shipped table: tuned_configs/)")
    p.add_argument("--no-decode", dest="decode", action="store_false",
                   help="on Hopper, skip the decode table (by default the run ends by timing the paged decode "
                        "kernel against the dense path on the decode grid: `python -m generator decode --tune`)")
    p.add_argument("--refresh", action="store_true",
                   help="re-time the table's variants against today's dense path instead of searching")
    p.add_argument("--resume", action="store_true",
                   help="skip the buckets the --out-dir table already holds for this kernel code, settled on "
                        "--trials trials (not short, their last trials cut off): run the same command again to "
                        "finish a run cut short (by --time-budget, a job's time limit, a lost machine); for a "
                        "fresh table, start from an empty --out-dir")
    p.add_argument("--reclaim-after", type=minutes_at_least_zero, default=STALE_TRIAL_S / 60, metavar="MIN",
                   help=f"take a trial RUNNING this many minutes for a dead worker's and measure its point again "
                        f"(default {STALE_TRIAL_S / 60:.0f}; a killed process of this machine is seen at once). A run "
                        "resumed on a fresh machine, where no other worker shares the storage, may pass 0")


def main(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("python -m generator tune: no CUDA GPU here, and tuning times kernels on the GPU it tunes for.\n"
              "Without a GPU you can:\n"
              "  python -m generator list             # the variant space (--invalid: rejected points and why)\n"
              "  python -m generator build --shipped  # compile every shipped variant with nvcc\n"
              "  python -m generator regret --replay docs/results/h200-2026-12-04-landscape/landscape.jsonl\n"
              "                                       # the tuner's search replayed over every point of two buckets'\n"
              "                                       # spaces timed on an H200 (in a checkout), and its regret\n"
              "  python -m pytest -q tests            # the CPU test suite (in a checkout: the wheel holds no tests)\n"
              "and on a machine with an sm_89+ GPU, run this command again.", file=sys.stderr)
        return 2
    from runtime.gpu import device_identity

    identity = device_identity(torch.cuda.current_device())
    gpu = identity.key  # what the table is named and found by
    arch = arch_for_capability(*identity.capability)
    if arch is None:
        print(f"{identity.name} has no fp8 tensor cores (needs sm_89+): the dense path serves it; nothing to tune.",
              file=sys.stderr)
        return 2
    if importlib.util.find_spec("optuna") is None:
        print("optuna is missing: pip install optuna", file=sys.stderr)
        return 2
    from runtime.build import build

    from .provenance import gpu_record, software_record
    from .workers import JOURNAL, gpu_count, run_workers, storage_for

    # portable_arch: every variant was checked against the arch's limits (generator.space), so a GPU of
    # the same arch without a table of its own may borrow this one (runtime.table.table_for).
    meta = {**gpu_record(torch.cuda.current_device()), **software_record(), "portable_arch": arch.name,
            "command": "python -m generator tune " + " ".join(sys.argv[2:]), "started": now()}
    out_dir = args.out_dir or table_dir()
    path = table_path(gpu, out_dir)
    buckets = default_buckets(args.heads, args.top_k, parse_shapes(args.shape))
    if args.resume:
        todo = untuned(buckets, path, args.trials)
        print(f"resuming: {len(buckets) - len(todo)} of {len(buckets)} buckets are in {path} for this kernel code "
              f"on {args.trials} trials; {len(todo)} to tune", flush=True)
        if not todo:
            return 0
        buckets = todo
    log, progress, bar = (lambda s: print(s, flush=True)), (lambda: None), None
    if sys.stderr.isatty() and not (args.worker or args.gpus or args.refresh):  # a bar where someone watches
        from tqdm import tqdm

        bar = tqdm(total=len(buckets) * args.trials, desc="tune", unit="trial", file=sys.stderr)
        log, progress = bar.write, (lambda: bar.update(1))
    if args.refresh:
        print(f"refreshing {path} on {gpu}", flush=True)
        fresh = refresh(GpuMeasurer(), gpu, arch.name, out_dir, build_fn=lambda vs: build(vs), meta=meta,
                        log=lambda s: print(s, flush=True))
        return 0 if fresh else 1

    tables = starting_tables(identity, out_dir, log)

    def study_of(bucket, storage):
        return tuning_study(bucket, arch.name, storage, tables, gpu, DESIGNS[args.design], args.every_kind,
                            args.trials)

    if args.worker:  # search only: the process that started the workers settles and writes
        storage = storage_for(args.storage)
        for bucket in buckets:
            search_bucket(study_of(bucket, storage), bucket, GpuMeasurer(), arch.name, args.trials,
                          build_fn=lambda vs: build(vs), log=log, stale_after_s=60 * args.reclaim_after)
        return 0
    prebuild_s = prebuild(first_candidates(buckets, arch.name, tables, args.trials), lambda vs: build(vs), log)
    meta["prebuild_s"] = round(prebuild_s, 1)
    if args.gpus:
        url = args.storage or f"{JOURNAL}{out_dir / 'tune-journal.log'}"
        n, per_gpu = gpu_count(args.gpus), max(1, args.workers_per_gpu)
        log(f"searching {len(buckets)} buckets with {n * per_gpu} workers on {n} GPU(s) through {url}, "
            f"{args.trials} trials each")
        wall = run_workers(n, sys.argv[2:], url, log=log, per_gpu=per_gpu)
        log(f"{n * per_gpu} workers done in {wall:.0f} s; settling each bucket on this GPU")
        storage = storage_for(url)
        results = []
        for bucket in buckets:
            results.append(settle_bucket(study_of(bucket, storage), bucket, GpuMeasurer(), log=log))
            record(path, gpu, arch.name, results[-1], {**meta, "workers": n * per_gpu, "gpus": n,
                                                       "search_wall_s": round(wall)}, log)
    else:
        log(f"tuning {len(buckets)} buckets on {gpu} ({arch.name}), {args.trials} trials each, "
            f"budget {args.time_budget:.0f} min -> {path}")
        results = run(buckets, GpuMeasurer(), gpu, arch.name, args.trials, out_dir, time_budget_s=60 * args.time_budget,
                      storage=storage_for(args.storage), build_fn=lambda vs: build(vs), meta=meta, log=log,
                      progress=progress, every_kind=args.every_kind, design=DESIGNS[args.design], tables=tables,
                      stale_after_s=60 * args.reclaim_after)
    if bar is not None:
        bar.close()
    from .report import time_summary, write_report

    log(f"report: {write_report(path, results)}")
    if results:
        log(time_summary(results, table_meta(path).get("search_wall_s")))
    tuned = [r for r in results if r.best is not None]
    from .design import describe_sources, total_sources

    failed = sum(r.failed for r in results)
    log(f"\n{len(tuned)}/{len(buckets)} buckets tuned; their measured trials came from: "
        f"{describe_sources(total_sources(results))}"
        f"{f'; {failed} failed (their reasons above and in the trials)' if failed else ''}; table: {path}")
    if args.decode and "wgmma" in arch.mma_kinds:  # (the paged decode kernel is Hopper's)
        from runtime.decode_table import decode_table_path

        from .paged_bench import HEADS, TUNE_TOP_K, tune_decode_table

        log("the decode table: the paged kernel against the dense path on the decode grid (--no-decode skips it)")
        with open(os.devnull, "w") as rows:  # (each step's times are in the table's entries)
            tune_decode_table(decode_table_path(gpu, out_dir), [h for h in args.heads or HEADS if h in HEADS],
                              [k for k in args.top_k or TUNE_TOP_K if k in TUNE_TOP_K], out=rows,
                              command=meta["command"], log=log)
    return 0 if len(tuned) == len(buckets) else 1
