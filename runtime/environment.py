"""The environment variables the op reads on every call, read at the cost of a dict lookup.

os.environ.get of a name that is not set raises and catches a KeyError inside (about a
microsecond), and a call reads five names (the path, the dense path, the table directories), most of
them unset. On POSIX os.environ keeps its bytes in a dict, which os.environ[...] = and del (and so
pytest's monkeypatch) keep current; these read that dict, so a change is seen at once, as with
os.environ.get. Elsewhere they read os.environ.
"""

from __future__ import annotations

import os

_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
if not isinstance(_DATA, dict):
    _DATA = None
_ENCODED: dict[str, bytes] = {}
_ENCODED_NAMES: dict[tuple[str, ...], tuple[bytes, ...]] = {}


def _raw(name: str) -> bytes | None:
    return _DATA.get(_ENCODED.get(name) or _ENCODED.setdefault(name, name.encode()))


def getenv(name: str, default: str | None = None) -> str | None:
    """os.environ.get(name, default)."""
    if _DATA is None:
        return os.environ.get(name, default)
    value = _raw(name)
    return default if value is None else os.fsdecode(value)


def snapshot(names: tuple[str, ...]) -> tuple:
    """The variables' values as they are now, undecoded: equal while none of them changes (a cache key)."""
    if _DATA is None:
        return tuple(os.environ.get(n) for n in names)
    encoded = _ENCODED_NAMES.get(names)
    if encoded is None:
        encoded = _ENCODED_NAMES.setdefault(names, tuple(n.encode() for n in names))
    return tuple(map(_DATA.get, encoded))
