"""Compiling variants: rendered sources on disk, a generated build.ninja driving nvcc in parallel.

The cache's layout and manifest: runtime.library_cache. A library is reused while its digest
(rendered source + flags) matches, so a changed template or flag never loads a stale build; where
nvcc is present, one that another nvcc version built (the manifest says which) is rebuilt. Without
nvcc a library is served only where its manifest vouches for it (the bytes recorded; a library with
no manifest record is not trusted by its file name). nvcc writes to a temporary name and the result
is renamed into place (atomic), so no process ever loads a half-written file. A build holds a file
lock on each variant it compiles (taken in name order, so two builds never wait on each other in a
circle) and the manifest's own lock only to record what it built: processes building different
variants in one cache compile at the same time; one that needs a variant another is compiling waits
for it and then finds it built.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from . import toolchain
from .arch import ARCHS, BASE_NVCC_FLAGS
from .dense_variant import DenseVariant
from .kernel_code import code_digest_of
from .library_cache import (
    cache_dir,
    file_sha256,
    prebuilt_dir,
    read_manifest,
    trusted,
    write_manifest,
)
from .paged_variant import PagedVariant
from .render import render
from .toolchain import BuildError
from .variant import Variant

# (toolchain's functions are called through the module, never imported by name: this module is
# imported lazily, and a name taken while a test had patched the toolchain would outlive the patch.)
__all__ = ["BASE_NVCC_FLAGS", "BuildError", "BuildPlan", "build", "find_built", "nvcc_flags", "plan", "resource_report",
           "spec_from_name"]

KernelSpec = Variant | DenseVariant | PagedVariant  # anything with .name, .arch, .template and .kernels


def spec_from_name(name: str) -> KernelSpec:
    """The fused, dense or paged-decode variant a name describes."""
    if name.startswith("mqa_dense_"):
        return DenseVariant.from_name(name)
    return PagedVariant.from_name(name) if name.startswith("paged_topk_") else Variant.from_name(name)


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
    digest = hashlib.sha256("\0".join((text, *flags)).encode()).hexdigest()[:16]
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
        f"nvcc = {toolchain.nvcc_path()}",
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


def _record(root: Path, plans: list[BuildPlan], nvcc: str) -> None:
    """Adds the plans' libraries to the manifest (under its lock): what find_library serves
    them by, and the bytes it checks them against."""
    libraries = read_manifest(root)
    for p in plans:
        libraries[p.library.name] = {"variant": p.variant.name, "arch": p.variant.arch, "code": code_digest_of(p.variant),
                                     "flags": list(p.flags),
                                     "source_sha256": hashlib.sha256(p.source_text.encode()).hexdigest(),
                                     "library_sha256": file_sha256(p.library), "nvcc": nvcc}
    write_manifest(root, libraries)


def _restamp(root: Path, plans: list[BuildPlan]) -> None:
    """Records the cached libraries of `plans`, built for other kernel code, as this code's. A library's
    file name carries the digest of its source and flags, so the same file is what this code compiles
    to: a change that moved the code digest but not these variants' sources (kernel_code digests every
    template whole) would otherwise leave find_library, which serves by manifest where nothing may
    compile, without them."""
    if not plans:
        return
    try:
        with _locked(root / ".manifest.lock"):
            libraries = read_manifest(root)
            for p in plans:
                if p.library.name in libraries:
                    libraries[p.library.name] = {**libraries[p.library.name], "code": code_digest_of(p.variant)}
            write_manifest(root, libraries)
    except OSError:
        pass  # (a read-only cache: this call still gets the library, found by its file name)


def _built(p: BuildPlan, root: Path, manifest: dict, nvcc: str | None, prebuilt: Path | None,
           prebuilt_manifest: dict) -> BuildPlan | None:
    """The plan of a usable library for p: in the cache (whose manifest is `manifest`), else in the
    prebuilt directory, where the directory's manifest vouches for it (runtime.library_cache.trusted);
    None if neither."""
    record = manifest.get(p.library.name)
    if record is not None and trusted(p.library, record, nvcc):
        return p
    if prebuilt is not None:
        there = replace(p, source=prebuilt / p.source.relative_to(root), library=prebuilt / p.library.relative_to(root))
        record = prebuilt_manifest.get(there.library.name)
        if record is not None and trusted(there.library, record, nvcc):
            return there
    return None


def _manifests(root: Path, prebuilt: Path | None) -> tuple[dict, dict]:
    """The cache's manifest and the prebuilt directory's ({} where there is none), read once a call."""
    return read_manifest(root), read_manifest(prebuilt) if prebuilt is not None else {}


def find_built(v: KernelSpec) -> BuildPlan | None:
    """The variant's usable library (cache or prebuilt directory) without building, or None."""
    root, prebuilt = cache_dir(), prebuilt_dir()
    manifest, prebuilt_manifest = _manifests(root, prebuilt)
    return _built(plan(v, root), root, manifest, toolchain.nvcc_version_or_none(), prebuilt, prebuilt_manifest)


