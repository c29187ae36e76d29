"""Tuned-config tables: one JSON file per GPU model, and the nearest-bucket lookup.

The tables this package ships are package data (tuned_configs/, installed as runtime.tuned_configs:
runtime.data; never written). Tables a user tunes go to FUSED_MQA_TOPK_TABLES, else to
$XDG_DATA_HOME/fused-mqa-topk/tables (~/.local/share/...), and are read before the shipped ones.
A table is plain data, written by `python -m generator tune`:
    {"gpu": "NVIDIA H200", "entries": [{"heads": 32, "top_k": 2048, "rows": 4096, "keys": 131072,
      "variant": "mqa_topk_...", "fused_ms": 1.9, "dense_ms": 4.1, "use": "fused"}, ...], ...}
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from .data import data_dir
from .environment import snapshot
from .gpu import GpuIdentity

TABLE_DIR_ENV = "FUSED_MQA_TOPK_TABLES"
TABLE_ENVIRONMENT = (TABLE_DIR_ENV, "XDG_DATA_HOME", "HOME")  # the variables the table directories follow
SHIPPED_TABLE_DIR = data_dir("tuned_configs")  # the tables installed with the package


def longest_row(keys: int, requests: int) -> int:
    """The most keys a row of a tuned chunk sees: it packs `requests` causal requests of keys / requests each."""
    return keys // requests


@dataclass(frozen=True)
class Entry:
    heads: int
    top_k: int
    rows: int  # chunk rows (M) the bucket was tuned at
    keys: int  # the bucket chunk's keys (its N): `requests` causal requests of keys / requests each
    variant: str  # best fused variant's name
    fused_ms: float  # medians, fused and dense timed alike (interleaved) where the spreads are recorded
    dense_ms: float
    # Provenance, where the tuner recorded it (older entries: the defaults). A spread is the relative
    # half-width of the timings' middle half (interquartile range / 2 / median).
    fused_spread: float = 0.0
    dense_spread: float = 0.0
    measured: str = ""  # when (ISO 8601, UTC)
    code: str = ""  # generator.provenance.code_digest() of the kernels timed
    trials: int = 0  # fused variants measured in the bucket's study
    verified: str = ""  # what the winner's output passed
    requests: int = 1  # requests packed side by side in the bucket's chunk (tune.Bucket)
    # Wall seconds the run that wrote the entry spent on its bucket on the GPU: the study's search
    # (the builds it waited for included) and the settling; where workers searched (their wall time
    # is the table's search_wall_s) or a refresh re-timed it, the settling only.
    tune_s: float = 0.0
    # Its measured trials by where their points came from: {"start": n, "table": n, "neighbour": n,
    # "model": n} (the tuner's sampler, generator/search.py); None in entries written before it was kept.
    trial_sources: dict | None = field(default=None, hash=False, compare=False)
    # The best median each kernel kind reached in the bucket's study, ms ({"gated": .., "streaming": ..,
    # "mmasync": ..}; a trial the pruner stopped counts with its partial median): the evidence a later
    # study's starting points are pruned by (generator.tune.losing_kinds). None where not kept.
    kind_ms: dict | None = field(default=None, hash=False, compare=False)

    @property
    def longest_row(self) -> int:
        """The most keys a row of the bucket's chunk sees: what the runtime looks buckets up by."""
        return longest_row(self.keys, self.requests)

    @property
    def bucket(self) -> tuple:
        """What names the bucket: an entry per (heads, top_k, rows, keys, requests) in a table."""
        return (self.heads, self.top_k, self.rows, self.keys, self.requests)

    @property
    def use(self) -> str:
        """fused where it beat dense by more than the two timings' spreads together (the noise)."""
        return "fused" if self.fused_ms * (1 + self.fused_spread + self.dense_spread) < self.dense_ms else "dense"

    def to_json(self) -> dict:
        return {**asdict(self), "use": self.use, "speedup": round(self.dense_ms / self.fused_ms, 3)}

    @classmethod
    def from_json(cls, row: dict) -> Entry:
        """An entry from a table file's row (what to_json adds beyond the fields, "use" and "speedup", skipped)."""
        return cls(**{k: row[k] for k in cls.__dataclass_fields__ if k in row})


