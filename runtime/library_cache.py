"""The kernel cache: where compiled libraries live and the manifest that says what each one is.

Layout of a kernel cache (FUSED_MQA_TOPK_CACHE, default ~/.cache/fused-mqa-topk):
    manifest.json                                 every library: variant, kernel code, flags, arch, nvcc, sha256
    <variant name>/<variant name>.cu              the rendered source, as compiled
    <variant name>/<variant name>-<digest>.so     the library; digest = rendered source + flags
    <variant name>/<variant name>-<digest>.so.log nvcc's output, with ptxas's resource report
FUSED_MQA_TOPK_PREBUILT names a read-only cache searched after it (a `python -m generator build
--shipped` made on any machine with nvcc serves one without).

A serving process finds a library here by the manifest alone (find_library): the entry for the
variant built from this kernel code (runtime.kernel_code), whose file still has the sha256 recorded
and, where nvcc is present, that this nvcc built. Only where none is found does the loader import
the renderer and the compiler (runtime.build).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from .kernel_code import code_digest_of
from . import toolchain

CACHE_ENV = "FUSED_MQA_TOPK_CACHE"
PREBUILT_ENV = "FUSED_MQA_TOPK_PREBUILT"  # a read-only kernel cache searched after the cache
MANIFEST = "manifest.json"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fused-mqa-topk")


def prebuilt_dir() -> Path | None:
    env = os.environ.get(PREBUILT_ENV)
    return Path(env) if env else None


def read_manifest(root: Path) -> dict:
    """The cache's manifest: library file name -> {variant, code, arch, flags, source_sha256,
    library_sha256, nvcc}."""
    try:
        return json.loads((root / MANIFEST).read_text()).get("libraries", {})
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def write_manifest(root: Path, libraries: dict) -> None:
    """Replaces the manifest (atomically; callers hold its lock: runtime.build)."""
    tmp = root / f"{MANIFEST}.tmp.{os.getpid()}"
    tmp.write_text(json.dumps({"format": 2, "libraries": dict(sorted(libraries.items()))}, indent=1) + "\n")
    os.replace(tmp, root / MANIFEST)


def file_sha256(path: Path) -> str:
    """The file's sha256, hashed again only when its modification time or size changes."""
    stat = path.stat()
    return _sha256(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _sha256(path: str, mtime: int, size: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def trusted(path: Path, record: dict, nvcc: str | None) -> bool:
    """Whether the manifest's record vouches for the file at `path`: it exists, its bytes are those
    recorded (where a sha256 is), and where nvcc is here, this nvcc built it."""
    if not path.is_file():
        return False
    if nvcc is not None and record.get("nvcc") != nvcc:
        return False
    recorded = record.get("library_sha256")
    return recorded is None or file_sha256(path) == recorded


def find_library(variant) -> Path | None:
    """The library of `variant` built from this kernel code, in the cache or the prebuilt directory,
    found by the manifests alone (no rendering); None where neither records one."""
    code, nvcc = code_digest_of(variant), toolchain.nvcc_version_or_none()
    for root in (cache_dir(), prebuilt_dir()):
        if root is None:
            continue
        for name, record in read_manifest(root).items():
            if record.get("variant") == variant.name and record.get("code") == code and record.get("arch") == variant.arch:
                path = root / variant.name / name
                if trusted(path, record, nvcc):
                    return path
    return None
