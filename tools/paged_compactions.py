"""How often does the paged decode kernel check and compact a row's candidate buffer? (CPU, no GPU.)

A model of one work item's selection in templates/paged_mqa_topk_wgmma.cu.j2, tile by tile: each row
appends the tile's keys whose score passes its threshold (none at first: every key); every row's bound
grows by a tile; where some row's bound passes kBuffer - kKeyTile the counts are read (a check: two
barriers of the math warps) and each row over that is compacted to its exact top k, its threshold
becoming the k-th score. The kernel's appends, checks and compactions follow its scores only, so
counting them here says what a buffer size or a tile size saves before a GPU times it (experiment
log, "2026-12-05: the paged kernel's appends").

    python tools/paged_compactions.py [--keys 65536] [--tile 128] [--top-k 2048] [--buffer 3072 ...] [--rows 4]
"""

from __future__ import annotations

import argparse
import sys

import torch


def selection_counts(scores: torch.Tensor, tile: int, top_k: int, buffer: int) -> dict:
    """scores [rows, keys] in key order (one work item); the kernel's checks, compactions (summed over
    the rows) and appends a row over the item."""
    rows, keys = scores.shape
    theta = torch.full((rows,), float("-inf"), dtype=scores.dtype)
    kept = [scores.new_empty(0) for _ in range(rows)]
    bound = [0] * rows
    checks = compactions = appended = 0
    for lo in range(0, keys, tile):
        for r in range(rows):
            x = scores[r, lo:lo + tile]
            taken = x[x > theta[r]]  # (after a compaction, above the k-th: a later key of its score ranks below it)
            kept[r] = torch.cat([kept[r], taken])
            appended += taken.numel()
            bound[r] += tile
        if max(bound) > buffer - tile:
            checks += 1
            for r in range(rows):
                bound[r] = kept[r].numel()
                if bound[r] > buffer - tile:
                    compactions += 1
                    kept[r] = kept[r].topk(top_k).values
                    theta[r] = kept[r][-1]
                    bound[r] = top_k
    return {"checks": checks, "compactions": compactions, "appends_per_row": appended / rows, "tiles": -(-keys // tile)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=65536, help="keys a work item (a part) scans")
    p.add_argument("--tile", type=int, default=128, help="keys a tile: 64 per math warpgroup")
    p.add_argument("--top-k", type=int, default=2048)
    p.add_argument("--buffer", type=int, action="append", help="candidates a row (default 3072)")
    p.add_argument("--rows", type=int, default=4, help="rows a request (next_n)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    scores = torch.rand(args.rows, args.keys, generator=torch.Generator().manual_seed(args.seed))
    for buffer in args.buffer or [3072]:
        if buffer < args.top_k + args.tile:
            raise SystemExit(f"--buffer {buffer}: must hold top_k + a tile")
        c = selection_counts(scores, args.tile, args.top_k, buffer)
        print(f"{args.keys} keys, tiles of {args.tile}, top-{args.top_k}, {args.rows} rows, buffer {buffer}: "
              f"{c['checks']} checks in {c['tiles']} tiles, {c['compactions']} compactions, "
              f"{c['appends_per_row']:.0f} appends a row", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
