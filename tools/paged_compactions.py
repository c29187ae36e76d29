"""How often does the paged decode kernel check and compact a row's candidate buffer? (CPU, no GPU.)

A model of one work item's selection in templates/paged_mqa_topk_wgmma.cu.j2, tile by tile: each row
appends the tile's keys whose score passes its threshold (none at first: every key); every row's bound
grows by a tile; where some row's bound passes kBuffer - kKeyTile the counts are read (a check: two
barriers of the math warps) and each row over that is compacted to its exact top k, its threshold
becoming the k-th score. The kernel's appends, checks and compactions follow its scores only, so
counting them here says what a buffer size or a tile size saves before a GPU times it (experiment
log, "2026-12-05: the shipped tables were stale; the paged kernel's appends read from its SASS").

With --sample-tiles S, each row starts from a sampled gate instead of nothing, as the gated prefill
kernel's blocks do (templates/fused_mqa_topk_gate_wgmma.cu.j2: S tiles spread over the part, the
sample's rank-r score with r = 1.5 mu + 4 sqrt(mu) + 4 for the mu top-k keys the sample holds in
expectation): fewer appends and compactions, but a row whose part holds fewer than top_k keys at or
above its gate has lost some of its top k, and would have to be scanned again (counted as misses).
The paged kernel has no such gate: this says what one would save.

    python tools/paged_compactions.py [--keys 65536] [--tile 128] [--top-k 2048] [--buffer 3072 ...] [--rows 4]
                                      [--sample-tiles 0 ...] [--family random|increasing|bursts]
"""

from __future__ import annotations

import argparse
import math
import sys

import torch


def sampled_gate(scores: torch.Tensor, tile: int, top_k: int, sample_tiles: int) -> torch.Tensor:
    """Each row's gate from sample_tiles tiles spread over its keys (sample_tile's placement, at most an
    eighth of the tiles), the gated kernel's gate_rank: the rank-r sampled score, r = 1.5 mu + 4 sqrt(mu)
    + 4 with mu = m top_k / keys for m sampled keys; -inf (no gate) where r would pass m."""
    rows, keys = scores.shape
    tiles = -(-keys // tile)
    samples = min(sample_tiles, max(1, tiles // 8))
    starts = [(2 * i + 1) * tiles // (2 * samples) * tile for i in range(samples)]
    sample = torch.cat([scores[:, lo:lo + tile] for lo in starts], dim=1)
    mu = sample.shape[1] * top_k / keys
    rank = math.ceil(1.5 * mu + 4 * math.sqrt(mu) + 4)
    if rank > sample.shape[1]:
        return torch.full((rows,), float("-inf"), dtype=scores.dtype)
    return sample.topk(rank, dim=1).values[:, -1]


def selection_counts(scores: torch.Tensor, tile: int, top_k: int, buffer: int, gate: torch.Tensor | None = None) -> dict:
    """scores [rows, keys] in key order (one work item); the kernel's checks, compactions (summed over
    the rows) and appends a row over the item, from each row's `gate` (a key enters at or above it;
    none: every key) or from nothing; misses: rows whose gate leaves fewer than top_k of their keys."""
    rows, keys = scores.shape
    theta = torch.full((rows,), float("-inf"), dtype=scores.dtype)
    misses = 0
    if gate is not None:
        misses = int(((scores >= gate[:, None]).sum(1) < min(top_k, keys)).sum())
        theta = torch.nextafter(gate, torch.full_like(gate, float("-inf")))  # (">= gate" as "> theta")
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
    return {"checks": checks, "compactions": compactions, "appends_per_row": appended / rows, "tiles": -(-keys // tile),
            "misses": misses}


def family_scores(family: str, rows: int, keys: int, gen: torch.Generator) -> torch.Tensor:
    """[rows, keys] scores in key order: `random` (uniform), `increasing` (rising along the keys, with
    noise: every key beats most of those before it, the streaming select's worst case), or `bursts`
    (uniform, but a few short runs of keys far above the rest: a sample may miss them)."""
    scores = torch.rand(rows, keys, generator=gen)
    if family == "increasing":
        return scores * 0.1 + torch.linspace(0, 1, keys)
    if family == "bursts":
        for _ in range(8):
            at = int(torch.randint(0, keys - 256, (1,), generator=gen))
            scores[:, at:at + 256] += 1.0
        return scores
    if family != "random":
        raise SystemExit(f"--family {family}: random, increasing or bursts")
    return scores


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=65536, help="keys a work item (a part) scans")
    p.add_argument("--tile", type=int, default=128, help="keys a tile: 64 per math warpgroup")
    p.add_argument("--top-k", type=int, default=2048)
    p.add_argument("--buffer", type=int, action="append", help="candidates a row (default 3072)")
    p.add_argument("--rows", type=int, default=4, help="rows a request (next_n)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-tiles", type=int, action="append", help="a sampled gate of this many tiles (default 0: none)")
    p.add_argument("--family", default="random", help="random, increasing or bursts")
    args = p.parse_args(argv)
    scores = family_scores(args.family, args.rows, args.keys, torch.Generator().manual_seed(args.seed))
    for buffer in args.buffer or [3072]:
        if buffer < args.top_k + args.tile:
            raise SystemExit(f"--buffer {buffer}: must hold top_k + a tile")
        for samples in args.sample_tiles or [0]:
            if samples * args.tile > buffer - args.tile:
                raise SystemExit(f"--sample-tiles {samples}: the sample must leave the buffer a tile")
            gate = sampled_gate(scores, args.tile, args.top_k, samples) if samples else None
            c = selection_counts(scores, args.tile, args.top_k, buffer, gate)
            print(f"{args.family} {args.keys} keys, tiles of {args.tile}, top-{args.top_k}, {args.rows} rows, buffer "
                  f"{buffer}, {f'a gate of {samples} sampled tiles' if samples else 'no gate'}: {c['checks']} checks in "
                  f"{c['tiles']} tiles, {c['compactions']} compactions, {c['appends_per_row']:.0f} appends a row"
                  + (f", {c['misses']} of {args.rows} rows missed" if samples else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
