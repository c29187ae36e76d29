"""The CUDA toolchain a library is compiled with: nvcc and ninja, found once per process."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache


class BuildError(RuntimeError):
    """A library could not be built: no toolchain, or nvcc failed."""


@lru_cache(maxsize=1)
def nvcc_path() -> str:
    for candidate in (os.environ.get("NVCC"), shutil.which("nvcc"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise BuildError("nvcc not found: install the CUDA toolkit (12.8 or newer) or set NVCC / CUDA_HOME")


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def nvcc_version_or_none() -> str | None:
    """nvcc's version line, or None where there is no working nvcc."""
    try:
        return nvcc_version()
    except (BuildError, OSError, subprocess.CalledProcessError):
        return None


def ninja_path() -> str:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # the PyPI package ships the binary
    except ImportError as e:
        raise BuildError("ninja not found: pip install ninja") from e
    return os.path.join(ninja.BIN_DIR, "ninja")
