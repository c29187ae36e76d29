"""compute-sanitizer's four tools over every kind of shipped kernel, one line per tool and kernel (GPU):

    python tools/sanitize.py [--jobs 4] [--out DIR]

Each run is one small launch (tools/sanitize_launch.py) under `compute-sanitizer --tool T`, with only
this project's kernels instrumented (torch's own run natively): the gated kernel with the math warps
selecting, with three and with seven selector warps on a launch whose every block is split into
parts of its keys, the gated kernel on all_equal (every block overflows and is rescanned by the
streaming kernel compiled into the same library), the streaming wgmma and the portable mma.sync
kernels, the dense path's logits and top-k kernels over several pieces, and the paged decode kernel
(a step cut into parts whose lists are merged, with and without the histogram's floor, by one CTA
or, a row each, by several; and
ties at the k-th place, which run its select over keys). A line passes when the tool reports 0
errors (racecheck: 0 hazards) and the launch's answers verify.

What racecheck cannot see: it tracks shared memory only. The split tail hands a block's parts'
candidates and counts to the CTA that finishes the block's last part through global memory (a
__threadfence, then an atomic count of arrived parts); that hand-over is tested by repetition instead (tests/
test_gpu_reliability.py: 50 launches of a split tail select the same sets, every row verified).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
KERNELS = "kns=fused_mqa_topk|dense_logits|dense_topk|heaviest_first|paged_mqa_topk"


def cases() -> list[tuple[str, str, int, int, str]]:
    """(what, variant name, rows, keys, family)."""
    from runtime.defaults import default_variant
    from runtime.dense_variant import default_dense_variant
    from runtime.paged_variant import default_paged_variant

    gated = default_variant(32, 2048, gated=True)
    # At top-512 a part may be 8,192 keys (4 x the gate floor): 20,000 keys split each block in two,
    # at a size the sanitizer gets through in a minute or two.
    sw3 = dataclasses.replace(default_variant(32, 512, gated=True), key_tile=256, warps=8, sample_tiles=16,
                              select_warps=3)
    sw7 = dataclasses.replace(sw3, sample_tiles=32, select_warps=7)
    return [
        ("gated", gated.name, 16, 20_000, "random"),
        ("selector warps, split tail", sw3.name, 16, 20_000, "random"),
        ("selector warpgroup, split tail", sw7.name, 16, 20_000, "random"),
        ("gated, every block rescanned", gated.name, 16, 12_000, "all_equal"),
        ("split tail, parts rescanned", sw3.name, 16, 20_000, "all_equal"),
        ("streaming wgmma", default_variant(32, 2048, gated=False).name, 16, 12_000, "random"),
        ("mma.sync", default_variant(32, 2048, mma="mmasync").name, 16, 12_000, "random"),
        ("dense", default_dense_variant(32, 2048).name, 64, 12_000, "random"),
        # (rows: requests, keys: tokens a request; four parts a request, merged by the last one's CTA)
        ("paged, parts merged", default_paged_variant(64, 2048, 1, 64).name, 2, 9_000, "random"),
        ("paged, ties at the k-th", default_paged_variant(32, 512, 2, 64).name, 2, 3_000, "all_equal"),
        # (four lists of 2,048 overflow its 4,096-entry buffer: the merge past the histogram's floor)
        ("paged, merged past the floor", default_paged_variant(64, 2048, 2, 64).name, 2, 9_000, "random"),
        ("paged, floor on ties", default_paged_variant(64, 2048, 2, 64).name, 2, 9_000, "all_equal"),
        # (the next_n 4 default, `_m4`: the CTAs of a request's last four parts merge its rows, three
        # of them waiting)
        ("paged, rows merged by four CTAs", default_paged_variant(64, 2048, 4, 64).name, 2, 9_000, "random"),
    ]


def run_one(tool: str, case, timeout: int) -> tuple[bool, str]:
    what, name, rows, keys, family = case
    cmd = ["compute-sanitizer", "--tool", tool, "--kernel-regex", KERNELS, "--print-limit", "5",
           sys.executable, str(ROOT / "tools" / "sanitize_launch.py"), name, "--rows", str(rows), "--keys", str(keys),
           "--family", family]
    if tool == "racecheck":
        cmd[3:3] = ["--racecheck-report", "all"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return False, f"{tool:9s} {what:32s} timed out after {timeout} s"
    text = proc.stdout + proc.stderr
    summary = re.findall(r"(?:ERROR|RACECHECK) SUMMARY: ([^\n]*)", text)
    verified = re.search(r"^(?:mqa|paged_topk)_\S+ .*$", proc.stdout, re.M)
    clean = bool(summary) and all(re.match(r"0 (errors|hazards)", s) for s in summary)
    ok = clean and proc.returncode == 0 and verified is not None and ": ok" in verified.group(0)
    line = (f"{tool:9s} {what:32s} {'PASS' if ok else 'FAIL'}  {'; '.join(summary) or 'no summary'}  |  "
            f"{verified.group(0) if verified else text[-600:]}")
    return ok, line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4, help="sanitizer runs at a time (they share the GPU)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a run may take")
    ap.add_argument("--tool", action="append", choices=TOOLS, help="default: all four")
    ap.add_argument("--case", action="append", help="only the kernels whose description contains this")
    ap.add_argument("--out", help="write the lines here too")
    args = ap.parse_args()
    chosen = [c for c in cases() if not args.case or any(x in c[0] for x in args.case)]
    runs = [(tool, case) for case in chosen for tool in (args.tool or TOOLS)]
    results = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for ok, line in pool.map(lambda r: run_one(r[0], r[1], args.timeout), runs):
            results.append((ok, line))
            print(line, flush=True)
    lines = [line for _, line in results]
    failed = sum(not ok for ok, _ in results)
    print(f"\n{len(results) - failed}/{len(results)} sanitizer runs clean and verified")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
