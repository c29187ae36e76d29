"""`python -m generator tune`: per shape bucket, an optuna study over the variant space on this GPU.

For each bucket (heads, top_k, rows, keys) the tuner
  1. times the dense path once on the bucket's inputs (a causal chunk of random data);
  2. asks optuna for a batch of variants (the default variant first), rejects invalid points with
     their reason (pruned trials), builds the rest in parallel, and for each one verifies its
     output against the reference before timing it (a wrong variant is a failed trial, never a time);
  3. records the best variant, its time and the dense time in <GPU>.json (runtime.table.table_dir), so the
     runtime knows per bucket whether fused beats dense on this GPU.
The table is rewritten after every bucket, merged with the buckets it already holds.

The measuring is behind a small interface (Measurer) so the bookkeeping runs on a CPU in tests.
"""

from __future__ import annotations

import datetime
import importlib.util
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runtime.table import Entry, find_table, load_table, save_table, table_dir, table_path, table_paths

from .arch import arch_for_capability
from .space import AXES, enumerate_space, neighbors, rejection_reason, starting_points
from .variant import Variant

TUNED_AXES = ("mma", "rows", "key_tile", "warps", "stages", "buffer", "sample_tiles", "select_warps")
# The order a study walks the best point's neighbours in (space.neighbors): who selects first (the
# largest single difference at short contexts), then the axes that moved the gated kernel's time
# most cheaply.
NEIGHBOR_AXES = ("select_warps", "sample_tiles", "stages", "buffer", "key_tile", "warps", "rows", "mma")
# (rows, keys) of the causal chunks a table is tuned at, from a short chunk to a 1M context; keys is
# the most keys one row sees, what the runtime looks buckets up by (runtime.dispatch). The runtime
# takes the nearest bucket on a log scale, so a table needs both sides of every crossover: fused/dense
# (on an H200 fused wins from 32K keys up, by 1.1x to 2.2x; at 8K keys the 32K bucket's variant took
# twice the dense path's time, 1.55 against 0.81 ms at 4K rows: experiment log, "2026-12-01: power
# cap") and between variants (three gated warpgroups win at 128K keys, two of two slices at 512K:
# "2026-11-29: cheaper epilogue"). A full 16K-row chunk at 32K keys has its own bucket: it is as far
# from 4K x 32K as from 16K x 128K; 16K x 16K is the first chunk of every long prompt. Chunks of 64
# and 512 rows (decode-sized and short prefill chunks) have their own: a persistent fused launch with
# fewer row blocks than SMs ran a one-row call at 32K keys in 2.9 times the dense path's time, and a
# 512 x 8K chunk, looked up in the 512 x 32K bucket, in 2.1 times (BENCHMARKS.md, "Every chunk a
# server sends").
DEFAULT_SHAPES = ((64, 8192), (64, 32_768), (64, 131_072), (64, 524_288), (512, 8192), (512, 32_768), (512, 131_072),
                  (512, 524_288), (4096, 8192), (4096, 16_384), (16_384, 16_384), (4096, 32_768), (16_384, 32_768), (16_384, 131_072),
                  (16_384, 262_144), (16_384, 524_288), (16_384, 1_048_576))


@dataclass(frozen=True, order=True)
class Bucket:
    heads: int
    top_k: int
    rows: int
    keys: int

    @property
    def name(self) -> str:
        return f"h{self.heads}_k{self.top_k}_m{self.rows}_n{self.keys}"


class VerificationError(RuntimeError):
    """A variant's output broke the contract on the bucket's inputs."""


class Measurer(Protocol):
    def dense_ms(self, bucket: Bucket) -> float: ...

    def fused_ms(self, variant: Variant, bucket: Bucket) -> float:
        """Verified time of `variant` on the bucket's inputs; raises VerificationError if wrong."""
        ...


def tunable_choices(arch: str, heads: int, top_k: int) -> dict[str, list]:
    """Per tuned axis, the values that occur in at least one valid variant (the rest would only
    ever be rejected)."""
    seen: dict[str, set] = {a: set() for a in TUNED_AXES}
    for v, reason in enumerate_space(arch=arch, heads=heads, top_k=top_k):
        if reason is None:
            for a in TUNED_AXES:
                seen[a].add(getattr(v, a))
    return {a: sorted(values) for a, values in seen.items()}


@dataclass
class BucketResult:
    bucket: Bucket
    best: Variant | None
    fused_ms: float
    dense_ms: float
    trials: int
    rejected: int
    failed: int

    def entry(self) -> Entry | None:
        if self.best is None:
            return None
        b = self.bucket
        return Entry(b.heads, b.top_k, b.rows, b.keys, self.best.name, round(self.fused_ms, 4), round(self.dense_ms, 4))


