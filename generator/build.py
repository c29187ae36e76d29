"""Compiling variants: rendered sources on disk, a generated build.ninja driving nvcc in parallel.

Layout of the cache (FUSED_MQA_TOPK_CACHE, default ~/.cache/fused-mqa-topk):
    <variant name>/<variant name>.cu              the rendered source, as compiled
    <variant name>/<variant name>-<digest>.so     the library; digest = source + flags + nvcc version
    <variant name>/<variant name>-<digest>.so.log nvcc's output, with ptxas's resource report
A library is reused while its digest matches, so a changed template or flag never loads a stale
build. nvcc writes to a temporary name and the result is renamed into place (atomic), and one
process at a time runs ninja in a cache (a file lock), so no process ever loads a half-written file.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .arch import ARCHS
from .render import render
from .dense_variant import DenseVariant
from .variant import Variant

KernelSpec = Variant | DenseVariant  # anything with .name, .arch, .template and .kernels


def spec_from_name(name: str) -> KernelSpec:
    """The fused or dense variant a name describes."""
    return DenseVariant.from_name(name) if name.startswith("mqa_dense_") else Variant.from_name(name)

CACHE_ENV = "FUSED_MQA_TOPK_CACHE"
BASE_NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", "-Xptxas", "-v")


class BuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fused-mqa-topk")


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


def ninja_path() -> str:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # the PyPI package ships the binary
    except ImportError as e:
        raise BuildError("ninja not found: pip install ninja") from e
    return os.path.join(ninja.BIN_DIR, "ninja")


def nvcc_flags(v: KernelSpec) -> list[str]:
    return [*BASE_NVCC_FLAGS, ARCHS[v.arch].gencode]


@dataclass(frozen=True)
class BuildPlan:
    variant: KernelSpec
    source_text: str
    flags: tuple[str, ...]
    source: Path
    library: Path

    @property
    def log(self) -> Path:
        return self.library.with_name(self.library.name + ".log")

    @property
    def is_built(self) -> bool:
        return self.library.is_file()


def plan(v: KernelSpec, root: Path | None = None) -> BuildPlan:
    root = root or cache_dir()
    text = render(v)
    flags = tuple(nvcc_flags(v))
    digest = hashlib.sha256("\0".join((text, *flags, nvcc_version())).encode()).hexdigest()[:16]
    folder = root / v.name
    return BuildPlan(v, text, flags, folder / f"{v.name}.cu", folder / f"{v.name}-{digest}.so")


def write_source(p: BuildPlan) -> None:
    """Puts the rendered source on disk (atomically; untouched if unchanged, so mtimes stay)."""
    p.source.parent.mkdir(parents=True, exist_ok=True)
    if not p.source.is_file() or p.source.read_text() != p.source_text:
        tmp = p.source.with_name(f"{p.source.name}.tmp.{os.getpid()}")
        tmp.write_text(p.source_text)
        os.replace(tmp, p.source)


def _ninja_file(plans: list[BuildPlan]) -> str:
    lines = [
        f"nvcc = {nvcc_path()}",
        "rule nvcc",
        # $$$$ is the shell's $$ (its pid): each process compiles to its own temporary name.
        "  command = $nvcc $flags -o $out.tmp.$$$$ $in > $out.log 2>&1 && mv -f $out.tmp.$$$$ $out"
        " || { cat $out.log; rm -f $out.tmp.$$$$; exit 1; }",
        "  description = nvcc $out",
        "",
    ]
    for p in plans:
        lines += [f"build {_esc(p.library)}: nvcc {_esc(p.source)}", f"  flags = {' '.join(p.flags)}"]
    return "\n".join(lines) + "\n"


def _esc(path: Path) -> str:
    return str(path).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def build(variants: list[KernelSpec], jobs: int | None = None, root: Path | None = None, verbose: bool = False,
          progress: bool | None = None) -> list[BuildPlan]:
    """Builds every variant not yet in the cache (in parallel); returns their plans in order.
    progress (default: when stderr is a terminal) shows a bar, or a line a library where stderr is
    not a terminal; verbose passes nvcc's own output through."""
    root = root or cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    plans = [plan(v, root) for v in variants]
    for p in plans:
        write_source(p)
    missing = [p for p in plans if not p.is_built]
    if not missing:
        return plans
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [p for p in missing if not p.is_built]  # another process may have built them meanwhile
        if missing:
            ninja_file = root / f"build.{os.getpid()}.ninja"
            ninja_file.write_text(_ninja_file(missing))
            cmd = [ninja_path(), "-f", str(ninja_file), "-j", str(jobs or os.cpu_count() or 1)]
            try:
                if verbose:
                    proc = subprocess.run(cmd, cwd=root, text=True)
                    returncode, output = proc.returncode, ""
                else:
                    returncode, output = _run_ninja(cmd, root, len(missing),
                                                    sys.stderr.isatty() if progress is None else progress)
            finally:
                ninja_file.unlink(missing_ok=True)
            if returncode != 0:
                failed = [p.variant.name for p in missing if not p.is_built]
                raise BuildError(f"nvcc failed for {failed}:\n{output[-10000:]}")
    return plans


def _run_ninja(cmd: list[str], root: Path, count: int, progress: bool) -> tuple[int, str]:
    """Runs ninja, its output captured; with progress, a bar on a terminal (tqdm) or a line a finished
    library elsewhere. Returns (exit code, output)."""
    env = {**os.environ, "NINJA_STATUS": "[%f/%t] "}
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm  # (an optuna dependency) a bar where someone watches

        bar = tqdm(total=count, desc="nvcc", unit="library", file=sys.stderr)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        done = re.match(r"\[(\d+)/(\d+)\] nvcc (\S+)", line)
        if done and progress:
            name = Path(done.group(3)).parent.name
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(name[-40:])
            else:
                print(f"nvcc [{done.group(1)}/{done.group(2)}] {name}", file=sys.stderr, flush=True)
    returncode = proc.wait()
    if bar is not None:
        bar.close()
    return returncode, "".join(lines)


@dataclass(frozen=True)
class ResourceReport:
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def clean(self) -> bool:
        return self.stack_bytes == 0 and self.spill_store_bytes == 0 and self.spill_load_bytes == 0


def resource_report(p: BuildPlan, kernel: str = "fused_mqa_topk_kernel") -> ResourceReport:
    """ptxas's registers / stack / spills for the kernel, read from the build log."""
    text = p.log.read_text()
    # ptxas prints: Compiling entry function '<mangled>' ... <stack/spill line> ... Used N registers
    blocks = re.split(r"ptxas info\s*: Compiling entry function", text)
    for block in blocks[1:]:
        header = block.splitlines()[0]
        if kernel not in header:
            continue
        regs = re.search(r"Used (\d+) registers", block)
        spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block)
        if regs and spill:
            return ResourceReport(int(regs.group(1)), *(int(x) for x in spill.groups()))
    raise BuildError(f"no ptxas resource report for {kernel} in {p.log}")
