"""Which path serves a decode step: the paged kernel or our dense kernels' paged build, from a
per-GPU table of both paths' times (`python -m generator decode --tune` writes it).

One JSON file per GPU model in a `decode` folder beside the prefill tables (the user's, read first,
then the shipped tuned_configs/decode/; a GPU without one borrows, as for prefill, the table of its
arch timed on the GPU nearest in SM count), plain data:
    {"identity": "H200-132SM", "code": "<paged digest>.<prefill digest>", "sms": 132, "portable_arch": "sm90a",
     "entries": [{"heads": 64,
      "top_k": 2048, "next_n": 1, "batch": 1, "context": 8192, "kernel_ms": 0.035, "dense_ms": 0.026,
      "dense_planned_ms": 0.011}, ...]}
`dense_ms` is the dense path as called with no layout (it lays the step out itself: a few small
kernels), `dense_planned_ms` with the step's layout made once beforehand (runtime.decode_layout, as a
server makes it once a step for every indexer layer). Entries timed on other kernel code than this
package's are not used: a step then takes the paged kernel, as with no table, and the first call that
reads such a table warns once (without a warning, the shipped table's going stale at 7453c54 went
unseen).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from .kernel_code import code_digest, paged_code_digest
from .gpu import GpuIdentity
from .table import mtime_ns, recently_looked, table_dir, table_for, table_path

DECODE_FOLDER = "decode"
# The dense path is taken only where it beat the kernel by more than this share of the kernel's time
# (two medians of graph replays; a closer call keeps the kernel, whose memory does not grow with the step).
MARGIN = 0.05


@dataclass(frozen=True)
class DecodeEntry:
    heads: int
    top_k: int
    next_n: int
    batch: int
    context: int  # tokens each request of the timed step held (its block-table rows exactly that long)
    kernel_ms: float  # medians of CUDA-graph replays, the validate=False call
    dense_ms: float
    dense_planned_ms: float
    measured: str = ""  # when (ISO 8601, UTC)

    def use(self, planned: bool) -> str:
        """"dense" where the dense path (with a layout given, where `planned`) beat the kernel by MARGIN."""
        dense = self.dense_planned_ms if planned else self.dense_ms
        return "dense" if dense < self.kernel_ms * (1 - MARGIN) else "kernel"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict) -> DecodeEntry:
        """An entry from a table file's row (keys the entry does not have, such as a tune log's, skipped)."""
        return cls(**{k: row[k] for k in cls.__dataclass_fields__ if k in row})


def decode_code() -> str:
    """The kernel code a decode table's times hold for: the paged kernel's and the dense kernels'."""
    return f"{paged_code_digest()}.{code_digest()}"


def decode_table_path(key: str, directory: Path | None = None) -> Path:
    """The decode table of a GPU identity key in the `decode` folder of `directory` (default table_dir())."""
    base = directory or table_dir()
    return table_path(key, base / DECODE_FOLDER)


@dataclass(frozen=True)
class DecodeTable:
    path: Path | None
    entries: tuple[DecodeEntry, ...]  # those timed on this package's kernel code
    why: str  # where the entries come from, or why there are none
    borrowed: bool = False  # timed on another GPU of this one's arch (runtime.table.table_for)
    _nearest: dict = field(default_factory=dict, compare=False, repr=False)  # (the lookups made, kept)

    def nearest(self, heads: int, top_k: int, next_n: int, batch: int, context: int) -> DecodeEntry | None:
        """nearest_decode over these entries, kept per step shape: an eager decode call asks it every
        time, and a search over the whole table cost about 70 us of host time."""
        key = (heads, top_k, next_n, batch, context)
        if key not in self._nearest:
            self._nearest[key] = nearest_decode(self.entries, *key)
        return self._nearest[key]


def decode_table(identity: GpuIdentity) -> DecodeTable:
    """The decode entries dispatch reads for this GPU: its own table (the user's, else the shipped one),
    else one timed on the GPU of its arch nearest in SM count (runtime.table.table_for: every paged and
    dense decode build fits every GPU of the arch; where each path wins was measured there, not here).
    Asked on every automatic call: the files are looked at again at most every RECHECK_S seconds
    (runtime.table.recently_looked)."""
    def look() -> DecodeTable:
        choice = table_for(identity, DECODE_FOLDER)
        return (DecodeTable(None, (), f"no decode table: {choice.why}") if choice.path is None
                else _read(str(choice.path), mtime_ns(str(choice.path)), decode_code(), choice.why, choice.borrowed))

    return recently_looked((DECODE_FOLDER, identity), look)


@lru_cache(maxsize=8)
def _read(path: str, mtime: int, code: str, why: str, borrowed: bool) -> DecodeTable:
    data = json.loads(Path(path).read_text())
    if data.get("code") != code:
        stale = (f"{path} was timed on other kernel code ({data.get('code')}, this is {code}): "
                 "`python -m generator decode --tune` times this code's")
        warnings.warn(f"{stale}; until then every decode step takes the paged kernel", RuntimeWarning, stacklevel=2)
        return DecodeTable(Path(path), (), stale, borrowed)
    entries = tuple(DecodeEntry.from_json(e) for e in data.get("entries", []))
    return DecodeTable(Path(path), entries, f"{path}: {why}", borrowed)


def nearest_decode(entries, heads: int, top_k: int, next_n: int, batch: int, context: int) -> DecodeEntry | None:
    """The entry of these heads, top_k and next_n whose (batch, context) is nearest on a log scale."""
    same = [e for e in entries if (e.heads, e.top_k, e.next_n) == (heads, top_k, next_n)]
    return min(same, key=lambda e: math.log2(max(batch, 1) / e.batch) ** 2 + math.log2(max(context, 1) / e.context) ** 2,
               default=None)


def save_decode_table(path: Path, identity: str, entries: list[DecodeEntry], meta: dict) -> None:
    """Writes a decode table (atomically): `meta` (the GPU, the command, ...) and the entries, with the code digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    order = lambda e: (e.heads, e.top_k, e.next_n, e.batch, e.context)  # noqa: E731
    data = {"identity": identity, "code": decode_code(), **meta,
            "entries": [e.to_json() for e in sorted(entries, key=order)]}
    tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
