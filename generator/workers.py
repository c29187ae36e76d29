"""`python -m generator tune --gpus all|N`: one search worker a local GPU, one optuna storage.

Each worker is a process that sees one GPU (CUDA_VISIBLE_DEVICES) and searches every bucket's study
through the shared storage, the buckets in the same order, so the workers measure one bucket's
candidates side by side; generator.search keeps them from proposing the same variant twice, and the
kernel cache (file-locked) shares their builds. When every worker is done, this process settles each
bucket on its own GPU (the best variant and the dense path timed alike) and writes the table.

Storage: a journal file (`journal:PATH`; the default, in the table's directory) serves workers on
one host; an RDB URL (`sqlite:///tune.db`, or `postgresql://user:pass@host/db` for workers on several
hosts, each started with `--worker` and the same `--storage`) serves any number of hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

JOURNAL = "journal:"


def storage_for(url: str | None):
    """The optuna storage a --storage value names: None (in memory), 'journal:PATH' (a journal
    file several processes share), or an RDB URL (optuna's RDBStorage; workers on several hosts
    share one such as postgresql://...)."""
    if url is None:
        return None
    if not url.startswith(JOURNAL):
        return rdb_storage(url)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = Path(url[len(JOURNAL):])
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def rdb_storage(url: str, attempts: int = 6):
    """optuna's RDBStorage for `url`, retried: workers that start together on a fresh database race to
    create its schema, and the losers' CREATE fails (a duplicate type or table) until the winner's has
    committed."""
    import sqlalchemy.exc
    from optuna.storages import RDBStorage

    for attempt in range(attempts - 1):
        try:
            return RDBStorage(url)
        except sqlalchemy.exc.SQLAlchemyError:
            time.sleep(0.2 * (attempt + 1))
    return RDBStorage(url)  # (the last attempt's error is the caller's)


def gpu_count(arg: str) -> int:
    """--gpus: 'all' (every GPU torch sees) or a count."""
    import torch

    available = torch.cuda.device_count()
    n = available if arg == "all" else int(arg)
    if not 1 <= n <= available:
        raise SystemExit(f"--gpus {arg}: {available} GPU(s) visible here")
    return n


def worker_argv(argv: list[str], storage: str) -> list[str]:
    """This tune command's arguments for a worker: without --gpus and --storage, with --worker and
    the shared storage."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--gpus", "--storage", "--workers-per-gpu"):
            skip = True
            continue
        if a.startswith(("--gpus=", "--storage=", "--workers-per-gpu=")):
            continue
        out.append(a)
    return [*out, "--worker", "--storage", storage]


def run_workers(n: int, argv: list[str], storage: str, log=print, per_gpu: int = 1) -> float:
    """Starts `per_gpu` workers on each of n GPUs and waits for them; returns the wall time (s). A
    worker that fails stops the run (its output says why). (More than one a GPU shares its time: it
    shows the shared study at work where one GPU is all there is, not a speed-up.)"""
    start = time.monotonic()
    procs = []
    for i in range(n * per_gpu):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(i // per_gpu)}
        procs.append(subprocess.Popen([sys.executable, "-m", "generator", "tune", *worker_argv(argv, storage)], env=env))
        log(f"worker {i}: GPU {i // per_gpu}, pid {procs[-1].pid}")
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"tune workers exited with {codes}")
    return time.monotonic() - start