def tune_bucket(bucket: Bucket, measurer: Measurer, arch: str, trials: int, batch: int = 8, seed: int = 0,
                storage: str | None = None, build_fn=None, incumbent: Variant | None = None,
                log=print) -> BucketResult:
    """One optuna study for one bucket; `build_fn(variants)` compiles a batch before it is measured.
    The study measures the starting points first (space.starting_points), `incumbent` (the table's
    current choice for the bucket) second, so a re-tune with few trials cannot end worse than the
    table it replaces; then, batch by batch, the unmeasured one-axis neighbours of the best point so
    far (space.neighbors); optuna's sampler only once the best point's neighbourhood is measured."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices = tunable_choices(arch, bucket.heads, bucket.top_k)
    study = optuna.create_study(
        study_name=f"{arch}_{bucket.name}", storage=storage, load_if_exists=True, direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, trials)))
    if not study.trials:  # the known-good points go first (space.starting_points), the arch's own
        # default first of all, so that even a one-trial study measures it
        first, *others = starting_points(bucket.heads, bucket.top_k, arch)
        if incumbent not in (None, first) and incumbent.arch == arch and rejection_reason(incumbent) is None:
            others = [incumbent, *(v for v in others if v != incumbent)]
        for point in [first, *others]:
            study.enqueue_trial({a: getattr(point, a) for a in TUNED_AXES})

    dense_ms = measurer.dense_ms(bucket)
    log(f"[{bucket.name}] dense {dense_ms:.3f} ms")
    # By variant name; None = failed verification. A stored study's earlier trials count as measured.
    measured: dict[str, float | None] = {}
    State = optuna.trial.TrialState
    for t in study.trials:
        if t.state in (State.COMPLETE, State.FAIL) and "variant" in t.user_attrs:
            measured[t.user_attrs["variant"]] = t.value if t.state == State.COMPLETE else None
    rejected = failed = 0
    # `trials` counts measured (or failed) candidates; rejected points are pruned for free, up to a cap.
    done = sum(t.state in (State.COMPLETE, State.FAIL) for t in study.trials)
    asks_left = 20 * trials

    def enqueue_neighbors() -> None:
        """The best point's unmeasured neighbours, if nothing is queued already."""
        if study.get_trials(deepcopy=False, states=(State.WAITING,)):
            return
        good = {n: ms for n, ms in measured.items() if ms is not None}
        if not good:
            return
        queued = 0
        for w in neighbors(Variant.from_name(min(good, key=good.get)), NEIGHBOR_AXES):
            if w.name not in measured and queued < min(batch, trials - done):
                study.enqueue_trial({a: getattr(w, a) for a in TUNED_AXES})
                queued += 1

    while done < trials and asks_left > 0:
        enqueue_neighbors()
        # A batch is the queued points alone while there are any (starting points, neighbours), so
        # that the next batch's neighbours are those of the best point after them.
        queued = len(study.get_trials(deepcopy=False, states=(State.WAITING,)))
        asked = []
        for _ in range(min(queued or batch, trials - done, asks_left)):
            trial = study.ask()
            v = Variant(arch=arch, heads=bucket.heads, top_k=bucket.top_k,
                        **{a: trial.suggest_categorical(a, choices[a]) for a in TUNED_AXES})
            asked.append((trial, v))
        asks_left -= len(asked)
        to_build = []
        for trial, v in asked:
            reason = rejection_reason(v)
            if reason:
                trial.set_user_attr("rejected", reason)
                study.tell(trial, state=State.PRUNED)
                rejected += 1
            elif v.name not in measured:
                to_build.append(v)
        if build_fn and to_build:
            build_fn(sorted(set(to_build)))
        for trial, v in asked:
            if trial.user_attrs.get("rejected"):
                continue
            if v.name not in measured:
                try:
                    measured[v.name] = measurer.fused_ms(v, bucket)
                    log(f"[{bucket.name}] {v.name}: {measured[v.name]:.3f} ms")
                except VerificationError as e:
                    measured[v.name] = None
                    log(f"[{bucket.name}] {v.name}: WRONG ({e})")
            trial.set_user_attr("variant", v.name)
            done += 1
            if measured[v.name] is None:
                study.tell(trial, state=State.FAIL)
                failed += 1
            else:
                study.tell(trial, measured[v.name])
    good = {n: ms for n, ms in measured.items() if ms is not None}
    if not good:
        return BucketResult(bucket, None, math.inf, dense_ms, done, rejected, failed)
    best_name = min(good, key=good.get)
    return BucketResult(bucket, Variant.from_name(best_name), good[best_name], dense_ms, done, rejected, failed)


