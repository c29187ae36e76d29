"""Which path serves a call: the tuned table's variant for this GPU, or the dense path.

Dense where: the tensors are not on a CUDA GPU; no compiled arch runs on it (needs sm_89+ fp8
tensor cores); there is no table for this GPU (its own, or one of the same arch that says it is
valid here: runtime.table.table_for); the nearest bucket's entry says dense won; the chunk has fewer
rows than any bucket the table was tuned at (fewest_tuned_rows); or FUSED_MQA_TOPK_PATH=dense.
`decide` says which and why (runtime.explain). FUSED_MQA_TOPK_PATH=fused forces the fused kernel
(the table's variant, else the untuned default) wherever one can run.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from .contract import Problem
from .defaults import default_variant
from .environment import getenv, snapshot
from .gpu import device_identity
from .kernel_code import code_digest
from .table import (
    RECHECK_S,
    TABLE_ENVIRONMENT,
    Entry,
    TableChoice,
    current_table,
    load_table,
    nearest,
)
from .variant import Variant

PATH_ENV = "FUSED_MQA_TOPK_PATH"
PATHS = ("auto", "fused", "dense")
# An entry measured for other kernel code (its `code` digest differs from this code's) is trusted
# only where fused beat dense by this much: a kernel change moves a crossover by a few per cent.
STALE_MARGIN = 1.10
_warned_stale: set[str] = set()


def fewest_tuned_rows(entries: list[Entry], heads: int, top_k: int) -> int | None:
    """The fewest rows of any bucket tuned for these heads and top_k (None: none). A fused entry's
    win does not carry down to a chunk of fewer rows: a fused launch's time hardly falls with its rows
    (its CTAs split the keys, whatever the rows), while the dense path's falls with them (one-row calls
    against their nearest bucket: BENCHMARKS.md, "Every chunk a server sends")."""
    rows = [e.rows for e in entries if e.heads == heads and e.top_k == top_k]
    return min(rows) if rows else None


@dataclass(frozen=True)
class Decision:
    """What dispatch does with a call, and why (runtime.explain returns it)."""

    variant: Variant | None  # None: the dense path
    why: str
    gpu: str | None = None  # the GPU identity key
    table: str | None = None  # the table read, and why that one
    entry: Entry | None = None  # the nearest bucket's entry
    looked_up: str | None = None  # the rows and longest row the bucket was looked up by, and whence that

    @property
    def path(self) -> str:
        return "dense" if self.variant is None else "fused"

    def __str__(self) -> str:
        lines = [f"path: {self.path}" + (f" ({self.variant.name})" if self.variant else ""), f"why: {self.why}"]
        if self.gpu:
            lines.append(f"gpu: {self.gpu}")
        if self.table:
            lines.append(f"table: {self.table}")
        if self.looked_up:
            lines.append(f"looked up by: {self.looked_up}")
        if self.entry:
            e = self.entry
            packed = f" in {e.requests} requests" if e.requests > 1 else ""
            lines.append(f"bucket: heads {e.heads}, top-k {e.top_k}, {e.rows} rows x {e.keys} keys{packed}: {e.variant}, "
                         f"fused {e.fused_ms:.3f} ms vs dense {e.dense_ms:.3f} ms")
        return "\n".join(lines)


def decide(problem: Problem) -> Decision:
    """The path for this problem, and why. Buckets are looked up by the rows, the most keys one row
    sees (Problem.longest_row) and how many such requests the chunk's keys hold (Problem.packing),
    the shapes the tuner's chunks have: a chunk of packed requests is not timed like one request of
    the chunk's total keys."""
    whence = "the chunk's N (no max_visible_keys, not validated)" if problem.visible_keys is None else "measured or told"
    packed = f", {problem.keys} keys: {problem.packing} requests of it" if problem.packing > 1 else ""
    return replace(_decision_for(problem),
                   looked_up=f"{problem.rows} rows, longest row {problem.longest_row} keys ({whence}){packed}")


def _decision_for(problem: Problem) -> Decision:
    """decide()'s answer without its looked_up line: what every call of the op asks, so the answer
    is kept per (table, shape) until the table changes."""
    path = getenv(PATH_ENV, "auto")
    if path not in PATHS:
        raise ValueError(f"{PATH_ENV}={path!r}: expected one of {PATHS}")
    if path == "dense":
        return Decision(None, f"{PATH_ENV}=dense")
    if problem.device.type != "cuda":
        return Decision(None, f"the inputs are on {problem.device}, not a CUDA GPU")
    identity = device_identity(problem.device.index if problem.device.index is not None else torch.cuda.current_device())
    choice, mtime = current_table(identity)
    return _table_decision(path, identity, choice, mtime, problem.heads, problem.top_k, problem.rows,
                           problem.longest_row, problem.packing)


