"""How a tuning study searches the variant space: an optuna sampler and an optuna pruner.

KnownGoodSampler carries out a design.Design: the known-good points first (the arch's starting
points and the table's current choice), then up to a number of one-axis neighbours of the best point
measured so far, then a model-based sampler. It claims each point it proposes in the trial's system
attributes, after every earlier trial has claimed its own, so workers sharing one storage (several
GPUs, several hosts) never propose the same point twice. The tuner claims the model-based sampler's
points the same way and skips one already taken.

SlowerThanBestPruner stops a candidate whose partial timings already make it hopeless: its running
median is over `ratio` times the best complete trial's time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from runtime.variant import Variant

from .design import SOURCES

CLAIM = "variant"  # a trial's system attribute: the name of the variant it measures
SOURCE = "source"  # and where its point came from, one of SOURCES
WORKER = "worker"  # and the process that measured it (this_worker)
WORKER_PROCESS = "worker_process"  # and which process that was: its boot and start (process_identity)
FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


def claim_of(trial: FrozenTrial) -> str | None:
    return trial.system_attrs.get(CLAIM)


def claim(study: optuna.Study, trial, name: str) -> None:
    """Records that `trial` (a Trial or FrozenTrial) measures the variant `name`."""
    study._storage.set_trial_system_attr(trial._trial_id, CLAIM, name)


def set_source(study: optuna.Study, trial, source: str) -> None:
    """Records where `trial`'s point came from (one of SOURCES)."""
    study._storage.set_trial_system_attr(trial._trial_id, SOURCE, source)


def this_worker() -> str:
    """This process as a tuning worker: host, the GPUs it sees (CUDA_VISIBLE_DEVICES, as workers.py
    gives each worker one) and process id."""
    import os
    import socket

    return f"{socket.gethostname()}:gpu{os.environ.get('CUDA_VISIBLE_DEVICES', '*')}:{os.getpid()}"


def boot_id() -> str | None:
    """This boot of this machine (Linux's boot_id), or None where /proc cannot say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def process_identity(pid: int | str = "self") -> str | None:
    """Which process `pid` is, beyond its number: this boot of the machine (boot_id) and the process's
    start time (clock ticks since boot, /proc/PID/stat). It tells apart machines that share a host name
    (fresh cloud instances all called "vm") and a process id reused after a reboot or by a later
    process. None where /proc cannot say (not Linux, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    boot, started = boot_id(), stat.rpartition(")")[2].split()[19]  # (field 22, after the command's parentheses)
    return None if boot is None else f"{boot}:{started}"


def set_worker(study: optuna.Study, trial) -> None:
    """Records that this process measures `trial` (from when it is asked: a process killed between
    asking a batch and measuring it leaves its trials RUNNING, and gone_worker tells them apart)."""
    study._storage.set_trial_system_attr(trial._trial_id, WORKER, this_worker())
    if (identity := process_identity()) is not None:
        study._storage.set_trial_system_attr(trial._trial_id, WORKER_PROCESS, identity)


def gone_worker(trial: FrozenTrial) -> bool:
    """Whether the process recorded as `trial`'s worker (this_worker) ran on this machine and is gone:
    its RUNNING trial will never finish. On this machine means this host name and, where recorded
    (process_identity), this boot; gone means no such process id, or one that started at another time
    (the id was reused). A worker of another machine, a machine of the same name included, or of an
    earlier boot, or none recorded, cannot be told dead from here (reclaim_stale waits out its age for
    those)."""
    import os
    import socket

    host, _, pid = (trial.system_attrs.get(WORKER) or "").rpartition(":")
    if host.rpartition(":gpu")[0] != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    recorded = trial.system_attrs.get(WORKER_PROCESS)
    if recorded is not None and recorded.partition(":")[0] != boot_id():
        return False  # another machine of this name, or this one before a reboot
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # (alive, another user's)
        pass
    return recorded is not None and process_identity(pid) not in (None, recorded)  # (alive: the same process?)


def measured_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's measured trials: complete, failed, or stopped by the pruner, with a point claimed
    (not an invalid point pruned with its reason, nor a model point another trial had taken)."""
    return [t for t in study.get_trials(deepcopy=False, states=FINISHED)
            if claim_of(t) and "rejected" not in t.user_attrs and "duplicate" not in t.user_attrs]


def trial_workers(study: optuna.Study) -> dict[str, int]:
    """How many of the study's measured trials each worker measured (trials measured before workers were
    recorded are left out)."""
    out: dict[str, int] = {}
    for t in measured_trials(study):
        if worker := t.system_attrs.get(WORKER):
            out[worker] = out.get(worker, 0) + 1
    return out


def trial_sources(study: optuna.Study) -> dict[str, int]:
    """How many of the study's measured trials came from each source."""
    out = dict.fromkeys(SOURCES, 0)
    for t in measured_trials(study):
        if (source := t.system_attrs.get(SOURCE)) in out:
            out[source] += 1
    return out


def kind_times(study: optuna.Study) -> dict[str, float]:
    """The best median each kernel kind (space.kind_of) reached among the study's measured trials: a
    complete trial's value, or the running median a trial the pruner stopped had reached (its kind
    was at least that slow there)."""
    from .space import kind_of

    out: dict[str, float] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        name = t.user_attrs.get("variant")  # (every measured trial has it; older studies' trials no claim)
        ms = t.value if t.state == TrialState.COMPLETE else (t.intermediate_values.get(t.last_step)
                                                              if t.last_step is not None else None)
        if name and ms is not None:
            kind = kind_of(Variant.from_name(name))
            out[kind] = round(min(out.get(kind, ms), ms), 4)
    return out


