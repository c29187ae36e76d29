"""Does a change of the templates change the machine code? Compare the SASS of two renderings, no GPU.

Renders each variant with this checkout and with the templates of git revision BASE (a worktree in
a temporary folder), compiles both to cubins with this checkout's flags, disassembles them with
nvdisasm and compares every kernel's instructions (addresses and encodings dropped). A refactor
whose kernels come out instruction for instruction the same cannot have changed their speed; one
that differs is listed with ptxas's registers and spills of both sides and the count of differing
instructions, and needs timing (tools/compare_builds.py).

    python tools/compare_sass.py --base REV [VARIANT ...] [--table] [--dense] [-j JOBS]

--table takes every fused variant the shipped table uses (entries that chose fused), --dense the
shipped dense variants. nvdisasm: see tools/sass.py.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.build import nvcc_flags, spec_from_name  # noqa: E402
from runtime.render import render  # noqa: E402
from runtime.table import SHIPPED_TABLE_DIR  # noqa: E402
from runtime.toolchain import nvcc_path  # noqa: E402
from tools.sass import FUNCTION, nvdisasm_path, short_name  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# Renders names given on stdin with whichever renderer the checkout at cwd has (it moved from
# generator/ to runtime/), a JSON object a line, after one with that checkout's nvcc flags.
RENDER_BASE = """
import json, os, sys
# Only the base's own files: an editable install's finder would serve this checkout's modules for
# whatever the base lacks.
sys.meta_path = [f for f in sys.meta_path if "editable" not in (type(f).__name__ + type(f).__module__).lower()]
tree = os.getcwd()
if os.path.exists(os.path.join(tree, "runtime", "render.py")):
    from runtime.build import BASE_NVCC_FLAGS, spec_from_name
    from runtime.render import render
else:
    from generator.build import BASE_NVCC_FLAGS, spec_from_name
    from generator.render import render
import inspect
assert inspect.getfile(render).startswith(tree), inspect.getfile(render)
print(json.dumps({"flags": list(BASE_NVCC_FLAGS)}))
for name in sys.stdin.read().split():
    print(json.dumps({"name": name, "source": render(spec_from_name(name))}))
"""
ENCODING = re.compile(r"/\*[0-9a-fx]+\*/")
# The anonymous namespace's name, and the internal-linkage names of the functions a kernel calls
# (`_INTERNAL_<hash>_`), hash the whole source: any change elsewhere in the file changes them.
ANONYMOUS = re.compile(r"_GLOBAL__N__[0-9a-f]+_|_INTERNAL_[0-9a-f]{8}_")
LABEL_NAME = re.compile(r"\.L_x_(\d+)")  # numbered across the file: renumbered per kernel, in order of appearance


def base_sources(rev: str, names: list[str], folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """Each variant's source as the templates of `rev` render it, and `rev`'s base nvcc flags."""
    tree = folder / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), rev], check=True,
                   capture_output=True)
    try:
        out = subprocess.run([sys.executable, "-c", RENDER_BASE], cwd=tree, input=" ".join(names), text=True,
                             capture_output=True, check=True, env={**os.environ, "PYTHONPATH": str(tree)}).stdout
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
    first, *rest = map(json.loads, out.splitlines())
    return {d["name"]: d["source"] for d in rest}, tuple(first["flags"])


def sass_of(source: str, name: str, folder: Path) -> tuple[dict[str, list[str]], str]:
    """(kernel -> its instructions, ptxas's report) of one source compiled to a cubin."""
    folder.mkdir(parents=True, exist_ok=True)
    src, cubin = folder / f"{name}.cu", folder / f"{name}.cubin"
    src.write_text(source)
    flags = [f for f in nvcc_flags(spec_from_name(name)) if f not in ("-shared", "-Xcompiler", "-fPIC")]
    run = subprocess.run([nvcc_path(), *flags, "-cubin", "-o", str(cubin), str(src)], capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"nvcc failed for {name} in {folder}:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    disasm = subprocess.run([nvdisasm_path(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    kernels: dict[str, list[str]] = {}
    current = None
    for line in disasm.splitlines():
        if m := FUNCTION.match(line):
            current = kernels.setdefault(short_name(m.group(1)), [])
        elif current is not None and line.strip() and not line.lstrip().startswith(("//", ".")):
            text = ANONYMOUS.sub("", ENCODING.sub("", line)).strip().rstrip(" ;")
            if text:
                current.append(text)
        elif current is not None and line.startswith("."):  # labels keep the branch structure comparable
            current.append(ANONYMOUS.sub("", line.strip()))
    for kernel, lines in kernels.items():
        numbers: dict[str, str] = {}
        kernels[kernel] = [LABEL_NAME.sub(lambda m: ".L" + numbers.setdefault(m.group(1), str(len(numbers))), line)
                           for line in lines]
    return kernels, run.stdout + run.stderr


def resources(report: str) -> dict[str, str]:
    """kernel -> ptxas's 'N registers, S bytes spilled' summary."""
    regs, spills, kernel = {}, {}, None
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            kernel = short_name(m.group(1))
        elif kernel and (m := re.search(r"Used (\d+) registers", line)):
            regs[kernel] = m.group(1)
        elif kernel and (m := re.search(r"(\d+) bytes spill stores", line)):
            spills[kernel] = m.group(1)
    return {k: f"{regs[k]} registers, {spills.get(k, '?')} bytes spilled" for k in regs}


def compare(name: str, base: str, folder: Path) -> tuple[str, bool]:
    (new, new_report), (old, old_report) = (sass_of(render(spec_from_name(name)), name, folder / "new"),
                                            sass_of(base, name, folder / "old"))
    lines, same = [], True
    for kernel in sorted(set(new) | set(old)):
        a, b = old.get(kernel, []), new.get(kernel, [])
        if a == b:
            lines.append(f"  {kernel}: the same {len(a)} instructions")
            continue
        same = False
        changed = sum(1 for d in difflib.ndiff(a, b) if d[:1] in "+-")
        lines.append(f"  {kernel}: {len(a)} -> {len(b)} instructions, {changed} lines differ "
                     f"(before: {resources(old_report).get(kernel, '?')}; after: {resources(new_report).get(kernel, '?')})")
    return f"{name}: {'SAME' if same else 'DIFFERENT'}\n" + "\n".join(lines), same


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="*")
    p.add_argument("--base", required=True, help="the git revision whose templates render the other side")
    p.add_argument("--table", action="store_true", help="every fused variant the shipped table uses")
    p.add_argument("--dense", action="store_true", help="the shipped dense variants")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--keep", type=Path, help="keep sources and cubins here")
    args = p.parse_args()
    names = list(args.variants)
    if args.table:
        for path in sorted(SHIPPED_TABLE_DIR.glob("*.json")):
            names += sorted({e["variant"] for e in json.loads(path.read_text())["entries"] if e["use"] == "fused"})
    if args.dense:
        from generator.shipped import shipped_dense_variants

        names += [v.name for v in shipped_dense_variants()]
    names = list(dict.fromkeys(names))
    if not names:
        p.error("name variants, or pass --table / --dense")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="compare-sass-"))
    bases, _ = base_sources(args.base, names, folder)
    different = 0
    with ThreadPoolExecutor(max(1, args.jobs // 2)) as pool:  # (two nvcc a comparison)
        for text, same in pool.map(lambda n: compare(n, bases[n], folder / n), names):
            print(text, flush=True)
            different += not same
    print(f"{len(names) - different} of {len(names)} variants compile to the same SASS as {args.base}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