def build(variants: list[KernelSpec], jobs: int | None = None, root: Path | None = None, verbose: bool = False,
          progress: bool | None = None) -> list[BuildPlan]:
    """Builds every variant not yet in the cache (in parallel); returns their plans in order (a plan
    may point into FUSED_MQA_TOPK_PREBUILT). progress (default: when stderr is a terminal) shows a
    bar, or a line a library where stderr is not a terminal; verbose passes nvcc's output through.
    Without nvcc, a variant with no library in the cache or the prebuilt directory is a BuildError."""
    root = root or cache_dir()
    nvcc = toolchain.nvcc_version_or_none()
    prebuilt = prebuilt_dir()
    plans = [plan(v, root) for v in variants]
    manifest, prebuilt_manifest = _manifests(root, prebuilt)
    found = [_built(p, root, manifest, nvcc, prebuilt, prebuilt_manifest) for p in plans]
    _restamp(root, [p for p, f in zip(plans, found) if f is p and manifest[p.library.name].get("code") != code_digest_of(p.variant)])
    missing = [p for p, f in zip(plans, found) if f is None]
    plans = [f or p for p, f in zip(plans, found)]
    if not missing:
        return plans
    if nvcc is None:
        where = f"{root}" + (f" or {prebuilt}" if prebuilt else "")
        raise BuildError(f"nvcc not found, and {where} holds no library for {[p.variant.name for p in missing]}: "
                         "install the CUDA toolkit, or build them where nvcc is (python -m generator build "
                         "--shipped) and ship that cache (docs/serving.md, \"Kernels without a toolchain\")")
    root.mkdir(parents=True, exist_ok=True)
    for p in missing:
        write_source(p)
    with contextlib.ExitStack() as locks:
        for p in sorted(missing, key=lambda p: p.variant.name):
            locks.enter_context(_locked(p.library.parent / ".build.lock"))
        manifest = read_manifest(root)  # another process may have built some meanwhile
        missing = [p for p in missing if _built(p, root, manifest, nvcc, None, {}) is None]
        if missing:
            for p in missing:
                p.library.unlink(missing_ok=True)  # another nvcc's build: ninja must not take it as done
            # Its own ninja file and .ninja_log (builds in one cache run side by side, threads of one process too)
            builddir = Path(tempfile.mkdtemp(prefix=".ninja.", dir=root))
            ninja_file = builddir / "build.ninja"
            ninja_file.write_text(f"builddir = {_esc(builddir)}\n" + _ninja_file(missing))
            cmd = [toolchain.ninja_path(), "-f", str(ninja_file), "-j", str(jobs or os.cpu_count() or 1)]
            recorder = _Recorder(root, missing, nvcc)
            try:
                if verbose:
                    proc = subprocess.run(cmd, cwd=root, text=True, check=False)
                    returncode, output = proc.returncode, ""
                else:
                    returncode, output = _run_ninja(cmd, root, len(missing),
                                                    sys.stderr.isatty() if progress is None else progress,
                                                    on_finished=recorder.finished)
            finally:
                shutil.rmtree(builddir, ignore_errors=True)
            recorder.rest()
            if returncode != 0:
                failed = [p.variant.name for p in missing if not p.is_built]
                raise BuildError(f"nvcc failed for {failed}:\n{output[-10000:]}")
    return plans


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive file lock on `path` (created), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


class _Recorder:
    """Records a build's libraries in the manifest as ninja finishes each, so a build cut short (a
    timeout, Ctrl-C) keeps what it finished: the next build compiles only the rest. A library appears
    whole or not at all (nvcc writes a temporary name, then mv). One manifest write a library: 18 ms
    at 911 entries on a 2-core CI-like machine, beside its seconds of nvcc."""

    def __init__(self, root: Path, plans: list[BuildPlan], nvcc: str):
        self.root, self.nvcc = root, nvcc
        self.plans = {str(p.library): p for p in plans}

    def finished(self, library: str) -> None:
        """ninja reported the edge that writes `library`: recorded if the library is there (a failed edge
        leaves none; a ninja that reports an edge as it starts, not as it ends, leaves it to rest())."""
        p = self.plans.get(library)
        if p is not None and p.is_built:
            del self.plans[library]
            self._record([p])

    def rest(self) -> None:
        """Records every other library of the build that exists (ninja's output not read: verbose)."""
        self._record([p for p in self.plans.values() if p.is_built])
        self.plans = {}

    def _record(self, plans: list[BuildPlan]) -> None:
        if plans:
            with _locked(self.root / ".manifest.lock"):
                _record(self.root, plans, self.nvcc)


def _run_ninja(cmd: list[str], root: Path, count: int, progress: bool,
               on_finished: Callable[[str], None] = lambda library: None) -> tuple[int, str]:
    """Runs ninja, its output captured; with progress, a bar on a terminal (tqdm) or a line a finished
    library elsewhere. ninja (1.13 here) prints an edge's status line when the edge ends, its output
    not being a terminal: on_finished gets that library's path. Returns (exit code, output)."""
    env = {**os.environ, "NINJA_STATUS": "[%f/%t] "}
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm  # (an optuna dependency) a bar where someone watches

        bar = tqdm(total=count, desc="nvcc", unit="library", file=sys.stderr)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        done = re.match(r"\[(\d+)/(\d+)\] nvcc (.+?)\s*$", line)
        if done:
            on_finished(done.group(3))
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
