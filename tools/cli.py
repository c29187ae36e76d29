"""The command line the variant tools share (tools/ablate.py, tools/timeline.py): a step, variant
names, the folder their builds go to, and the chunk shapes to run."""

from __future__ import annotations

import argparse


def variant_tool_parser(doc: str, steps: tuple[str, ...]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=steps)
    p.add_argument("variant", nargs="+")
    p.add_argument("--out", default=".ablate")
    p.add_argument("--shape", action="append", default=[], metavar="MxN")
    return p