def table_dir() -> Path:
    """Where tuned tables are written, and read first: FUSED_MQA_TOPK_TABLES, else the user's data dir."""
    env = os.environ.get(TABLE_DIR_ENV)
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data) / "fused-mqa-topk" / "tables"


def find_table(key: str, folder: str = "", without: Path | None = None) -> Path | None:
    """The table named for this GPU identity key: the user's (table_dir()) if there is one, else the
    shipped one, else None; in `folder` of both ("decode": runtime.decode_table's); as if the file
    `without` did not exist."""
    for path in (table_path(key, table_dir() / folder), table_path(key, SHIPPED_TABLE_DIR / folder)):
        if path.is_file() and not same_file(path, without):
            return path
    return None


def same_file(path: Path, other: Path | None) -> bool:
    """Whether `other` names the file at `path` (however each was spelt: relative, through a link)."""
    return other is not None and path.resolve() == other.resolve()


@dataclass(frozen=True)
class TableChoice:
    path: Path | None
    why: str
    borrowed: bool = False  # tuned on another GPU of this one's arch


def table_for(identity: GpuIdentity, folder: str = "") -> TableChoice:
    """The table dispatch reads for this GPU: its own; else the table of the same arch tuned on the
    GPU nearest in SM count (at a tie, the first of table_paths), where the tuner recorded that its
    variants are valid on every GPU of that arch (`portable_arch`: they were checked against the
    arch's limits, not that GPU's); else none.
    In `folder` of the table directories ("decode": runtime.decode_table's). The answer is kept until
    a table directory changes (two stats of paths made once per environment); the op's calls ask
    current_table, which looks at the files less often."""
    user = user_table_dir()
    return _table_for(identity, folder, user, mtime_ns(os.path.join(user, folder)),
                      mtime_ns(str(SHIPPED_TABLE_DIR / folder)))


RECHECK_S = 0.5  # how long a running process trusts what it last saw of the table files
_recent: dict = {}


def current_table(identity: GpuIdentity) -> tuple[TableChoice, int]:
    """table_for(identity) and its file's modification time (0: no table), for the op's every call:
    looked at again at most every RECHECK_S seconds (recently_looked)."""
    def look() -> tuple[TableChoice, int]:
        choice = table_for(identity)
        return choice, mtime_ns(str(choice.path)) if choice.path else 0

    return recently_looked(identity, look)


def recently_looked(key, look):
    """look()'s answer for `key`, kept and asked again at most every RECHECK_S seconds, for what every
    call of an op reads from the table files (three stats a call were a tenth of a one-row call's host
    time): a table written by a tuner is noticed within that, a change of FUSED_MQA_TOPK_TABLES,
    XDG_DATA_HOME or HOME at once."""
    user = user_table_dir()
    now = time.monotonic()
    seen = _recent.get((key, user))
    if seen is not None and now - seen[0] < RECHECK_S:
        return seen[1]
    answer = look()
    if len(_recent) >= 4096:  # (runtime.paged keeps a route per step shape, and a server sends many)
        _recent.clear()
    _recent[(key, user)] = (now, answer)
    return answer


def forget_recent() -> None:
    """Drops what recently_looked kept (tests that write tables under a running process)."""
    _recent.clear()


def user_table_dir() -> str:
    """table_dir() as a string, made once per value of the variables it follows: table_dir() itself
    costs tens of microseconds (pathlib), and every call asks."""
    return _user_table_dir(snapshot(TABLE_ENVIRONMENT))


@lru_cache(maxsize=8)
def _user_table_dir(environment: tuple) -> str:
    return str(table_dir())


def mtime_ns(path: str) -> int:
    """The modification time of a file or directory (ns), -1 where there is none."""
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return -1


@lru_cache(maxsize=32)
def _table_for(identity: GpuIdentity, folder: str, directory: str, mtime: int, shipped_mtime: int) -> TableChoice:
    return served_table(identity, folder)


