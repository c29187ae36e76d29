"""The `_g16` kernel's gate on the CPU: each (row, key)'s fp16 gate and bound, and how many keys a block lets through.

kernel_gate does to one row what a `_g16` kernel does to it (templates/fused_mqa_topk_gate_wgmma.cu.j2,
"The fp16 gate"): the gate's query times every key accumulated in fp16 (half_gate.fp16_accumulated: one
rounding a k32 instruction), relu, the heads in the kernel's chains (chain c over the query columns
chain_positions()[16c:16c + 16], as two FMA chains of the even and odd terms, added), the chains' sum G
and magnitudes C, and the bound from runtime/gate16.py's row_bounds and key_norms. tests/test_gate16.py
holds the bound to it; this tool measures what the bound costs: the keys either row of a two-row block
lets through (the union the kernel's exact pass scores again, a key of it costing 3.4-5.7 keys of the
fp32 scan on an H100: BENCHMARKS.md, "Past the epilogue: the fp16 gate built"), at the thresholds of
`thresholds`: the kernel's own gate (sampled: the exact score at gate_rank among the keys of the tiles
sample_tiles picks, what the built kernel passes), larger samples, a gate proved by counting lower
bounds (counted_gate), the k-th largest lower bound, and the row's exact k-th score (the least any gate
passes). Each row's bound is checked on every key (the run stops where the exact score leaves it).

Rows see every key (a long chunk's last rows). Data: the benchmarks' distributions
(generator.distributions: positive, signed and indexer-like), and any workload family (generator.workloads).

    python tools/gate16_model.py [--keys 131072] [--rows 8] [--top-k 2048] [--data positive --data signed ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from generator.distributions import DISTRIBUTIONS, chunk_workload  # noqa: E402
from generator.workloads import make_workload  # noqa: E402
from runtime.gate16 import CHAIN, GATE_HEADS, chain_positions, gate_inputs  # noqa: E402
from tools.half_gate import fma_chain, fp16_accumulated, to_full_range  # noqa: E402

# The kernel's sample (templates/fused_mqa_topk_gate_wgmma.cu.j2: sample_tiles, gate_rank) for the
# variants measured (..._t256_..._m32_g16).
KEY_TILE = 256
SAMPLE_TILES = 32
SAMPLE_HITS = 24
DATA = tuple(DISTRIBUTIONS)
COUNTED_FRACTIONS = (0.75, 1.0, 1.25, 1.5)  # counted_gate's candidate ranks, over mu


def kernel_gate(gate, row: int, k_fp8: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(G 2^r, the bound) for every key of `row` (before the key's scale), computed as the kernel computes
    them."""
    positions = chain_positions()
    a16 = fp16_accumulated(gate.q_gate[row].float(), k_fp8.float())          # [64 columns, keys]
    r16 = a16.clamp(min=0).half()
    w16 = gate.w_gate[row]
    scale, alpha, beta, absolute = gate.row_bounds[row, :4].double().tolist()
    g = torch.zeros(k_fp8.shape[0], dtype=torch.float64)
    c = torch.zeros_like(g)
    for chain in range(4):
        cols = positions[CHAIN * chain:CHAIN * (chain + 1)]
        even, odd = fma_chain(w16[cols[0::2]], r16[cols[0::2]]), fma_chain(w16[cols[1::2]], r16[cols[1::2]])
        v = (even + odd).half().double()
        g += v
        c += v.abs()
    bound = alpha * c + beta * gate.key_norms.double() + absolute
    return g * scale, bound


def exact_scores(q: torch.Tensor, weights: torch.Tensor, k_fp8: torch.Tensor, k_scale: torch.Tensor | None = None) -> torch.Tensor:
    """One row's exact scores (fp64) over every key: q [heads, 128], weights [heads]."""
    a = q.double() @ k_fp8.double().T                                        # [heads, keys]
    s = (weights.double()[:, None] * a.clamp(min=0)).sum(0)
    return s if k_scale is None else s * k_scale.double()


