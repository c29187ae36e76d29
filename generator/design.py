"""How a tuning study proposes its points (generator.search.KnownGoodSampler carries it out) and the
names of where a trial's point came from, kept apart from optuna so that the commands that only
build or read results (and a GPU machine without optuna) can name them without importing it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass


SOURCES = ("start", "table", "neighbour", "model")  # where a trial's point came from: a starting point,
# the table's choice, a one-axis neighbour of the best measured so far, the model-based sampler


@dataclass(frozen=True)
class Design:
    """known: start from the known-good points; neighbours: at most this many one-axis neighbours of
    the best point after them (None: every one), or neighbours_afresh where no table gives the bucket
    a choice (a GPU tuned afresh; None: as neighbours); model: who proposes the rest ("tpe": optuna's
    TPE, modelling from `startup` finished trials on, over each axis alone or (multivariate) jointly;
    "random": optuna's random sampler)."""

    known: bool = True
    neighbours: int | None = None
    neighbours_afresh: int | None = None
    model: str = "tpe"
    startup: int = 8
    multivariate: bool = False

    def neighbour_budget(self, table_choice: bool) -> int | None:
        """The most neighbour trials of a study, given whether a table named the bucket's variant."""
        return self.neighbours if table_choice or self.neighbours_afresh is None else self.neighbours_afresh

    def model_sampler(self, seed: int):
        import optuna

        if self.model == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if self.model == "tpe":
            with warnings.catch_warnings():  # (multivariate TPE is marked experimental)
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.startup,
                                                  multivariate=self.multivariate)
        raise ValueError(f"model {self.model!r}: expected 'tpe' or 'random'")


# The tuner's design: the known-good points, four neighbours of the best of them, then multivariate
# TPE modelling from the fourth finished trial on. Chosen by replaying designs over every point of
# four buckets' spaces measured on the H200 (BENCHMARKS.md, "The tuner's search against the whole
# space"): it lands where walking every neighbour did in every run of the four; three neighbours
# (the default until 2026-12-04) missed the H = 32 long bucket by 2.9% where a table names its
# variant (the fourth neighbour is the 1.2% point), two missed the packed bucket afresh. At 12
# trials the model gets 1 to 4 of them where a table names the bucket's variant, 2 afresh; in the
# replays random proposals in its place reached the same regret in every bucket (the same pick in 15
# to 20 runs of 20): at this budget the neighbour walk decides.
DEFAULT_DESIGN = Design(neighbours=4, neighbours_afresh=4, startup=4, multivariate=True)

# The designs by name: `tune --design` takes the first two, `regret --replay --design` all of them.
DESIGNS: dict[str, Design] = {
    "default": DEFAULT_DESIGN,
    # The known points, then every neighbour of the best (the default until 2026-12-04): at 12 trials
    # the neighbours never run out and the model proposes nothing, but where the table's choice is the
    # best known point every trial is of a library compiled before the search (tune.first_candidates),
    # where the model's points are compiled a wave of buckets at a time (tune.run).
    "neighbours": Design(),
    # The default before the packed bucket was replayed (2026-12-04): two neighbours, with a table or not.
    "two-neighbours": Design(neighbours=2, startup=4, multivariate=True),
    # The default before the H = 32 long bucket was replayed (2026-12-04): three neighbours, four afresh.
    "three-neighbours": Design(neighbours=3, neighbours_afresh=4, startup=4, multivariate=True),
    "random": Design(known=False, neighbours=0, model="random"),  # pure random search
    "tpe": Design(known=False, neighbours=0, startup=4, multivariate=True),  # pure TPE
}


def total_sources(results) -> dict[str, int]:
    """The trial sources of several buckets' results (study.BucketResult.trial_sources) added up."""
    return {s: sum((r.trial_sources or {}).get(s, 0) for r in results) for s in SOURCES}


def describe_sources(sources: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sources.items() if n) or "none"
