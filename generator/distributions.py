"""The data distributions the benchmarks time on, prefill chunks and decode steps alike.

The streaming top-k's cost depends on how often a tile's keys beat its running threshold: random data
settles it early; recency (scores rising along the context, as an indexer's do near the query) keeps
raising it, the worst case of a streaming selection. Signed weights mix signs within a row's head sum
(what the fp16 gate's bound finds hardest: docs/fp16-gate.md).
"""

from __future__ import annotations

from dataclasses import replace

import torch

DISTRIBUTIONS = {
    "positive": "random keys and queries, positive weights",
    "signed": "random keys and queries, signed weights",
    "indexer": "positive weights, per-token scales spread over 16x, rising 4x from a request's first token to its "
               "last (recency), its first 4 tokens 8x (attention sinks)",
}


def add_distribution_option(p, what: str) -> None:
    """--distribution (repeatable) on parser `p`, its help `what` it sets, then each distribution described."""
    p.add_argument("--distribution", action="append", choices=list(DISTRIBUTIONS),
                   help=what + ": " + "; ".join(f"{k}: {v}" for k, v in DISTRIBUTIONS.items()))


def check_distribution(distribution: str) -> None:
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {list(DISTRIBUTIONS)}, got {distribution!r}")


def head_weights(shape, distribution: str, gen: torch.Generator, device) -> torch.Tensor:
    """Weights of `shape` (rows x heads): uniform in [0, 1), or in [-1, 1) for `signed`."""
    check_distribution(distribution)
    weights = torch.rand(shape, generator=gen, device=device)
    return weights * 2 - 1 if distribution == "signed" else weights


def key_scales(position: torch.Tensor, context: int, distribution: str, gen: torch.Generator) -> torch.Tensor:
    """Per-token key scales for the tokens at `position` (float, any shape) of a `context`-token request:
    uniform in [0.5, 1.5), or for `indexer` spread over 16x, times 1 + 3 position / (context - 1), the first
    4 tokens 8x more."""
    check_distribution(distribution)
    scales = torch.rand(position.shape, generator=gen, device=position.device) + 0.5
    if distribution == "indexer":
        scales = (torch.rand(position.shape, generator=gen, device=position.device) * 4 - 2).exp2()
        scales = scales * (1 + 3 * position / max(context - 1, 1)) * torch.where(position < 4, 8.0, 1.0)
    return scales


def chunk_workload(distribution: str, rows: int, keys: int, heads: int, top_k: int, seed: int = 0, device="cpu"):
    """A causal prefill chunk (the last `rows` tokens of a `keys`-token request: generator.workloads'
    `random` family's q, keys and ranges) with the weights and key scales of `distribution`."""
    from .workloads import make_workload

    check_distribution(distribution)
    wl = make_workload("random", rows, keys, heads, top_k, seed=seed, device=device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed + 1)
    weights = head_weights((rows, heads), distribution, gen, device)
    scales = key_scales(torch.arange(keys, dtype=torch.float32, device=device), keys, distribution, gen)
    return replace(wl, family=distribution, weights=weights, k_scale=scales)
