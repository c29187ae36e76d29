"""How many instructions does a kernel's hot loop issue? Read the SASS, no GPU needed.

Renders a variant, compiles it to a cubin with the shipped flags, disassembles it with nvdisasm and
prints, per kernel, ptxas's registers and spills and, per loop that issues tensor-core products
(wgmma: QGMMA/HGMMA, mma.sync: HMMA), its instruction count and opcode histogram. How an
epilogue change was measured: the gated kernel's scan loop went 321 -> 257 instructions a 64-key
slice (experiment log, "2026-11-29: cheaper epilogue"). A loop is a backward branch and the code from
its target on.

    python tools/sass.py VARIANT [--top 30] [--keep DIR] [--timeline] [--hot]

--timeline lists, per loop, where the products are issued and waited for (instruction positions):
what overlaps a warpgroup's own products is what ptxas placed between their issue and their wait,
which the source order does not decide (experiment log, "2026-11-29: epilogue experiments": in the
2 x 2 gated loop ptxas hoisted most of slice 1's epilogue above the next tile's issue, so that product overlapped 93 of 506 instructions;
BENCHMARKS.md has what forcing the order did).

--hot counts, per loop, what a tile issues from the mbarrier wait before its products to the first
barrier after them (hot_path): the paged decode kernel's loop also holds its compaction, which most
tiles skip (experiment log, "2026-12-05: the shipped tables were stale; the paged kernel's appends
read from its SASS": 848 instructions a slice at next_n 4, 8 of them shared atomics).

nvdisasm is not part of a minimal CUDA install; $NVDISASM, PATH and $CUDA_HOME/bin are searched,
and `pip download --no-deps nvidia-cuda-nvdisasm` (unzip; nvidia/cu13/bin/nvdisasm) provides it.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.build import nvcc_flags, spec_from_name  # noqa: E402
from runtime.toolchain import nvcc_path  # noqa: E402
from runtime.render import render  # noqa: E402

INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)")
LABEL = re.compile(r"^\.(L_x_\d+):")
BRANCH_TARGET = re.compile(r"\bBRA\b.*`\(\.(L_x_\d+)\)")
FUNCTION = re.compile(r"^\s*\.text\.(\S+):")
PRODUCTS = ("QGMMA", "HGMMA", "HMMA", "IMMA")
# What --timeline shows: products, their fences and waits, mbarrier waits and arrivals, branches, stores.
EVENTS = (*PRODUCTS, "WARPGROUP", "SYNCS", "BRA", "BAR", "STG", "STS")


def nvdisasm_path() -> str:
    for candidate in (os.environ.get("NVDISASM"), shutil.which("nvdisasm"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("nvdisasm not found: set NVDISASM, or `pip download --no-deps nvidia-cuda-nvdisasm`, unzip it "
                     "and use nvidia/cu13/bin/nvdisasm")


def compile_cubin(name: str, folder: Path) -> tuple[Path, str]:
    """The variant's cubin and ptxas's report (registers, spills per kernel)."""
    variant = spec_from_name(name)
    src = folder / f"{variant.name}.cu"
    src.write_text(render(variant))
    flags = [f for f in nvcc_flags(variant) if f not in ("-shared", "-Xcompiler", "-fPIC")]
    cubin = folder / f"{variant.name}.cubin"
    run = subprocess.run([nvcc_path(), *flags, "-cubin", "-o", str(cubin), str(src)], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"nvcc failed:\n{run.stdout}{run.stderr}")
    return cubin, run.stdout + run.stderr


def product_loops(sass: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(kernel, [(opcode, instruction)]) of each innermost loop that contains a tensor-core product, shortest first:
    the scan loops come first (the longer ones are loops over row blocks whose scan loops ptxas laid
    out elsewhere)."""
    lines = sass.splitlines()
    labels, kernel_at, kernel = {}, [], ""
    for i, line in enumerate(lines):
        if m := FUNCTION.match(line):
            kernel = m.group(1)
        kernel_at.append(kernel)
        if m := LABEL.match(line):
            labels[m.group(1)] = i
    spans = []
    for i, line in enumerate(lines):
        m = BRANCH_TARGET.search(line)
        if m and labels.get(m.group(1), i) < i:
            ops = [(op.group(1), text.split("*/", 1)[1].strip().rstrip(" ;"))
                   for text in lines[labels[m.group(1)]:i + 1] if (op := INSTRUCTION.match(text))]
            if any(op.startswith(PRODUCTS) for op, _ in ops):
                spans.append((labels[m.group(1)], i, ops))
    innermost = [(a, b, ops) for a, b, ops in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d, _ in spans)]
    return sorted(((short_name(kernel_at[b]), ops) for a, b, ops in innermost), key=lambda loop: len(loop[1]))


