"""Which kernel code this is: one digest of everything that decides what a library computes.

A tuned entry is only as good as the code it timed: a table made for other kernels says so at run
time (runtime.dispatch); optuna studies are keyed by this digest, so that a stored study never
reuses timings of older kernels; and a prebuilt library is served by the manifest's record of the
digest it was built from (runtime.library_cache), without rendering its source again.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from .data import data_dir

# The modules whose content decides what a variant's library computes and how fast: the parameters
# the templates are rendered from, the rendering, and the targets and compiler flags (arch.py). Not
# build.py: how libraries are compiled and cached does not change what they compute.
KERNEL_MODULES = ("arch.py", "variant.py", "dense_variant.py", "paged_variant.py", "render.py")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """16 hex digits of sha256 over the templates and KERNEL_MODULES (file names and bytes)."""
    h = hashlib.sha256()
    templates = data_dir("templates")
    files = sorted(p for p in templates.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        h.update(str(path.relative_to(templates)).encode() + b"\0" + path.read_bytes() + b"\0")
    package = Path(__file__).resolve().parent
    for name in KERNEL_MODULES:
        h.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]
