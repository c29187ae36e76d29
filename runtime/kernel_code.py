"""Which kernel code this is: one digest of everything that decides what a library computes.

A tuned entry is only as good as the code it timed: a table made for other kernels says so at run
time (runtime.dispatch); optuna studies are keyed by this digest, so that a stored study never
reuses timings of older kernels; and a prebuilt library is served by the manifest's record of the
digest it was built from (runtime.library_cache), without rendering its source again.

The prefill kernels (fused and dense) and the paged decode kernel are digested apart: each digest
covers the shared headers (templates/common/) and its own templates and modules, so a new or changed
decode kernel leaves the prefill table and its prebuilt libraries current, and the other way round.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from .data import data_dir

# The modules whose content decides what a variant's library computes and how fast: the parameters
# the templates are rendered from, the rendering, and the targets and compiler flags (arch.py). Not
# build.py: how libraries are compiled and cached does not change what they compute.
KERNEL_MODULES = ("arch.py", "variant.py", "dense_variant.py", "render.py")
PAGED_TEMPLATE_PREFIX = "paged_"  # templates/paged_*.j2: the paged decode kernel's own
PAGED_KERNEL_MODULES = ("arch.py", "variant.py", "paged_variant.py", "render.py")


def _digest(templates_kept, modules: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    templates = data_dir("templates")
    files = sorted(p for p in templates.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and templates_kept(p.relative_to(templates)))
    for path in files:
        h.update(str(path.relative_to(templates)).encode() + b"\0" + path.read_bytes() + b"\0")
    package = Path(__file__).resolve().parent
    for name in modules:
        h.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_digest() -> str:
    """16 hex digits of sha256 over the prefill kernels' templates (all but the paged ones) and
    KERNEL_MODULES (file names and bytes)."""
    return _digest(lambda rel: not rel.name.startswith(PAGED_TEMPLATE_PREFIX), KERNEL_MODULES)


@lru_cache(maxsize=1)
def paged_code_digest() -> str:
    """The same over the paged decode kernel's: the shared headers, its templates, PAGED_KERNEL_MODULES."""
    return _digest(lambda rel: rel.parts[0] == "common" or rel.name.startswith(PAGED_TEMPLATE_PREFIX),
                   PAGED_KERNEL_MODULES)


def code_digest_of(variant) -> str:
    """The digest of the kernel code `variant`'s library is built from."""
    return paged_code_digest() if variant.template.startswith(PAGED_TEMPLATE_PREFIX) else code_digest()
