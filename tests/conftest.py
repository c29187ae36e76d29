"""Shared fixtures. GPU tests skip (with the reason) where no CUDA GPU with fp8 tensor cores is present;
nvcc tests skip where the CUDA compiler is missing."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing


def _gpu_skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (CPU-only torch or no device): GPU tests run on the GPU machine"
    if torch.cuda.get_device_capability() < (8, 9):
        return f"{torch.cuda.get_device_name()} has no fp8 tensor cores (needs sm_89+)"
    return None


GPU_SKIP = _gpu_skip_reason()
requires_gpu = pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")


def _nvcc_available() -> bool:
    from runtime.toolchain import BuildError, nvcc_path

    try:
        nvcc_path()
        return True
    except BuildError:
        return False


requires_nvcc = pytest.mark.skipif(not _nvcc_available(), reason="nvcc (CUDA toolkit) not found")


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private, empty build cache."""
    from runtime.library_cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def pytest_report_header(config):
    return f"torch {torch.__version__}; GPU tests: {'run' if GPU_SKIP is None else 'skipped: ' + GPU_SKIP}; nvcc: {shutil.which('nvcc')}"


def pytest_terminal_summary(terminalreporter):
    """The skipped tests counted by reason (pytest -q prints only how many): on a machine without a
    GPU most of the suite skips, and this says for which reasons."""
    from collections import Counter

    reasons = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.write_sep("-", "skipped, by reason")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:5d}  {reason}")
