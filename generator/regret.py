"""`python -m generator regret`: does the tuner's default budget find the best variant?

For each bucket asked, the reference is the best of a large random sample of the valid space (or of
all of it, --sample 0) together with everything the studies visit, every variant measured once
(verified) and its timings kept. Then the default study (generator.search's sampler, the default
trials) is run --repeats times with different seeds, each trial answered from the kept timings, so
that every run searches the same landscape; its regret is how much slower its pick is than the
reference best. The table it prints (and appends as JSON lines to --log) is the one the tuner's
budget is judged by: a default budget should land within 2% of the best point found.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from runtime.variant import Variant

from .space import valid_variants
from .tune import Bucket, Comparison, VerificationError, open_study, search_bucket


class Recorded:
    """A Measurer that measures each variant once through `measurer` and replays its timings after."""

    def __init__(self, measurer):
        self.measurer = measurer
        self.times: dict[tuple[str, Bucket], list[float] | None] = {}  # None: failed verification

    def timings(self, v: Variant, bucket: Bucket) -> list[float] | None:
        key = (v.name, bucket)
        if key not in self.times:
            try:
                self.times[key] = list(self.measurer.fused_samples(v, bucket))
            except VerificationError:
                self.times[key] = None
        return self.times[key]

    def fused_samples(self, v: Variant, bucket: Bucket):
        times = self.timings(v, bucket)
        if times is None:
            raise VerificationError(f"{v.name} failed verification")
        yield from times

    def compare(self, v: Variant, bucket: Bucket) -> Comparison:
        return self.measurer.compare(v, bucket)

    def best(self, bucket: Bucket) -> tuple[str, float]:
        good = {name: statistics.median(t) for (name, b), t in self.times.items() if b == bucket and t}
        name = min(good, key=good.get)
        return name, good[name]


@dataclass
class Regret:
    bucket: Bucket
    measured: int  # variants measured for the reference
    best: str
    best_ms: float
    regrets: list[float]  # per run: its pick's median / the best's - 1

    def row(self) -> dict:
        return {"bucket": self.bucket.name, "measured": self.measured, "best": self.best, "best_ms": self.best_ms,
                "median_regret": statistics.median(self.regrets), "worst_regret": max(self.regrets),
                "runs_within_2pct": sum(r <= 0.02 for r in self.regrets), "runs": len(self.regrets)}


def regret(bucket: Bucket, measurer, arch: str, sample: int, repeats: int, trials: int, seed: int = 0,
           build_fn=None, log=print) -> Regret:
    """The reference (a sample of the space, 0: all of it) and `repeats` default studies on it."""
    space = valid_variants(arch=arch, heads=bucket.heads, top_k=bucket.top_k)
    chosen = space if sample <= 0 or sample >= len(space) else random.Random(seed).sample(space, sample)
    recorded = Recorded(measurer)
    if build_fn:
        build_fn(sorted(chosen))
    for i, v in enumerate(chosen):
        recorded.timings(v, bucket)
        if (i + 1) % 50 == 0:
            log(f"[{bucket.name}] reference: {i + 1}/{len(chosen)} measured")
    picks = []
    for r in range(repeats):
        study = open_study(bucket, arch, seed=seed + r, gpu=f"regret-run-{r}")  # in memory, a fresh study each
        search_bucket(study, bucket, recorded, arch, trials, build_fn=build_fn, log=lambda s: None)
        done = [t for t in study.get_trials(deepcopy=False) if t.value is not None]
        picks.append(statistics.median(recorded.timings(Variant.from_name(min(done, key=lambda t: t.value)
                                                                          .user_attrs["variant"]), bucket)))
    name, best_ms = recorded.best(bucket)  # (the studies' visits included)
    result = Regret(bucket, sum(1 for (_, b) in recorded.times if b == bucket), name, best_ms,
                    [p / best_ms - 1 for p in picks])
    log(f"[{bucket.name}] best of {result.measured}: {name} {best_ms:.3f} ms; default budget ({trials} trials), "
        f"{repeats} runs: regret median {statistics.median(result.regrets):.1%}, worst {max(result.regrets):.1%}")
    return result


def markdown(results: list[Regret], trials: int) -> str:
    lines = [f"| bucket | variants measured | best | default budget ({trials} trials): median regret | worst | "
             "runs within 2% |", "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        row = r.row()
        lines.append(f"| {row['bucket']} | {row['measured']} | `{row['best']}` {row['best_ms']:.3f} ms | "
                     f"{row['median_regret']:.1%} | {row['worst_regret']:.1%} | {row['runs_within_2pct']}/{row['runs']} |")
    return "\n".join(lines)


def add_arguments(p) -> None:
    p.add_argument("--bucket", action="append", required=True, metavar="HxKxMxN[xQ]",
                   help="heads x top-k x rows x keys [x requests], e.g. 32x2048x4096x8192 (repeatable)")
    p.add_argument("--sample", type=int, default=200, help="random valid variants in the reference (0: all)")
    p.add_argument("--repeats", type=int, default=5, help="default studies run on the reference, seeds 0..")
    p.add_argument("--trials", type=int, default=12, help="the budget judged (tune's default)")
    p.add_argument("--log", type=Path, help="append JSON lines here")


def main(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("python -m generator regret: times variants on a GPU; none here.", file=__import__("sys").stderr)
        return 2
    from runtime.arch import arch_for_capability
    from runtime.build import build
    from runtime.gpu import device_identity

    from .tune import GpuMeasurer

    arch = arch_for_capability(*device_identity(torch.cuda.current_device()).capability).name
    results = []
    for spec in args.bucket:
        try:
            bucket = Bucket(*(int(x) for x in spec.split("x")))
        except (TypeError, ValueError):
            raise SystemExit(f"--bucket {spec}: expected HEADSxTOPKxROWSxKEYS[xREQUESTS]") from None
        results.append(regret(bucket, GpuMeasurer(), arch, args.sample, args.repeats, args.trials,
                              build_fn=lambda vs: build(vs), log=lambda s: print(s, flush=True)))
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps(results[-1].row()) + "\n")
    print(markdown(results, args.trials))
    return 0