def hot_path(loop: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """A loop's straight run a tile, where its kernel waits for the tile and ends the tile's work with a
    CTA barrier (the paged kernel's buffer check): from the last mbarrier wait before the loop's first
    product to the first barrier after its last product, what every tile issues whether or not it
    compacts (the code past that barrier, which the loop holds too, runs only then). None where the
    loop has no such wait or barrier."""
    ops = [op for op, _ in loop]
    products = [i for i, op in enumerate(ops) if op.startswith(PRODUCTS)]
    waits = [i for i in range(products[0]) if ops[i].startswith("SYNCS.PHASECHK")] if products else []
    ends = [i for i in range(products[-1], len(ops)) if ops[i].startswith("BAR")] if products else []
    return loop[waits[-1]:ends[0]] if waits and ends else None


def short_name(mangled: str) -> str:
    """`gate::fused_mqa_topk_gate_kernel` from `_ZN<len><anonymous namespace><len>gate<len>fused...E...`."""
    names, i = [], mangled.find("_ZN") + 3
    while 3 <= i < len(mangled) and mangled[i].isdigit():
        j = i
        while mangled[j].isdigit():
            j += 1
        names.append(mangled[j:j + int(mangled[i:j])])
        i = j + int(mangled[i:j])
    return "::".join(n for n in names if not n.startswith("_GLOBAL__N")) or mangled


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant")
    p.add_argument("--top", type=int, default=30, help="opcodes listed per loop")
    p.add_argument("--keep", type=Path, help="write the source, cubin and SASS here")
    p.add_argument("--timeline", action="store_true", help="positions of products, waits, barriers, branches")
    p.add_argument("--hot", action="store_true", help="the instructions a tile issues up to its first barrier (hot_path)")
    args = p.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="sass-"))
    folder.mkdir(parents=True, exist_ok=True)
    cubin, report = compile_cubin(args.variant, folder)
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            print(short_name(m.group(1)))
        elif "spill" in line or "Used" in line:
            print("  " + line.replace("ptxas info    : ", "").strip())
    disasm = subprocess.run([nvdisasm_path(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    if args.keep:
        (folder / "kernel.sass").write_text(disasm)
    for kernel, loop in product_loops(disasm):
        ops = [op for op, _ in loop]
        products = sum(op.startswith(PRODUCTS) for op in ops)
        print(f"\n{kernel}: loop of {len(ops)} instructions, {products} tensor-core products")
        counts = collections.Counter(ops).most_common(args.top)
        print("  " + " | ".join(f"{n} {op}" for op, n in counts))
        if args.hot and (hot := hot_path(loop)) is not None:
            count = lambda prefix: sum(op.startswith(prefix) for op, _ in hot)  # noqa: E731
            print(f"  hot path (the tile's wait to the barrier after its products): {len(hot)} instructions, "
                  f"{count('ATOMS')} shared atomics, {count('SHFL')} shuffles, {count('VOTE')} votes (VOTE, VOTEU)")
        if args.timeline:
            for i, (op, text) in enumerate(loop):
                if op.startswith(EVENTS):
                    print(f"  {i:5d}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
