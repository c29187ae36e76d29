"""How much device memory the paged decode kernel's workspace takes a step, at most: no GPU needed.

The workspace (templates/paged_mqa_topk_wgmma.cu.j2's workspace_layout: counters, and where a request
is cut into parts, the parts' lists and the rows' histograms) depends on the batch and on the parts a
request, which runtime.paged.parts_per_request chooses from the batch, the block table's width and the
SM count; never on the context lengths themselves. For each paged decode default this compiles (or
finds in the kernel cache) its library, asks it for paged_topk_workspace_bytes over a grid of batches
and block-table widths, and prints the largest a request and the largest a step.

    python tools/paged_workspace.py [--sms 132] [--max-batch 256] [--heads 64] [--top-k 2048] [--next-n 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WIDTHS = [1 << s for s in range(13, 23)]  # block-table capacity in tokens: 8K .. 4M


def largest(lib, batches, sms: int, top_k: int) -> tuple[tuple, tuple]:
    """((bytes a request, batch, capacity, parts), (bytes a step, batch, capacity, parts)) over the grid,
    each at the least batch and capacity that reach it."""
    from runtime.paged import parts_per_request

    per_request, per_step = (0, 0, 0, 0), (0, 0, 0, 0)
    for batch in batches:
        for capacity in WIDTHS:
            parts = parts_per_request(batch, capacity, top_k, sms)
            size = lib.workspace_bytes(batch, parts)
            if size > per_step[0]:
                per_step = (size, batch, capacity, parts)
            if size / batch > per_request[0]:
                per_request = (size / batch, batch, capacity, parts)
    return per_request, per_step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sms", type=int, default=132, help="the SM count parts_per_request fills (default: the H200's)")
    p.add_argument("--max-batch", type=int, default=256, help="batches 1 .. this for the largest a step")
    p.add_argument("--heads", type=int, action="append", choices=(32, 64))
    p.add_argument("--top-k", dest="top_k", type=int, action="append", choices=(512, 1024, 2048))
    p.add_argument("--next-n", dest="next_n", type=int, action="append", choices=(1, 2, 3, 4))
    args = p.parse_args()

    from runtime.build import build
    from runtime.loader import PagedLibrary
    from runtime.paged_variant import default_paged_variant

    variants = [default_paged_variant(h, k, n, 64) for h in args.heads or (32, 64) for k in args.top_k or (512, 1024, 2048)
                for n in args.next_n or (1, 2, 3, 4)]
    for built in build(variants):
        lib = PagedLibrary(built.variant, str(built.library))  # (opened on the CPU: nothing launches)
        top_k = built.variant.top_k
        (req, rb, rc, rp), (step, sb, sc, sp) = largest(lib, range(1, args.max_batch + 1), args.sms, top_k)
        print(f"{built.variant.name}: at most {req / 2**20:.2f} MiB a request ({rb} x {rc // 1024}K tokens, {rp} parts); "
              f"{step / 2**20:.1f} MiB a step up to {args.max_batch} requests ({sb} x {sc // 1024}K, {sp} parts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