def reclaim_stale(study: optuna.Study, stale_after_s: float) -> list[tuple[str, str]]:
    """Ends every trial a dead worker left RUNNING (it would count against the budget forever) as
    failed, marked "reclaimed" (study.counts leaves it out of the measured), and frees its point for
    a new trial: at once where its worker was a process of this host that is gone (gone_worker: a run
    cut short and resumed), else once it has run over stale_after_s. Returns the reclaimed points'
    names, each with why."""
    import datetime

    now = datetime.datetime.now()
    reclaimed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if gone_worker(t):
            why = f"its worker {t.system_attrs[WORKER]} is gone"
        elif t.datetime_start is not None and (now - t.datetime_start).total_seconds() > stale_after_s:
            why = f"RUNNING over {stale_after_s:.0f} s"
        else:
            continue
        reclaimed.append((claim_of(t) or "(no point)", why))
        release(study, t, why)
    return reclaimed


def release(study: optuna.Study, trial, why: str) -> None:
    """Ends a RUNNING trial (a Trial or FrozenTrial) unmeasured: failed, marked "reclaimed" with `why`
    (study.counts leaves it out of the measured), its point freed for a new trial."""
    study._storage.set_trial_user_attr(trial._trial_id, "reclaimed", why)
    study._storage.set_trial_system_attr(trial._trial_id, CLAIM, None)
    try:
        study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
    except (RuntimeError, ValueError):  # its worker finished it meanwhile
        pass


def taken(study: optuna.Study, number: int, wait_s: float = 30.0) -> set[str]:
    """The variants every trial numbered below `number` claimed, once each has claimed one or
    finished (a trial is created a moment before its claim: waiting closes that window between
    workers); a trial that does neither within wait_s (a dead worker) is passed over."""
    deadline = time.monotonic() + wait_s
    while True:
        trials = study.get_trials(deepcopy=False)
        pending = [t for t in trials if t.number < number and claim_of(t) is None and t.state not in FINISHED]
        if not pending or time.monotonic() > deadline:
            return {c for t in trials if t.number != number and (c := claim_of(t))}
        time.sleep(0.01)


class KnownGoodSampler(BaseSampler):
    """`known`: the known-good points in order; `sources` names where each came from ("start" or
    "table", by variant name; "start" where unnamed); at most `max_neighbours` trials (None: no
    limit) of one-axis neighbours, then `then` proposes."""

    def __init__(self, known: list[Variant], neighbours: Callable[[Variant], list[Variant]], then: BaseSampler,
                 wait_s: float = 30.0, sources: dict[str, str] | None = None, max_neighbours: int | None = None):
        self._known = list(dict.fromkeys(known))
        self._sources = sources or {}
        self._neighbours = neighbours
        self._max_neighbours = max_neighbours
        self._then = then
        self._wait_s = wait_s
        self._proposed: dict[int, Variant] = {}  # trial id -> the point this sampler gave it

    def proposed(self, trial) -> Variant | None:
        """The point this sampler proposed for `trial`, or None (the model-based sampler's trial)."""
        return self._proposed.get(trial._trial_id)

    def is_last_known(self, point: Variant | None) -> bool:
        """Whether `point` is the last of the known-good points (what follows it depends on them)."""
        return point is not None and point == self._known[-1]

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._then.before_trial(study, trial)
        found = self._next_point(study, taken(study, trial.number, self._wait_s))
        if found is not None:
            point, source = found
            self._proposed[trial._trial_id] = point
            claim(study, trial, point.name)
            set_source(study, trial, source)

    def models_next(self, study: optuna.Study) -> bool:
        """Whether the next trial goes to the model: every known point is taken, and the neighbours
        allowed are taken or spent (or nothing is complete to take neighbours of)."""
        return self._next_point(study, {c for t in study.get_trials(deepcopy=False) if (c := claim_of(t))}) is None

    def _next_point(self, study: optuna.Study, busy: set[str]) -> tuple[Variant, str] | None:
        """The point this sampler gives the next trial and where it comes from, or None (the model's)."""
        point = next((v for v in self._known if v.name not in busy), None)
        if point is not None:
            return point, self._sources.get(point.name, "start")
        if self._neighbours_spent(study):
            return None
        done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if claim_of(t)]
        if not done:
            return None
        best = Variant.from_name(claim_of(min(done, key=lambda t: t.value)))
        point = next((w for w in self._neighbours(best) if w.name not in busy), None)
        return None if point is None else (point, "neighbour")

    def _neighbours_spent(self, study: optuna.Study) -> bool:
        if self._max_neighbours is None:
            return False
        proposed = sum(t.system_attrs.get(SOURCE) == "neighbour" and claim_of(t) is not None
                       for t in study.get_trials(deepcopy=False))
        return proposed >= self._max_neighbours

    def infer_relative_search_space(self, study, trial):
        return self._then.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return {} if trial._trial_id in self._proposed else self._then.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        point = self._proposed.get(trial._trial_id)
        if point is not None:
            return getattr(point, param_name)
        return self._then.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._proposed.pop(trial._trial_id, None)
        self._then.after_trial(study, trial, state, values)


class SlowerThanBestPruner(BasePruner):
    """Prunes a trial once `min_steps` timings are in and their running median (the last reported
    value) is over `ratio` times the best complete trial's value."""

    def __init__(self, ratio: float = 1.5, min_steps: int = 2):
        self.ratio = ratio
        self.min_steps = min_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step + 1 < self.min_steps:
            return False
        try:
            best = study.best_value
        except ValueError:  # nothing complete yet
            return False
        return trial.intermediate_values[step] > self.ratio * best
