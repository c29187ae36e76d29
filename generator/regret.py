"""`python -m generator regret`: how far a tuning search lands from the best point of the space.

Two steps, so that a GPU's time goes on measuring only:
  --record FILE (GPU): every valid point of each bucket's space (or a random sample of it, --sample)
      is built, verified over a poisoned output and timed as a study's trial is (a warm-up, then 7
      timings); one JSON line a point, appended as it goes, so that the same command run again goes
      on where a cut run stopped.
  --replay FILE (any machine): searches run over those timings, each trial answered from the file,
      so that every run sees the same landscape: the tuner's default design and, at the same budget,
      the designs named by --design (pure random search, pure TPE, ...), each with --repeats seeds.
      A run's regret is how much slower its pick is than the best point recorded. A point a search
      asks for that the file lacks (a sampled landscape) is a failed trial, counted in the table.
      With --resample each run draws every point's timings from those recorded (with replacement,
      seeded by the run; Replayed says which), as a second recording would time the near-equal
      points near the top in another order; without it every run sees the same timings, and a
      design whose proposals do not depend on the seed (the known points and the neighbour walk)
      picks the same point in each run.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runtime.variant import Variant

from .design import DESIGNS, Design
from .space import valid_variants
from .study import Bucket, Comparison, VerificationError

class NotRecorded(RuntimeError):
    """A point the landscape does not hold (it recorded a sample of the space)."""


@dataclass
class Landscape:
    """Per bucket, each recorded point's timings (ms), or None where it failed verification or to run."""

    points: dict[Bucket, dict[str, list[float] | None]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> "Landscape":
        out = cls()
        lines = path.read_text().splitlines() if path.exists() else []
        for i, line in enumerate(lines):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:  # a line cut short when a recording was stopped: measured again
                    break
                raise
            out.points.setdefault(Bucket(*row["bucket"]), {})[row["variant"]] = row["ms"]
        return out

    def best(self, bucket: Bucket) -> tuple[str, float]:
        good = {name: statistics.median(t) for name, t in self.points[bucket].items() if t}
        name = min(good, key=good.get)
        return name, good[name]

    def median(self, bucket: Bucket, name: str) -> float:
        return statistics.median(self.points[bucket][name])


HOPELESS = 3.0  # a point whose first two timings are this many times the best so far is timed no more


def record(bucket: Bucket, measurer, variants: list[Variant], path: Path, build_fn=None, log=print) -> int:
    """Measures each of `variants` the file does not yet hold for `bucket` once, appending a line each;
    returns how many it measured. A point whose first two timings are over HOPELESS x the best median
    recorded so far keeps those two: a study's pruner stops any trial over 1.5x its best after two
    timings, so a replay asks for more only in a run whose best is over twice the space's."""
    from .tune import build_failures

    text = path.read_text() if path.exists() else ""
    if text and not text.endswith("\n"):  # (a line cut short: dropped, its point measured again)
        path.write_text(text[:text.rfind("\n") + 1])
    held = Landscape.read(path).points.get(bucket, {})
    best = min((statistics.median(t) for t in held.values() if t), default=float("inf"))
    todo = [v for v in variants if v.name not in held]
    unbuilt = build_failures(build_fn, todo) if build_fn and todo else {}  # (a point that does not build: failed)
    for i, v in enumerate(todo):
        row = {"bucket": [bucket.heads, bucket.top_k, bucket.rows, bucket.keys, bucket.requests], "variant": v.name}
        lost = None  # a CUDA error: the context is lost for every later point, so the process ends after this line
        try:
            if v in unbuilt:
                raise RuntimeError(f"build: {unbuilt[v]}")
            row["ms"] = []
            for ms in measurer.fused_samples(v, bucket):
                row["ms"].append(ms)
                if len(row["ms"]) == 2 and statistics.median(row["ms"]) > HOPELESS * best:
                    break
            best = min(best, statistics.median(row["ms"]))
        except Exception as e:  # noqa: BLE001 -- wrong, or failed to build or run: this point's alone
            row["ms"], row["failed"] = None, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            lost = e if "CUDA error" in str(e) else None
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if lost is not None:  # (a new process goes on where this one stopped)
            raise lost
        if (i + 1) % 50 == 0:
            log(f"[{bucket.name}] {len(held) + i + 1}/{len(held) + len(todo)} recorded")
    return len(todo)


class Replayed:
    """A Measurer that answers every trial from a landscape: each point's recorded timings, or with
    `resample` (a random.Random) as many drawn with replacement from all but the first of them. The
    first is left out of the draw because it is not noise: a point is timed right after its
    verification, and its first run, the card still below its power cap, reads 1-6% under the median
    on every recorded bucket (tools/landscape_drift.py), as it would in a second recording; drawn
    like the others it would move a run's median where no recording's would."""

    def __init__(self, landscape: Landscape, resample: random.Random | None = None):
        self.landscape = landscape
        self.resample = resample

    def fused_samples(self, v: Variant, bucket: Bucket):
        points = self.landscape.points[bucket]
        if v.name not in points:
            raise NotRecorded(f"{v.name} is not in the landscape")
        timings = points[v.name]
        if timings is None:
            raise VerificationError(f"{v.name} failed when it was recorded")
        yield from (timings if self.resample is None else self._draw(timings, len(timings)))

    def _draw(self, timings: list[float], k: int) -> list[float]:
        """k timings drawn with replacement from `timings` less its first (where it has more than two:
        a point the recorder stopped after two keeps both)."""
        return self.resample.choices(timings[1:] if len(timings) > 2 else timings, k=k)

    def compare(self, v: Variant, bucket: Bucket) -> Comparison:
        raise NotImplementedError("a replay searches only; nothing is settled against the dense path")

    def playoff(self, variants: list[Variant], bucket: Bucket):
        """Each variant's median (tune.pick's side-by-side timing): its recorded one, or with `resample`
        that of COMPARE_REPS timings drawn as fused_samples draws them (the side-by-side rounds' shared
        clocks are not modelled: a recording has none)."""
        from .timing import COMPARE_REPS, Timed, spread

        out = {}
        for v in variants:
            timings = self.landscape.points[bucket][v.name]
            if self.resample is not None:
                timings = self._draw(timings, COMPARE_REPS)
            out[v.name] = Timed(statistics.median(timings), spread(timings))
        return out


@dataclass
class Run:
    seed: int
    pick: str
    regret: float  # the pick's median / the landscape's best - 1
    measured: int
    sources: dict[str, int]
    unrecorded: int  # trials that asked for a point the landscape lacks


def replay(landscape: Landscape, bucket: Bucket, design: Design, seeds: range, trials: int, arch: str = "sm90a",
           tables: list[Path] = (), resample: bool = False) -> list[Run]:
    """`design`'s search of `bucket` run once a seed over the landscape (a fresh in-memory study each),
    and its pick made as `tune` makes it (tune.pick), starting as `tune` would with `tables`: the
    first one's choice for the bucket as its incumbent, their per-kind evidence pruning its starting
    points (none: a GPU tuned afresh); with `resample` each run's timings drawn from the recorded ones
    (Replayed). The regret is always of the pick's recorded median against the best recorded median."""
    from .search import trial_sources
    from .study import counts
    from .tune import losing_kinds, open_study, pick, search_bucket, table_choice

    best_ms = landscape.best(bucket)[1]
    incumbent, skip = table_choice(bucket, list(tables)), losing_kinds(bucket, list(tables))
    runs = []
    for seed in seeds:
        measurer = Replayed(landscape, random.Random(seed) if resample else None)
        study = open_study(bucket, arch, seed=seed, incumbent=incumbent, gpu=f"replay-{seed}", design=design,
                           skip_kinds=skip)
        search_bucket(study, bucket, measurer, arch, trials, log=lambda s: None)
        chosen = pick(study, bucket, measurer, log=lambda s: None).name
        unrecorded = sum("NotRecorded" in t.user_attrs.get("failed", "") for t in study.get_trials(deepcopy=False))
        runs.append(Run(seed, chosen, landscape.median(bucket, chosen) / best_ms - 1, counts(study)["measured"],
                        trial_sources(study), unrecorded))
    return runs


def space_size(bucket: Bucket, landscape: Landscape) -> int:
    """The valid points of the bucket's space for the arch its landscape was recorded on (what `--record`
    measures without --sample or --part)."""
    arch = Variant.from_name(next(iter(landscape.points[bucket]))).arch
    return len(valid_variants(arch=arch, heads=bucket.heads, top_k=bucket.top_k))


def summary(bucket: Bucket, landscape: Landscape, design: str, runs: list[Run]) -> dict:
    regrets = [r.regret for r in runs]
    best, best_ms = landscape.best(bucket)
    sources = {s: sum(r.sources[s] for r in runs) for s in runs[0].sources}
    return {"bucket": bucket.name, "points": len(landscape.points[bucket]), "space": space_size(bucket, landscape),
            "best": best, "best_ms": best_ms,
            "design": design, "runs": len(runs), "median_regret": statistics.median(regrets),
            "worst_regret": max(regrets), "within_2pct": sum(r <= 0.02 for r in regrets),
            "trials": statistics.median(r.measured for r in runs), "sources": sources,
            "unrecorded": sum(r.unrecorded for r in runs), "picks": [r.pick for r in runs]}


def markdown(rows: list[dict]) -> str:
    lines = ["| bucket | points | best | design | trials | median regret | worst | runs within 2% | trials from |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        total = sum(r["sources"].values()) or 1
        sources = ", ".join(f"{s} {n / total:.0%}" for s, n in r["sources"].items() if n)
        # (a landscape of part of the space: its best and the regrets are of those points only)
        points = r["points"] if r["points"] >= r.get("space", 0) else f"{r['points']} of {r['space']}"
        lines.append(f"| {r['bucket']} | {points} | {r['best_ms']:.3f} ms | {r['design']} | {r['trials']:.0f} | "
                     f"{r['median_regret']:.1%} | {r['worst_regret']:.1%} | {r['within_2pct']}/{r['runs']} | {sources} |"
                     + (f" ({r['unrecorded']} unrecorded)" if r["unrecorded"] else ""))
    return "\n".join(lines)


def parse_bucket(spec: str) -> Bucket:
    try:
        return Bucket(*(int(x) for x in spec.split("x")))
    except (TypeError, ValueError):
        raise SystemExit(f"--bucket {spec}: expected HEADSxTOPKxROWSxKEYS[xREQUESTS]") from None


def add_arguments(p) -> None:
    p.add_argument("--record", type=Path, metavar="FILE", help="GPU: measure the buckets' points into FILE (JSON lines)")
    p.add_argument("--replay", type=Path, metavar="FILE", help="run searches over FILE's timings (no GPU)")
    p.add_argument("--bucket", action="append", default=[], metavar="HxKxMxN[xQ]",
                   help="heads x top-k x rows x keys [x requests], e.g. 32x2048x4096x8192 (repeatable; "
                        "--replay: default every bucket the file holds)")
    p.add_argument("--sample", type=int, default=0, help="--record: random valid points a bucket (0: all of them)")
    p.add_argument("--fastest", type=int, default=0, metavar="N",
                   help="--record: only the N fastest points of each bucket in the landscape --of names (a second "
                        "recording of a space's top, to see how far a re-run moves it)")
    p.add_argument("--of", type=Path, metavar="FILE", help="--record --fastest: the landscape whose fastest points")
    p.add_argument("--warm-ms", type=float, default=0.0,
                   help="--record: warm each point up for at least this much of its GPU time before its 7 timings "
                        "(default 0: one run, as a tuning study does)")
    p.add_argument("--part", default="1/1", metavar="K/N",
                   help="--record: only part K of N of each bucket's points (every N-th from the K-th): a part's "
                        "nvcc and timing fit one call of a machine lent a call at a time, and a file takes the "
                        "parts in any order (default 1/1: all)")
    p.add_argument("--design", action="append", choices=sorted(DESIGNS), help="--replay: the designs compared "
                   "(repeatable; default: all of them)")
    p.add_argument("--repeats", type=int, default=10, help="--replay: runs a design, seeds 0..")
    p.add_argument("--trials", type=int, default=12, help="--replay: the budget (tune's default)")
    p.add_argument("--resample", action="store_true", help="--replay: each run draws every point's timings from "
                   "the recorded ones (with replacement, seeded by the run), as a second recording would differ; "
                   "default: every run sees the recorded timings")
    p.add_argument("--table", type=Path, help="--replay: start as `tune` would with this table (its choice for the "
                   "bucket first, its per-kind evidence pruning the start); default none, as on a GPU tuned afresh")
    p.add_argument("--log", type=Path, help="--replay: append the rows as JSON lines here")


def main(args) -> int:
    if bool(args.record) == bool(args.replay):
        raise SystemExit("python -m generator regret: give --record FILE (on a GPU) or --replay FILE")
    if args.record:
        return main_record(args)
    landscape = Landscape.read(args.replay)
    buckets = [parse_bucket(s) for s in args.bucket] or sorted(landscape.points)
    rows = []
    for bucket in buckets:
        if bucket not in landscape.points:
            raise SystemExit(f"--bucket {bucket.name}: {args.replay} holds none of its points")
        for name in args.design or list(DESIGNS):
            runs = replay(landscape, bucket, DESIGNS[name], range(args.repeats), args.trials,
                          tables=[args.table] if args.table else [], resample=args.resample)
            rows.append(summary(bucket, landscape, name, runs))
            if args.log:
                with open(args.log, "a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    print(markdown(rows))
    return 0


def points_to_record(space: list[Variant], sample: int, part: str) -> list[Variant]:
    """The points `--record` measures: `sample` of the space drawn at random (seed 0; 0: all of it), then
    part K of N of those ("K/N": every N-th from the K-th, so the parts split the points evenly)."""
    try:
        k, n = (int(x) for x in part.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        raise SystemExit(f"--part {part}: expected K/N with 1 <= K <= N, e.g. 2/3") from None
    chosen = space if sample <= 0 or sample >= len(space) else random.Random(0).sample(space, sample)
    return chosen[k - 1::n]


def fastest_points(space: list[Variant], bucket: Bucket, of: Path | None, n: int) -> list[Variant]:
    """The `n` fastest points of `bucket` in the landscape `of`, in `space`'s order (the order they
    were recorded in there)."""
    if of is None or not of.exists():
        raise SystemExit("--fastest: name the landscape whose fastest points are recorded again (--of FILE)")
    points = Landscape.read(of).points.get(bucket)
    if not points:
        raise SystemExit(f"--fastest: {of} holds no points of {bucket.name}")
    medians = {name: statistics.median(t) for name, t in points.items() if t}
    chosen = set(sorted(medians, key=medians.get)[:n])
    return [v for v in space if v.name in chosen]


def main_record(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("python -m generator regret --record: times variants on a GPU; none here (--replay runs anywhere).",
              file=sys.stderr)
        return 2
    from runtime.arch import arch_for_capability
    from runtime.build import build
    from runtime.gpu import device_identity

    from .tune import GpuMeasurer

    if not args.bucket:
        raise SystemExit("--record: name the buckets (--bucket HxKxMxN[xQ])")
    arch = arch_for_capability(*device_identity(torch.cuda.current_device()).capability).name
    measurer = GpuMeasurer(warm_ms=args.warm_ms)
    for bucket in map(parse_bucket, args.bucket):
        space = valid_variants(arch=arch, heads=bucket.heads, top_k=bucket.top_k)
        if args.fastest:
            space = fastest_points(space, bucket, args.of, args.fastest)
        chosen = points_to_record(space, args.sample, args.part)
        n = record(bucket, measurer, chosen, args.record, build_fn=lambda vs: build(vs),
                   log=lambda s: print(s, flush=True))
        print(f"[{bucket.name}] {n} points measured, {len(chosen)} in the landscape", flush=True)
    return 0
