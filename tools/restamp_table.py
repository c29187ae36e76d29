"""Carry a tuned table over a change that moved no kernel code: re-stamp its entries' code digest.

The code digest (runtime/kernel_code.py) covers the templates and the modules that render them, so a
change that only moves files, edits comments or reorganises Python changes it, and the runtime then
trusts the table's entries only where fused won by a wide margin (runtime.dispatch.STALE_MARGIN). If
every variant the table names (and every shipped dense variant) renders, comments aside, exactly the
code it rendered at BASE, the revision whose digest the entries record, the libraries compile from
the same code with the same flags and the entries' timings stand: this rewrites their `code` to this
checkout's digest and adds a line to the table's history saying so. Anything else is refused and
needs `python -m generator tune --refresh` on the GPU.

--decode does the same for a decode table (runtime/decode_table.py), whose digest covers the paged
decode kernel and the dense kernels and which dispatch ignores whole once it is stale: every paged
default and dense paged build its grid runs (generator.paged_bench.decode_variants) must render the
same code as at BASE; else `python -m generator decode --tune` re-times it.

--sass accepts more: a variant whose rendered code differs is compiled on both sides and accepted
if every kernel in it comes out instruction for instruction the same (tools/compare_sass.py), which
is what a restructuring of the templates that keeps the machine code needs. It compiles two
cubins per changed variant (-j jobs at a time; about 10 s of one core each for a gated build). Only
the kernels are compared, not the host code: a change to how a library launches them (grid,
cluster size, which kernel a call takes) is not seen here and needs the table re-timed, and a
library that fails to build on the host side is not either (`python -m generator build --shipped`).

    python tools/restamp_table.py --base REV [--table tuned_configs/H200-132SM.json] [--sass [-j N]]
    python tools/restamp_table.py --base REV --decode [--table tuned_configs/decode/H200-132SM.json] [--sass]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from generator.tune import note_in_history  # noqa: E402
from runtime.build import BASE_NVCC_FLAGS, spec_from_name  # noqa: E402
from runtime.kernel_code import code_digest  # noqa: E402
from runtime.render import render  # noqa: E402
from runtime.table import SHIPPED_TABLE_DIR  # noqa: E402
from tools.compare_sass import base_sources, compare  # noqa: E402


def digests_at(rev: str) -> tuple[str, str]:
    """(prefill, paged) code digests of revision `rev` (runtime/kernel_code.py's, from its files in git)."""
    from runtime import kernel_code

    def show(path: str) -> bytes:
        return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], capture_output=True, check=True).stdout

    listed = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", rev, "templates"], capture_output=True,
                            text=True, check=True).stdout.split()
    return kernel_code.digests_of({path[len("templates/"):]: show(path) for path in listed},
                                  lambda name: show(f"runtime/{name}"))


def timed_at(base_rev: str, recorded: set[str], digest_at_base: str, remedy: str) -> bool:
    """Whether the entries' recorded code is `base_rev`'s: a base with other code than the one the
    entries were timed on would carry them over changes it never saw. Says why not."""
    if recorded == {digest_at_base}:
        return True
    print(f"refused: the entries record code {sorted(recorded)}, and {base_rev}'s is {digest_at_base}: name the revision "
          f"they were timed on (or re-stamped to) as --base, or re-time with {remedy}.")
    return False


def code_lines(source: str) -> list[str]:
    """A rendered source without its comments and blank lines (what the compiler sees, near enough)."""
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    return [line.strip() for line in re.sub(r"//[^\n]*", "", source).splitlines() if line.strip()]


