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
from pathlib import Path, PurePosixPath
from typing import Callable

from .data import data_dir

# The modules whose content decides what a variant's library computes and how fast: the parameters
# the templates are rendered from, the rendering, and the targets and compiler flags (arch.py). Not
# build.py: how libraries are compiled and cached does not change what they compute.
KERNEL_MODULES = ("arch.py", "variant.py", "dense_variant.py", "render.py")
PAGED_TEMPLATE_PREFIX = "paged_"  # templates/paged_*.j2: the paged decode kernel's own
PAGED_KERNEL_MODULES = ("arch.py", "variant.py", "paged_variant.py", "render.py")


def digest_of(templates: dict[str, bytes], modules: dict[str, bytes]) -> str:
    """16 hex digits of sha256 over template files (path relative to templates/ -> bytes, taken in path
    order) and modules (file name -> bytes, in the order given): what the digests below hash, from the
    checkout's files or from a revision's (tools/restamp_table.py checks a base against a table)."""
    h = hashlib.sha256()
    for rel in sorted(templates, key=lambda r: PurePosixPath(r).parts):
        h.update(rel.encode() + b"\0" + templates[rel] + b"\0")
    for name, content in modules.items():
        h.update(name.encode() + b"\0" + content + b"\0")
    return h.hexdigest()[:16]


def prefill_template(rel: PurePosixPath) -> bool:
    """Whether a template (its path relative to templates/) is the prefill kernels' (or shared)."""
    return not rel.name.startswith(PAGED_TEMPLATE_PREFIX)


def paged_template(rel: PurePosixPath) -> bool:
    """Whether a template is the paged decode kernel's (or a shared header)."""
    return rel.parts[0] == "common" or rel.name.startswith(PAGED_TEMPLATE_PREFIX)


def digests_of(templates: dict[str, bytes], module: Callable[[str], bytes]) -> tuple[str, str]:
    """(prefill, paged) digests of a tree of kernel code: its template files (path relative to templates/
    -> bytes) and its kernel modules as `module(file name)` reads them. Which files enter which digest is
    decided here alone, whether the tree is this checkout, a revision in git (tools/restamp_table.py) or
    a checkout an installed wheel must match (.ci/wheel_smoke.py)."""
    def one(kept, modules: tuple[str, ...]) -> str:
        return digest_of({rel: data for rel, data in templates.items() if kept(PurePosixPath(rel))},
                         {name: module(name) for name in modules})

    return one(prefill_template, KERNEL_MODULES), one(paged_template, PAGED_KERNEL_MODULES)


def _installed_digests() -> tuple[str, str]:
    """digests_of this installation's templates (a checkout's templates/, a wheel's runtime.templates) and
    kernel modules (this package's)."""
    templates = data_dir("templates")
    files = {p.relative_to(templates).as_posix(): p.read_bytes() for p in templates.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    package = Path(__file__).resolve().parent
    return digests_of(files, lambda name: (package / name).read_bytes())


@lru_cache(maxsize=1)
def code_digest() -> str:
    """16 hex digits of sha256 over the prefill kernels' templates (all but the paged ones) and
    KERNEL_MODULES (file names and bytes)."""
    return _installed_digests()[0]


@lru_cache(maxsize=1)
def paged_code_digest() -> str:
    """The same over the paged decode kernel's: the shared headers, its templates, PAGED_KERNEL_MODULES."""
    return _installed_digests()[1]


def code_digest_of(variant) -> str:
    """The digest of the kernel code `variant`'s library is built from."""
    return paged_code_digest() if variant.template.startswith(PAGED_TEMPLATE_PREFIX) else code_digest()