@lru_cache(maxsize=4096)
def _table_decision(path: str, identity, choice: TableChoice, mtime: int, heads: int, top_k: int, rows: int,
                    longest_row: int, packing: int) -> Decision:
    """What the table (`choice`, as of `mtime`) says for a chunk of this shape on this GPU, kept per
    (table, shape) until the table changes."""
    problem = Problem(rows=rows, keys=longest_row * packing, heads=heads, top_k=top_k, device=torch.device("cuda"),
                      visible_keys=longest_row)
    entries = load_table(choice.path) or []
    table = f"{choice.path} ({choice.why})" if choice.path else choice.why
    if identity.arch is None:
        return Decision(None, f"{identity.name} has no fp8 tensor cores (needs sm_89+)", identity.key, table)
    entry = nearest(entries, heads, top_k, rows, longest_row, packing)
    stale = is_stale(entry)
    if stale and str(choice.path) not in _warned_stale:
        _warned_stale.add(str(choice.path))
        warnings.warn(f"{choice.path} holds entries measured for other kernel code ({entry.code}; this code is "
                      f"{code_digest()}): they are trusted only where fused won by {STALE_MARGIN:.2f}x; "
                      f"re-time them with `python -m generator tune --refresh`", RuntimeWarning, stacklevel=2)
    fewest = fewest_tuned_rows(entries, heads, top_k)
    variant = entry_variant(entry, identity.arch, problem, fewest, force_fused=path == "fused")
    if path == "fused":
        why = f"{PATH_ENV}=fused: " + ("the nearest bucket's variant" if entry else "no bucket: the untuned default")
    elif entry is None:
        why = "no tuned bucket for these heads and top-k on this GPU"
    elif variant is None and Variant.from_name(entry.variant).arch != identity.arch:
        why = f"the nearest bucket's variant is built for {Variant.from_name(entry.variant).arch}, not {identity.arch}"
    elif variant is None and entry.use == "fused" and rows < fewest:
        why = (f"{rows} rows, fewer than any tuned bucket's ({fewest}): a fused win there does not carry down to "
               f"fewer rows (runtime.dispatch.fewest_tuned_rows)")
    elif variant is None and entry.use == "fused":
        why = (f"the nearest bucket's entry was measured for other kernel code ({entry.code}, not {code_digest()}) "
               f"and fused won there by {entry.dense_ms / entry.fused_ms:.2f}x, under the {STALE_MARGIN:.2f}x a "
               f"stale entry needs")
    elif variant is None:
        why = f"in the nearest bucket the dense path won ({entry.dense_ms / entry.fused_ms:.2f}x)"
    else:
        why = f"in the nearest bucket the fused variant won ({entry.dense_ms / entry.fused_ms:.2f}x)"
        if stale:
            why += f", measured for other kernel code ({entry.code}, not {code_digest()}) but by more than {STALE_MARGIN:.2f}x"
    return Decision(variant, why, identity.key, table, entry)


_chosen: dict = {}
_CHOICE_ENVIRONMENT = (PATH_ENV, *TABLE_ENVIRONMENT)  # what a kept choice depends on besides the table files


def choose_variant(problem: Problem) -> Variant | None:
    """The fused variant to run for this problem, or None for the dense path. Every call of the op
    asks, so the answer is kept per shape for RECHECK_S (as the table files are), while the path
    variables and the table directories follow stay as they were. (The problem is its own key: a named
    tuple hashes faster than a key built from its fields.)"""
    state = snapshot(_CHOICE_ENVIRONMENT)
    now = time.monotonic()
    kept = _chosen.get(problem)
    if kept is not None and kept[1] == state and now - kept[0] < RECHECK_S:
        return kept[2]
    variant = _decision_for(problem).variant
    if len(_chosen) >= 4096:  # (a server's many shapes: keep the dict small)
        _chosen.clear()
    _chosen[problem] = (now, state, variant)
    return variant


def select_variant(entries: list[Entry], arch: str | None, problem: Problem, force_fused: bool = False) -> Variant | None:
    """The table's answer for this problem on a GPU whose builds target `arch` (None: no fp8 tensor
    cores); None means dense. force_fused takes the variant even where dense won, or the default."""
    if arch is None:
        return None
    return entry_variant(nearest(entries, problem.heads, problem.top_k, problem.rows, problem.longest_row,
                                 problem.packing), arch, problem, fewest_tuned_rows(entries, problem.heads, problem.top_k),
                         force_fused)


def is_stale(entry: Entry | None) -> bool:
    """Whether the entry records that it was measured for other kernel code than this."""
    return bool(entry and entry.code and entry.code != code_digest())


def entry_variant(entry: Entry | None, arch: str, problem: Problem, fewest_rows: int | None = None,
                  force_fused: bool = False) -> Variant | None:
    """What the nearest bucket's entry says for a GPU whose builds target `arch` (see select_variant);
    a stale entry (measured for other kernel code) needs fused to have won by STALE_MARGIN, and a
    chunk of fewer rows than `fewest_rows` (fewest_tuned_rows) takes the dense path."""
    if entry is not None:
        variant = Variant.from_name(entry.variant)
        won = (entry.use == "fused" and (not is_stale(entry) or entry.dense_ms >= STALE_MARGIN * entry.fused_ms)
               and (fewest_rows is None or problem.rows >= fewest_rows))
        if variant.arch == arch and (won or force_fused):
            return variant
    return default_variant(problem.heads, problem.top_k, arch) if force_fused else None