def served_table(identity: GpuIdentity, folder: str = "", without: Path | None = None) -> TableChoice:
    """What table_for serves this GPU, looked up afresh, as if the file `without` did not exist (tune asks
    what the runtime served it before the table its run is writing: a run cut short and resumed
    finds that table partial)."""
    own = find_table(identity.key, folder, without)
    if own is not None:
        return TableChoice(own, f"{identity.key}'s own table")
    if identity.arch is None:
        return TableChoice(None, f"{identity.name} has no fp8 tensor cores (sm_89+): no table applies")
    portable = [(path, meta) for path in table_paths(folder)
                if not same_file(path, without) and (meta := table_meta(path)).get("portable_arch") == identity.arch]
    if not portable:
        return TableChoice(None, f"no table for {identity.key}, and none tuned on another {identity.arch} GPU says it is "
                                 f"valid here")

    def distance(item) -> float:
        return abs(math.log2(max(1, item[1].get("sms", 1)) / max(1, identity.sms)))

    # (tables of GPUs at the same distance: the first by file name, the user's before the shipped; of the
    # shipped decode tables the H100 SXM's before the H200's, both 132 SMs)
    path, meta = min(portable, key=distance)
    source = meta.get("identity", path.stem)
    why = (f"no table for {identity.key}: borrowed {source}'s (same arch {identity.arch}, nearest SM count; its "
           f"variants are valid on every {identity.arch} GPU, but its timings, and so where fused beats dense, were "
           f"measured on {source} and never on {identity.key}: `python -m generator tune` here makes this GPU's own)")
    return TableChoice(path, why, borrowed=True)


def table_paths(folder: str = "") -> list[Path]:
    """Every table the runtime could read (in `folder` of the table directories): the user's, then the
    shipped ones."""
    return sorted((table_dir() / folder).glob("*.json")) + sorted((SHIPPED_TABLE_DIR / folder).glob("*.json"))


def table_path(key: str, directory: Path | None = None) -> Path:
    """The table file of a GPU identity key (runtime.gpu) in `directory` (default table_dir()): the
    one place a key becomes a file name ('H200-132SM' stays)."""
    return (directory or table_dir()) / f"{re.sub(r'[^A-Za-z0-9.-]+', '_', key).strip('_')}.json"


def load_table(path: Path | None) -> list[Entry] | None:
    """The entries of a table file, or None if there is none (cached until the file changes)."""
    if path is None:
        return None
    mtime = mtime_ns(str(path))
    return None if mtime < 0 else _load(str(path), mtime)


def table_meta(path: Path) -> dict:
    """A table file's fields other than its entries ({} where there is no file), of either kind of table
    (a decode table's entries are not Entries)."""
    mtime = mtime_ns(str(path))
    return {} if mtime < 0 else _meta(str(path), mtime)


@lru_cache(maxsize=16)
def _meta(path: str, mtime: int) -> dict:
    return {k: v for k, v in json.loads(Path(path).read_text()).items() if k != "entries"}


@lru_cache(maxsize=16)
def _load(path: str, mtime: int) -> list[Entry]:
    return [Entry.from_json(e) for e in json.loads(Path(path).read_text())["entries"]]


def save_table(path: Path, identity: str, entries: list[Entry], meta: dict) -> None:
    """Writes a table for the GPU identity key `identity` (atomically), with `meta` beside its entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"identity": identity, **meta, "entries": [e.to_json() for e in sorted(entries, key=lambda e: e.bucket)]}
    tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def nearest(entries: list[Entry], heads: int, top_k: int, rows: int, keys: int, packing: int = 1) -> Entry | None:
    """The entry for these heads and top_k whose (rows, longest row, requests) is nearest on a log
    scale to (rows, keys, packing): `keys` the most keys one row of the call sees, `packing` how many
    times the call's key buffer holds that many keys (Problem.packing). Eight packed 2K-row requests of
    16K keys and one causal 16K x 16K chunk have the same rows and longest row, but the packed rows
    see 14K-16K keys each and the causal ones 0-16K: the request count tells them apart."""
    same = [e for e in entries if e.heads == heads and e.top_k == top_k]
    if not same:
        return None

    def distance(e: Entry) -> float:
        return (math.log2(max(rows, 1) / e.rows) ** 2 + math.log2(max(keys, 1) / e.longest_row) ** 2
                + math.log2(max(packing, 1) / e.requests) ** 2)

    return min(same, key=distance)
