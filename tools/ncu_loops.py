"""Where a gated kernel's warps wait, by inner loop: the warp-state samples of ncu's SASS source page summed
over each loop that issues products (a backward branch's range holding a QGMMA or HGMMA), with its
largest stall reasons, then the hottest instructions of one address range.

    ncu ... --set full --import-source yes -o REPORT python3 ...     # on the GPU machine
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > src.csv
    python3 tools/ncu_loops.py src.csv [--range LO HI] [--top N]

A loop is named by what it issues: the exact pass gathers (LDGSTS), the fp16 scan sums half pairs
(HMNMX2), anything else is the fp32 scan or the sample. The range (hex addresses) defaults to the
largest exact-pass loop. Used for docs/results/h100-2026-12-05-gate16-bound/ and
docs/results/h100-2026-12-06-ncu-after-read-ahead/."""

from __future__ import annotations

import argparse
import collections
import csv
import re
from dataclasses import dataclass
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"


@dataclass(frozen=True)
class Instruction:
    address: int
    source: str
    samples: float
    stalls: dict[str, float]  # ncu's stall_* columns (those of issued warps), samples each

    @property
    def opcode(self) -> str:
        words = self.source.split()
        return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


@dataclass(frozen=True)
class Loop:
    lo: int
    hi: int
    kind: str
    instructions: int
    samples: float
    stalls: collections.Counter


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_source_page(path: Path) -> list[Instruction]:
    """The instructions of ncu's source page CSV (its second line is the header)."""
    rows = list(csv.reader(open(path)))
    header, data = rows[1], rows[2:]
    address, source, samples = header.index("Address"), header.index("Source"), header.index(SAMPLES)
    stall_columns = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in data:
        if len(r) <= samples or not r[address].strip():
            continue
        try:
            at = int(r[address], 16)
        except ValueError:
            continue
        out.append(Instruction(at, r[source], number(r[samples]), {header[i]: number(r[i]) for i in stall_columns}))
    return out


def kind_of(opcodes: collections.Counter) -> str:
    if any(o.startswith("LDGSTS") for o in opcodes):
        return "exact pass"
    return "fp16 scan" if any("HMNMX2" in o for o in opcodes) else "fp32 scan/sample"


def product_loops(instructions: list[Instruction]) -> list[Loop]:
    """Every backward branch's range that issues products, with its samples and stall reasons."""
    loops = []
    for branch in instructions:
        targets = re.findall(r"0x([0-9a-f]+)", branch.source) if "BRA" in branch.source else []
        if not targets or int(targets[-1], 16) >= branch.address:
            continue
        lo, hi = int(targets[-1], 16), branch.address
        body = [x for x in instructions if lo <= x.address <= hi]
        opcodes = collections.Counter(x.opcode for x in body)
        if not any(o.startswith(("QGMMA", "HGMMA")) for o in opcodes):
            continue
        stalls = collections.Counter()
        for x in body:
            stalls.update(x.stalls)
        loops.append(Loop(lo, hi, kind_of(opcodes), len(body), sum(x.samples for x in body), stalls))
    return loops


def report(instructions: list[Instruction], lo: int | None = None, hi: int | None = None, top: int = 25) -> str:
    """The product loops by their share of the samples (the eight largest of under 1,200 instructions),
    then the `top` hottest instructions of [lo, hi] (default: the largest exact-pass loop)."""
    total = sum(x.samples for x in instructions)
    lines = [f"instructions {len(instructions)} samples {total}"]
    loops = product_loops(instructions)
    shown = sorted((x for x in loops if x.instructions < 1200 and x.samples > 0),
                   key=lambda x: (x.samples, x.lo, x.hi), reverse=True)[:8]
    for x in shown:
        reasons = ", ".join(f"{k[6:]} {v / x.samples * 100:.0f}%" for k, v in x.stalls.most_common(7))
        lines.append(f"{x.kind:18s} {x.lo:#x}-{x.hi:#x} {x.instructions} instr, {x.samples / total * 100:.1f}% of samples; "
                     + reasons)
    if lo is None:
        exact = max((x for x in loops if x.kind == "exact pass"), key=lambda x: (x.samples, x.lo, x.hi), default=None)
        if exact is None:
            return "\n".join(lines + ["no exact-pass loop: give --range LO HI"])
        lo, hi = exact.lo, exact.hi
    body = [x for x in instructions if lo <= x.address <= hi]
    samples = sum(x.samples for x in body)
    lines.append(f"region samples {samples} {samples / total * 100:.1f}%")
    for x in sorted(body, key=lambda x: -x.samples)[:top]:
        reasons = ", ".join(f"{k[6:]} {v:.0f}" for k, v in collections.Counter(x.stalls).most_common(3))
        lines.append(f"{x.address - lo:#6x} {x.samples / samples * 100:5.1f}%  {x.source[:70]:70s} {reasons}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source_csv", type=Path, help="ncu -i REPORT --page source --csv --print-source sass")
    p.add_argument("--range", nargs=2, metavar=("LO", "HI"), help="hex addresses (default: the largest exact-pass loop)")
    p.add_argument("--top", type=int, default=25, help="hottest instructions listed (default 25)")
    args = p.parse_args(argv)
    lo, hi = (int(a, 16) for a in args.range) if args.range else (None, None)
    print(report(read_source_page(args.source_csv), lo, hi, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