def shown_unchanged(base_rev: str, names: list[str], remedy: str, sass_jobs: int = 0) -> str | None:
    """How the variants were shown to compile as at `base_rev`, or None (saying why) when one renders
    other code or the flags differ. With sass_jobs, a variant whose code differs is compiled on both
    sides and accepted when every kernel's SASS is the same."""
    with tempfile.TemporaryDirectory() as folder:
        base, flags = base_sources(base_rev, names, Path(folder))
        differ = [n for n in names if code_lines(render(spec_from_name(n))) != code_lines(base[n])]
        if tuple(flags) != BASE_NVCC_FLAGS:
            print(f"refused: the nvcc flags differ from {base_rev}'s. Re-time with {remedy}.")
            return None
        if differ and sass_jobs:
            print(f"{len(differ)} of {len(names)} variants render other code than at {base_rev}: comparing their SASS",
                  flush=True)
            with ThreadPoolExecutor(max(1, sass_jobs // 2)) as pool:  # (two nvcc a comparison)
                results = list(pool.map(lambda n: compare(n, base[n], Path(folder) / n), differ))
            for text, _ in results:
                print(text, flush=True)
            differ = [n for n, (_, same) in zip(differ, results) if not same]
            if not differ:
                return (f"of {len(names)} variants, {len(names) - len(results)} render the same code as at {base_rev} "
                        f"(comments aside) and {len(results)} compile to the same SASS (every kernel); same flags")
    if differ:
        print(f"refused: {len(differ)} of {len(names)} variants {'compile to other SASS' if sass_jobs else 'render other code'}"
              f" than at {base_rev} ({differ[:5]}{'...' if len(differ) > 5 else ''}). Re-time with {remedy}"
              f"{'' if sass_jobs else ', or compare their SASS with --sass'}.")
        return None
    return f"all {len(names)} variants render the same code as at {base_rev} (comments aside), same flags"


def restamp_decode(base_rev: str, path: Path, sass_jobs: int) -> int:
    from generator.paged_bench import decode_variants
    from runtime.decode_table import decode_code

    data = json.loads(path.read_text())
    prefill, paged = digests_at(base_rev)
    if not timed_at(base_rev, {data.get("code")}, f"{paged}.{prefill}", "`python -m generator decode --tune`"):
        return 1
    entries = data["entries"]
    names = decode_variants(sorted({e["heads"] for e in entries}), sorted({e["top_k"] for e in entries}),
                            sorted({e["next_n"] for e in entries}))
    same = shown_unchanged(base_rev, names, "`python -m generator decode --tune`", sass_jobs)
    if same is None:
        return 1
    old, new = data.get("code"), decode_code()
    data["code"] = new
    note_in_history(data, f"python tools/restamp_table.py --base {base_rev} --decode{' --sass' * bool(sass_jobs)}",
                    restamped=f"code {old} -> {new}: {same}")
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{path}: re-stamped {old} -> {new} ({same})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the revision whose kernel code the entries were timed on")
    p.add_argument("--table", type=Path, help="default: the shipped H200 table (with --decode, its decode table)")
    p.add_argument("--decode", action="store_true", help="re-stamp a decode table")
    p.add_argument("--sass", action="store_true", help="accept variants whose code differs but whose SASS is the same")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="nvcc processes at a time with --sass")
    args = p.parse_args()
    sass_jobs = max(2, args.jobs) if args.sass else 0
    if args.decode:
        return restamp_decode(args.base, args.table or SHIPPED_TABLE_DIR / "decode" / "H200-132SM.json", sass_jobs)
    args.table = args.table or SHIPPED_TABLE_DIR / "H200-132SM.json"
    from generator.shipped import shipped_dense_variants

    data = json.loads(args.table.read_text())
    names = sorted({e["variant"] for e in data["entries"]} | {v.name for v in shipped_dense_variants()})
    old_codes = {e.get("code") for e in data["entries"]}
    if not timed_at(args.base, old_codes, digests_at(args.base)[0], "`python -m generator tune --refresh`"):
        return 1
    same = shown_unchanged(args.base, names, "`python -m generator tune --refresh`", sass_jobs)
    if same is None:
        return 1
    new = code_digest()
    for e in data["entries"]:
        e["code"] = new
    data["code"] = new
    note_in_history(data, f"python tools/restamp_table.py --base {args.base}{' --sass' * bool(sass_jobs)}",
                    restamped=f"code {', '.join(sorted(c for c in old_codes if c))} -> {new}: {same}")
    args.table.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.table}: {len(data['entries'])} entries re-stamped {sorted(c for c in old_codes if c)} -> {new} ({same})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