def sample_of(scores: torch.Tensor, top_k: int, hits: int = SAMPLE_HITS, tiles_at_most: int = SAMPLE_TILES):
    """The exact scores of the key tiles the kernel samples for a row seeing every key (sample_tiles:
    enough that the row's sample holds about `hits` of its top k, at most `tiles_at_most` tiles), and
    mu, the top-k keys it holds in expectation; None where the row is not gated."""
    n = scores.shape[0]
    tiles = n // KEY_TILE
    if n <= 4 * top_k or tiles == 0:
        return None
    wanted = -(-hits * n // (top_k * KEY_TILE))
    samples = min(tiles_at_most, wanted, max(1, tiles // 8))
    starts = [(2 * i + 1) * tiles // (2 * samples) * KEY_TILE for i in range(samples)]
    sample = torch.cat([scores[s:s + KEY_TILE] for s in starts])
    return sample, sample.shape[0] * top_k / n


# The sampled rank the fp16 gate takes (the template's gate_rank), and a tighter one, as functions of mu
# (the tighter one timed on an H100 and not kept: its rescans cost what its smaller union saved; BENCHMARKS.md,
# "Past the epilogue: the exact pass's key read ahead").
RANKS = {"built": lambda mu: 1.2 * mu + 3 * math.sqrt(mu) + 4,
         "tighter": lambda mu: mu + 3 * math.sqrt(mu) + 2}


def rank_miss_chance(mu: float, sampled: int, rank_of=RANKS["built"]) -> float:
    """The chance that a sample of `sampled` keys holds `rank_of(mu)` or more of the row's top-k when each
    sampled key is one of them with chance mu / sampled (Binomial): its gate then sits above the row's
    k-th score and the block goes to the rescan. (Keys of the top-k spread over the row at random; data
    whose top-k cluster in some tiles, as recency makes them, varies more.)"""
    counts = torch.arange(math.ceil(rank_of(mu)), sampled + 1, dtype=torch.float64)
    binomial = torch.distributions.Binomial(sampled, torch.tensor(mu / sampled, dtype=torch.float64))
    return float(binomial.log_prob(counts).exp().sum())


def sampled_gate(scores: torch.Tensor, top_k: int, hits: int = SAMPLE_HITS, tiles_at_most: int = SAMPLE_TILES,
                 rank_of=RANKS["built"]) -> float:
    """The kernel's sampled threshold: the exact score at rank rank_of(mu) of the sample (gate_rank's for
    the fp16 gate by default; -inf where the row is not gated)."""
    taken = sample_of(scores, top_k, hits, tiles_at_most)
    if taken is None:
        return -math.inf
    sample, mu = taken
    rank = math.ceil(rank_of(mu))
    return float(sample.topk(rank).values[-1]) if rank <= sample.shape[0] else -math.inf


def counted_gate(scores: torch.Tensor, lower: torch.Tensor, top_k: int, fractions=COUNTED_FRACTIONS) -> float | None:
    """A threshold the kernel could prove during the fp16 scan: the sample's scores at ranks f mu (f in
    `fractions`) as candidates, each row counting its keys whose lower bound (G - bound) reaches each;
    the highest candidate reached by top_k lower bounds is at most the row's exact k-th score (top_k keys'
    exact scores reach it), so it gates safely. None where none is reached (the block then keeps its
    sampled gate)."""
    taken = sample_of(scores, top_k)
    if taken is None:
        return None
    sample, mu = taken
    for f in sorted(fractions):  # the highest threshold first: the smallest rank
        rank = max(1, math.ceil(f * mu))
        if rank <= sample.shape[0]:
            t = float(sample.topk(rank).values[-1])
            if int((lower >= t).sum()) >= top_k:
                return t
    return None


def study_data(data: str, rows: int, keys: int, top_k: int, seed: int = 0, full_range: bool = False):
    """rows x keys of `data` (DATA: generator.distributions' chunk_workload, or a workload family) at 64 heads."""
    wl = (chunk_workload(data, rows, keys, GATE_HEADS, top_k, seed=seed) if data in DATA
          else make_workload(data, rows, keys, GATE_HEADS, top_k, seed=seed))
    return to_full_range(wl) if full_range else wl


def thresholds(exact: torch.Tensor, lower: torch.Tensor, top_k: int) -> dict[str, float | None]:
    """The thresholds a row's keys are gated against: the built kernel's (sampled), at the tighter rank
    (sampled_tighter: RANKS; rank_miss_chance says how often it would send a block to the rescan), with a sample 2x and
    4x larger (sampled_48, sampled_96: the tiles' cap lifted), counted_gate's over COUNTED_FRACTIONS and
    over one candidate at mu or 1.25 mu (None where it proved none: see study), the k-th largest lower
    bound (lower: what a selection over the fp16 bounds would prove) and the exact k-th score (the least
    any gate passes)."""
    return {"sampled": sampled_gate(exact, top_k),
            "sampled_tighter": sampled_gate(exact, top_k, rank_of=RANKS["tighter"]),
            "sampled_48": sampled_gate(exact, top_k, 48, 1 << 20),
            "sampled_96": sampled_gate(exact, top_k, 96, 1 << 20),
            "counted": counted_gate(exact, lower, top_k),
            "counted_1.0": counted_gate(exact, lower, top_k, (1.0,)),
            "counted_1.25": counted_gate(exact, lower, top_k, (1.25,)),
            "lower": float(lower.topk(top_k).values[-1]),
            "exact": float(exact.topk(top_k).values[-1])}


def study(data: str, keys: int, rows: int, top_k: int, seed: int = 0, full_range: bool = False) -> dict:
    """The union of each two-row block's candidates (a share of the keys; median and worst over the
    blocks) at each of `thresholds`' thresholds, candidates a row over top_k (median over the rows), and
    the bound over the largest error seen (the median key's bound, median over the rows)."""
    wl = study_data(data, rows, keys, top_k, seed, full_range)
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    scale = wl.k_scale.double()
    gates, uppers = [], []
    slack = []
    for row in range(rows):
        exact = exact_scores(wl.q[row], wl.weights[row], wl.k_fp8, wl.k_scale)
        g, bound = kernel_gate(gate, row, wl.k_fp8)
        g, bound = g * scale, bound * scale
        error = (g - exact).abs()
        assert bool((error <= bound).all()), f"{data} row {row}: the bound is broken"
        slack.append(float(bound.median() / error.max().clamp(min=1e-300)))
        uppers.append(g + bound)
        gates.append(thresholds(exact, g - bound, top_k))
    # A counted gate serves a block where each of its rows proved a threshold, else the block keeps the
    # sampled gate (the kernel lists the keys above and below the candidate apart, and scores the second
    # list only then).
    passed = {}
    for b in range(0, rows - 1, 2):
        for name in gates[b]:
            t = [gates[r][name] for r in (b, b + 1)]
            if None in t:
                t = [gates[r]["sampled"] for r in (b, b + 1)]
            passed.setdefault(name, []).extend(uppers[r] >= t[r - b] for r in (b, b + 1))
    out = {"data": data, "keys": keys, "rows": rows, "top_k": top_k, "full_range": full_range,
           "bound_over_largest_error": sorted(slack)[len(slack) // 2]}
    taken = sample_of(exact, top_k)  # (every row sees every key: one sample size and mu)
    if taken is not None:
        out.update({f"rank_miss_chance_{name}": rank_miss_chance(taken[1], taken[0].shape[0], f) for name, f in RANKS.items()})
    for name, p in passed.items():
        blocks = [float((p[b] | p[b + 1]).double().mean()) for b in range(0, rows - 1, 2)]
        per_row = sorted(float(x.sum()) / top_k for x in p)
        out[f"{name}_union_share"] = sorted(blocks)[len(blocks) // 2]
        out[f"{name}_union_share_worst"] = max(blocks)
        out[f"{name}_candidates_over_k"] = per_row[len(per_row) // 2]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, action="append", help="keys a row (default 131072)")
    p.add_argument("--rows", type=int, default=8, help="rows, in two-row blocks")
    p.add_argument("--top-k", type=int, default=2048)
    p.add_argument("--data", action="append", help=f"{', '.join(DATA)} or a workload family (default: the three)")
    p.add_argument("--full-range", action="store_true", help="quantize as a server does (half_gate.to_full_range)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for keys in args.keys or [131072]:
        for data in args.data or DATA:
            print(json.dumps(study(data, keys, args.rows, args.top_k, args.seed, args.full_range)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