def merge_entries(old: list[Entry], new: list[Entry]) -> list[Entry]:
    """New entries replace old ones of the same bucket; the others stay."""
    key = lambda e: (e.heads, e.top_k, e.rows, e.keys)  # noqa: E731
    merged = {key(e): e for e in old}
    merged.update({key(e): e for e in new})
    return list(merged.values())


def table_choice(bucket: Bucket, tables: list[Path]) -> Variant | None:
    """The variant the first of `tables` that holds `bucket` names for it: a study's own table, then the
    shipped one, so that a study written to a fresh --out-dir still measures what the runtime runs
    today (the study logged in "2026-11-30: seven selector warps" did not, and could not say whether it beat the table)."""
    for path in tables:
        for e in load_table(path) or []:
            if (e.heads, e.top_k, e.rows, e.keys) == (bucket.heads, bucket.top_k, bucket.rows, bucket.keys):
                return Variant.from_name(e.variant)
    return None


def run(buckets: list[Bucket], measurer: Measurer, gpu: str, arch: str, trials: int, out_dir: Path,
        time_budget_s: float | None = None, storage: str | None = None, build_fn=None, meta: dict | None = None,
        log=print) -> list[BucketResult]:
    """Tunes each bucket in turn, rewriting the table after each; once the time budget is spent, the
    buckets not yet started are skipped (the first always runs)."""
    path = table_path(gpu, out_dir)
    results = []
    start = time.monotonic()
    for bucket in buckets:
        if results and time_budget_s is not None and time.monotonic() - start > time_budget_s:
            log(f"time budget of {time_budget_s:.0f} s spent; {len(buckets) - len(results)} buckets left untuned")
            break
        incumbent = table_choice(bucket, [path, find_table(gpu)])
        r = tune_bucket(bucket, measurer, arch, trials, storage=storage, build_fn=build_fn, incumbent=incumbent, log=log)
        results.append(r)
        entry = r.entry()
        if entry is not None:
            save_table(path, gpu, merge_entries(load_table(path) or [], [entry]),
                       {"arch": arch, "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        **(meta or {})})
            log(f"[{bucket.name}] best {entry.variant}: fused {entry.fused_ms:.3f} ms, dense {entry.dense_ms:.3f} ms "
                f"-> {entry.use} ({entry.dense_ms / entry.fused_ms:.2f}x)")
    return results


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
        bucket = Bucket(e.heads, e.top_k, e.rows, e.keys)
        try:
            fused = measurer.fused_ms(Variant.from_name(e.variant), bucket)
        except VerificationError as err:
            log(f"[{bucket.name}] {e.variant}: WRONG ({err}); entry dropped")
            continue
        new = Entry(e.heads, e.top_k, e.rows, e.keys, e.variant, round(fused, 4), round(measurer.dense_ms(bucket), 4))
        log(f"[{bucket.name}] {e.variant}: fused {e.fused_ms:.3f} -> {new.fused_ms:.3f} ms, dense {e.dense_ms:.3f} -> "
            f"{new.dense_ms:.3f} ms: {e.use} -> {new.use}")
        fresh.append(new)
    save_table(path, gpu, fresh, {"arch": arch, "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), **(meta or {})})
    return fresh


class GpuMeasurer:
    """Times on the local GPU; inputs are a causal chunk of random data per bucket."""

    def __init__(self, seed: int = 0, verify_rows: int = 64):
        self.seed = seed
        self.verify_rows = verify_rows
        self._workloads: dict[Bucket, object] = {}

    def workload(self, bucket: Bucket):
        from runtime.workloads import make_workload

        if bucket not in self._workloads:
            self._workloads.clear()  # one bucket's inputs on the GPU at a time
            self._workloads[bucket] = make_workload("random", bucket.rows, bucket.keys, bucket.heads, bucket.top_k,
                                                    seed=self.seed, device="cuda")
        return self._workloads[bucket]

    def dense_ms(self, bucket: Bucket) -> float:
        """The dense path entered where the fused path is (after the checks: run_dense, launch_variant),
        so that neither side's time holds host work the other's lacks."""
        from runtime.dense import run_dense

        from .timing import median_ms

        wl = self.workload(bucket)
        return median_ms(lambda: run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, bucket.keys),
                         warmup=1, reps=3)

    def fused_ms(self, variant: Variant, bucket: Bucket) -> float:
        import torch

        from runtime.fused import launch_variant
        from runtime.verify import verify_topk

        from .check import POISON
        from .timing import median_ms

        wl = self.workload(bucket)
        args = (variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k)
        out = torch.full((wl.rows, wl.top_k), POISON, dtype=torch.int32, device="cuda")
        launch_variant(*args, out=out)
        g = torch.Generator().manual_seed(self.seed)
        rows = set(torch.randint(0, wl.rows, (self.verify_rows,), generator=g).tolist()) | {0, wl.rows - 1}
        report = verify_topk(out, *wl.args(), rows=sorted(rows))
        if not report.ok:
            raise VerificationError(report.summary())
        return median_ms(lambda: launch_variant(*args, out=out), warmup=1, reps=7)


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
                    out.add(v)
                    out.update(neighbors(v, NEIGHBOR_AXES))
    return sorted(out, key=lambda v: v.name)


def default_buckets(heads=None, top_k=None, shapes=DEFAULT_SHAPES) -> list[Bucket]:
    return [Bucket(h, k, m, n) for h in (heads or AXES["heads"]) for k in (top_k or AXES["top_k"]) for m, n in shapes]


def add_arguments(p) -> None:
    p.add_argument("--heads", type=int, action="append", choices=AXES["heads"], help="(repeatable) default: all")
    p.add_argument("--top-k", dest="top_k", type=int, action="append", choices=AXES["top_k"], help="(repeatable)")
    p.add_argument("--shape", action="append", metavar="MxN",
                   help=f"chunk rows x keys of a bucket (repeatable); default: {' '.join(f'{m}x{n}' for m, n in DEFAULT_SHAPES)}")
    p.add_argument("--trials", type=int, default=12,
                   help="measured trials per bucket (default 12: the starting points, the table's choice and the "
                        "best point's neighbours; in a re-tune of 30 H200 buckets, 28 winners were not a starting "
                        "point: docs/experiment-log.md, 2026-11-29)")
    p.add_argument("--time-budget", type=float, default=25.0, help="minutes; buckets left when it runs out are skipped")
    p.add_argument("--storage", help="optuna storage URL (e.g. sqlite:///tune.db) to resume studies")
    p.add_argument("--out-dir", type=Path, help="where to write <GPU>.json (default: FUSED_MQA_TOPK_TABLES, else ~/.local/share/fused-mqa-topk/tables; the shipped table: runtime/tuned_configs)")
    p.add_argument("--refresh", action="store_true",
                   help="re-time the table's variants against today's dense path instead of searching")


def main(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("python -m generator tune: no CUDA GPU here, and tuning times kernels on the GPU it tunes for.\n"
              "Without a GPU you can:\n"
              "  python -m generator list             # the variant space (--invalid: rejected points and why)\n"
              "  python -m generator build --shipped  # compile every shipped variant with nvcc\n"
              "  python -m pytest -q tests            # the CPU test suite\n"
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
    from .build import build

    # portable_arch: every variant was checked against the arch's limits (generator.space), so a GPU of
    # the same arch without a table of its own may borrow this one (runtime.table.table_for).
    meta = {"gpu": identity.name, "sms": identity.sms, "portable_arch": arch.name, "torch": torch.__version__,
            "cuda": torch.version.cuda, "command": "python -m generator tune " + " ".join(sys.argv[2:])}
    out_dir = args.out_dir or table_dir()
    if args.refresh:
        print(f"refreshing {table_path(gpu, out_dir)} on {gpu}", flush=True)
        fresh = refresh(GpuMeasurer(), gpu, arch.name, out_dir, build_fn=lambda vs: build(vs), meta=meta,
                        log=lambda s: print(s, flush=True))
        return 0 if fresh else 1
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shape] if args.shape else DEFAULT_SHAPES
    buckets = default_buckets(args.heads, args.top_k, shapes)
    print(f"tuning {len(buckets)} buckets on {gpu} ({arch.name}), {args.trials} trials each, "
          f"budget {args.time_budget:.0f} min -> {table_path(gpu, out_dir)}", flush=True)
    results = run(buckets, GpuMeasurer(), gpu, arch.name, args.trials, out_dir, time_budget_s=60 * args.time_budget,
                  storage=args.storage, build_fn=lambda vs: build(vs), meta=meta,
                  log=lambda s: print(s, flush=True))
    tuned = [r for r in results if r.best is not None]
    print(f"\n{len(tuned)}/{len(buckets)} buckets tuned; table: {table_path(gpu, out_dir)}")
    return 0 if len(tuned) == len(buckets) else 1
