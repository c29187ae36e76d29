"""How well a decode table timed on one GPU chooses on another (no GPU needed).

`python -m generator decode --tune --table HERE.json` on a GPU times the paged kernel and the dense path
on the decode grid. Given that table and another GPU's (the one this GPU would borrow:
runtime.decode_table.decode_table), this prints, over the steps both timed, the time each policy takes
on this GPU against the faster of the two paths there (geometric mean): the paged kernel everywhere
(what a Hopper GPU without a table took before decode tables were borrowed), this GPU's own choices and
the borrowed ones; and the steps where the two tables choose differently, with this GPU's times. A
step whose own times are disturbed (one path timed slow by a hiccup) shows there as a borrowed choice
that loses: read the times.

    python tools/decode_table_transfer.py HERE.json tuned_configs/decode/H200-132SM.json [--as-called]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generator.timing import geometric_mean  # noqa: E402
from runtime.decode_table import DecodeEntry  # noqa: E402


def entries(path: str) -> dict[tuple, DecodeEntry]:
    rows = map(DecodeEntry.from_json, json.loads(Path(path).read_text())["entries"])
    return {(e.heads, e.top_k, e.next_n, e.batch, e.context): e for e in rows}


def transfer(here: dict, other: dict, planned: bool) -> tuple[dict[str, float], list[tuple]]:
    """Per policy, its time on this GPU over the faster path's (geometric mean over the common steps);
    and the steps where the two tables choose differently: (step, own choice, borrowed choice, times)."""
    def ms(e: DecodeEntry, path: str) -> float:
        return e.kernel_ms if path == "kernel" else e.dense_planned_ms if planned else e.dense_ms

    steps = sorted(here.keys() & other.keys())
    best = {k: min(ms(here[k], "kernel"), ms(here[k], "dense")) for k in steps}
    policies = {"the paged kernel everywhere": lambda k: "kernel", "this GPU's own table": lambda k: here[k].use(planned),
                "the borrowed table": lambda k: other[k].use(planned)}
    ratios = {name: geometric_mean([ms(here[k], choose(k)) / best[k] for k in steps]) for name, choose in policies.items()}
    differ = [(k, here[k].use(planned), other[k].use(planned), ms(here[k], "kernel"), ms(here[k], "dense"))
              for k in steps if here[k].use(planned) != other[k].use(planned)]
    return ratios, differ


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("here", help="this GPU's decode table (decode --tune --table)")
    p.add_argument("borrowed", help="the table it would borrow")
    p.add_argument("--as-called", action="store_true", help="the dense path's time without the layout given")
    args = p.parse_args()
    here, other = entries(args.here), entries(args.borrowed)
    ratios, differ = transfer(here, other, planned=not args.as_called)
    print(f"{len(here.keys() & other.keys())} steps in both; on this GPU, over the faster path of each step "
          f"({'as called' if args.as_called else 'the layout given'}), geometric mean:")
    for name, r in ratios.items():
        print(f"  {name}: {r:.3f}")
    print(f"{len(differ)} steps chosen differently (heads, top-k, next_n, B, context: own, borrowed; this GPU's "
          "kernel and dense ms):")
    for k, own, borrowed, kernel, dense in differ:
        print(f"  {k}: {own}, {borrowed}; {kernel:.4f} / {dense:.4f} ({max(kernel, dense) / min(kernel, dense):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
