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


def hopper_skip(what: str) -> str | None:
    """Why a Hopper-only test module skips here (no GPU, or one that is not sm_90: `what` says why
    that matters), or None."""
    if GPU_SKIP:
        return GPU_SKIP
    if torch.cuda.get_device_capability() != (9, 0):
        return f"{torch.cuda.get_device_name()} is not sm_90: {what}"
    return None


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


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory):
    """A private PostgreSQL server for a test module (the distribution's initdb and pg_ctl, a unix socket
    in a temporary directory, trust authentication), as an SQLAlchemy URL; skipped, with the reason,
    where there is no server to start or no driver."""
    import os
    import socket
    import subprocess
    import tempfile

    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server here (initdb / pg_ctl not found): the shared-study test needs one")
    try:
        import psycopg2  # noqa: F401 -- SQLAlchemy's default PostgreSQL driver
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install psycopg2-binary): the shared-study test needs it")
    root = Path(tempfile.mkdtemp(prefix="fused-mqa-topk-pg-", dir="/tmp"))  # (short: a socket path's limit)
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: run the server as the distribution's user
        runuser = shutil.which("runuser")
        try:
            import pwd

            owner = pwd.getpwnam("postgres")
        except KeyError:
            owner = None
        if not runuser or owner is None:
            pytest.skip("running as root with no 'postgres' user to run a PostgreSQL server as")
        for path in (root, sockets):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        as_user = [runuser, "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = lambda *cmd: subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=120)  # noqa: E731
    made = run(initdb, "-D", str(data), "-A", "trust", "-U", "tuner")
    if made.returncode != 0:
        pytest.skip(f"initdb failed: {made.stderr.strip()[-300:]}")
    started = run(pg_ctl, "-D", str(data), "-w", "-l", str(root / "server.log"), "-o",
                  f"-p {port} -k {sockets} -c listen_addresses=''", "start")
    if started.returncode != 0:
        pytest.skip(f"the PostgreSQL server did not start: {started.stderr.strip()[-300:]}")
    try:
        yield f"postgresql+psycopg2://tuner@/postgres?host={sockets}&port={port}"
    finally:
        run(pg_ctl, "-D", str(data), "-m", "fast", "stop")
        shutil.rmtree(root, ignore_errors=True)
