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

    python tools/restamp_table.py --base REV [--table tuned_configs/H200-132SM.json]
    python tools/restamp_table.py --base REV --decode [--table tuned_configs/decode/H200-132SM.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generator.tune import note_in_history  # noqa: E402
from runtime.build import BASE_NVCC_FLAGS, spec_from_name  # noqa: E402
from runtime.kernel_code import code_digest  # noqa: E402
from runtime.render import render  # noqa: E402
from runtime.table import SHIPPED_TABLE_DIR  # noqa: E402
from tools.compare_sass import base_sources  # noqa: E402

def code_lines(source: str) -> list[str]:
    """A rendered source without its comments and blank lines (what the compiler sees, near enough)."""
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    return [line.strip() for line in re.sub(r"//[^\n]*", "", source).splitlines() if line.strip()]


def refused(base_rev: str, names: list[str], remedy: str) -> bool:
    """Whether any of these variants renders other code than at `base_rev` (or the flags differ): says so."""
    with tempfile.TemporaryDirectory() as folder:
        base, flags = base_sources(base_rev, names, Path(folder))
    differ = [n for n in names if code_lines(render(spec_from_name(n))) != code_lines(base[n])]
    if differ or tuple(flags) != BASE_NVCC_FLAGS:
        print(f"refused: {len(differ)} of {len(names)} variants render other code than at {base_rev} "
              f"({differ[:5]}{'...' if len(differ) > 5 else ''}); flags {'differ' if tuple(flags) != BASE_NVCC_FLAGS else 'same'}."
              f" Re-time with {remedy}.")
        return True
    return False


def restamp_decode(base_rev: str, path: Path) -> int:
    from generator.paged_bench import decode_variants
    from runtime.decode_table import decode_code

    data = json.loads(path.read_text())
    entries = data["entries"]
    names = decode_variants(sorted({e["heads"] for e in entries}), sorted({e["top_k"] for e in entries}),
                            sorted({e["next_n"] for e in entries}))
    if refused(base_rev, names, "`python -m generator decode --tune`"):
        return 1
    old, new = data.get("code"), decode_code()
    data["code"] = new
    note_in_history(data, f"python tools/restamp_table.py --base {base_rev} --decode",
                    restamped=f"code {old} -> {new}: all {len(names)} variants render the same code as at {base_rev} "
                              "(comments aside), same flags")
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{path}: re-stamped {old} -> {new} ({len(names)} variants render the same code as at {base_rev})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the revision whose kernel code the entries were timed on")
    p.add_argument("--table", type=Path, help="default: the shipped H200 table (with --decode, its decode table)")
    p.add_argument("--decode", action="store_true", help="re-stamp a decode table")
    args = p.parse_args()
    if args.decode:
        return restamp_decode(args.base, args.table or SHIPPED_TABLE_DIR / "decode" / "H200-132SM.json")
    args.table = args.table or SHIPPED_TABLE_DIR / "H200-132SM.json"
    from generator.shipped import shipped_dense_variants

    data = json.loads(args.table.read_text())
    names = sorted({e["variant"] for e in data["entries"]} | {v.name for v in shipped_dense_variants()})
    old_codes = {e.get("code") for e in data["entries"]}
    if refused(args.base, names, "`python -m generator tune --refresh`"):
        return 1
    new = code_digest()
    for e in data["entries"]:
        e["code"] = new
    data["code"] = new
    note_in_history(data, f"python tools/restamp_table.py --base {args.base}",
                    restamped=f"code {', '.join(sorted(c for c in old_codes if c))} -> {new}: all {len(names)} variants "
                              f"render the same code as at {args.base} (comments aside), same flags")
    args.table.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.table}: {len(data['entries'])} entries re-stamped {sorted(c for c in old_codes if c)} -> {new} "
          f"({len(names)} variants render the same code as at {args.base})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
