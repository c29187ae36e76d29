"""A cheaper scan epilogue on paper: how many keys a rigorous fp16 gate lets through (CPU, no GPU).

The exact epilogue costs two fp32 instructions a (row, head, key) element, FMNMX and FFMA, and caps
the fused scan at 0.80-0.88 of the fp8 floor (BENCHMARKS.md, "Where the scan's time goes"). The
gate modelled here would cost 1.5: each pair of fp32 products rounded to a half2 (F2FP), relu
(HMNMX2) and the weighted head sum (HFMA2) in packed fp16, P over the heads whose weight is positive
and M over the others (a row's heads put in that order, which the sum allows), each in chains of
fused multiply-adds of at most --chain heads, the chains added in fp32. A key is a candidate when

    scale_k * (P - M + B) >= T,   B = 2u * sum_h |w_h| |a_h| + gamma(n) * (P + M) + absolute terms,

T a lower bound on the row's exact k-th score, u = 2^-11, gamma(n) = n u / (1 - n u) for the longest
chain. B bounds |fp16 gate - exact epilogue| over the fp32 products a_h: the rounding of a_h and of
w_h to fp16 (u each, relative; 2^-25 absolute below fp16's normal range) and the chain's roundings
(gamma(n) of its terms' sum). sum_h |w_h| |a_h| = 2 (P + M) - sum_h |w_h| a_h, and the last sum is
(sum_h |w_h| q_h) . k: one more product column a row on the tensor core, so the bound costs a few
instructions a key, not an element. Keys that pass are scored again exactly.

With --accumulate fp16 the tensor core sums the products in fp16 instead (no F2FP: one instruction an
element), and the bound's first term is ACCUMULATION (sum_h |w_h| |q_h|) . |k|, from the accumulation
error measured on the H200 (one more column a row, over |q| and |k|).

For each workload family this prints how many keys the gate passes over the keys at or above the
row's exact k-th score (what an exact gate at that score passes; median and worst over rows), the rows
whose k-th score most of the row ties (every gate passes them all; left out of the ratio), the worst
|gate - exact| over B (at most 1, or the bound is wrong) and the keys whose products leave fp16's
range (they would need a per-row scale). T is the exact k-th score here: the ratio is the least a
real gate, whose T comes from a sample, would pass.

    python3 tools/half_gate.py [--keys 32768] [--heads 64] [--top-k 2048] [--rows 4] [--chain 16] [--accumulate fp16] [--family random ...]

With --full-range the data is quantized as a server's is (every query head and key at fp8's full range,
where most fp16 sums would overflow) and the gate scales its own query back (full_range_row); --bound
key|norm|row picks how the accumulation's error is bounded (BOUNDS: what each costs the scan);
--block-rows R also prints the share of the keys that are a candidate of any of R consecutive rows;
--relu linear takes relu by its identity (HFMA2 with |x|, the linear half from two product columns a
row: linear_column).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

U = 2.0 ** -11        # fp16 unit roundoff
# An fp16-accumulated dot product over 128 dims (four m16n8k32 instructions) is within ACCUMULATION of
# sum_d |q_d k_d| of exact: the fp8 mma.sync with fp16 accumulators stayed within 1.25 u of its terms'
# magnitudes per instruction and 1.08 u over four on the H200 (`tools/accumulation.py --f16-steps`),
# so four instructions' worst, 5 u: measured, not documented, and mma.sync's, not wgmma's.
ACCUMULATION = 4 * 1.25 * U
TINY = 2.0 ** -25     # fp16's absolute rounding error below its normal range (half its least subnormal)
F16_MAX = 65504.0
FP8_MAX = 448.0       # e4m3's largest value


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def fma_chain(w16: torch.Tensor, r16: torch.Tensor) -> torch.Tensor:
    """sum_h w16[h] * r16[h, key] over the heads in order, one fp16 rounding a step (HFMA2's fused
    multiply-add: the product of two fp16 values is exact in fp64, so one rounding of the fp64 sum)."""
    acc = torch.zeros(r16.shape[1], dtype=torch.float64)
    for h in range(r16.shape[0]):
        acc = (w16[h].double() * r16[h].double() + acc).to(torch.float16).double()
    return acc


def chains(w16: torch.Tensor, r16: torch.Tensor, length: int) -> torch.Tensor:
    """The heads in chains of at most `length` (fma_chain each), their results added in fp32 (a few
    instructions a key: each chain's fp16 result is exact in fp32, the adds' error left out)."""
    total = torch.zeros(r16.shape[1], dtype=torch.float64)
    for h in range(0, r16.shape[0], length):
        total = total + fma_chain(w16[h:h + length], r16[h:h + length])
    return total


def gate_row(a: torch.Tensor, w: torch.Tensor, length: int = 64, a16: torch.Tensor | None = None,
             missed: torch.Tensor | None = None, linear: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """One row: a [heads, keys] fp32 products, w [heads] fp32 weights, chains of at most `length`
    heads. The exact epilogue (fp64 over the fp32 values), the fp16 gate P - M, its bound B and how
    many products leave fp16's range. With a16 (the products accumulated in fp16 by the tensor core)
    and missed ([keys], at least sum_h |w_h| |a16_h - a_h|: accumulation_bound), the gate starts from
    a16 instead of rounding a. With linear (L, its bound: linear_column), the gate is relu's identity
    w relu(x) = (w x + w |x|) / 2: (L + P - M) / 2, P and M over |a16| (one HFMA2 with |x| a pair), L =
    sum_h w_h a_h from the tensor core."""
    a64, w64 = a.double(), w.double()
    exact = (w64[:, None] * a64.clamp(min=0)).sum(0)
    # (relu after the rounding: HMNMX2 on the half2; |x| with the identity: HFMA2's operand modifier)
    r16 = (a.to(torch.float16) if a16 is None else a16.to(torch.float16))
    r16 = r16.abs() if linear is not None else r16.clamp(min=0)
    pos, neg = w64 > 0, w64 < 0
    # With fp16 sums the weights take a power of two a row, 2^-r, that keeps every chain's sum in range
    # (a chain's |w| summed at most 1, every product under 65,504 / 1.01); the chains' results are scaled
    # back, exactly. (Products rounded from fp32 stay far inside the range: no scale.)
    scale = chain_scale(w64, pos, neg, length) if a16 is not None else 1.0
    w16 = (w64 / scale).to(torch.float16)
    p = chains(w16[pos], r16[pos], length) * scale if pos.any() else torch.zeros_like(exact)
    m = chains(-w16[neg], r16[neg], length) * scale if neg.any() else torch.zeros_like(exact)
    n = min(max(int(pos.sum()), int(neg.sum()), 1), length)
    heads = a.shape[0]
    absolute = (heads * TINY * (2 * (w64 / scale).abs().max() + 1) + 2 * n * TINY) * scale
    chain_sums = (p + m) / (1 - gamma(n))  # >= the chains' exact sum
    if a16 is not None:
        # |relu(a16_h) - relu(a_h)| <= |a16_h - a_h| (and ||a16_h| - |a_h||), weighted: missed; the weights'
        # rounding u |w_h| relu(a16_h); the chains gamma(n) of their sum.
        weighted_missed = missed.double() * (1 + U)
        bound = weighted_missed + U * (chain_sums + weighted_missed) + gamma(n) * chain_sums + absolute
        if linear is not None:  # the two halves' bounds halved, and the fp32 add of L and P - M
            value, linear_bound = linear
            gate = (value + p - m) / 2
            bound = (bound + linear_bound) / 2 + 2.0 ** -24 * (value.abs() + p + m)
            return {"exact": exact, "gate": gate, "bound": bound, "outside": int((a.abs() > F16_MAX).any(0).sum())}
    else:
        # The bound, from what the kernel would have: P, M and the extra column L = sum_h |w_h| a_h (taken
        # as exact: its fp32 accumulation's error, about 2^-17 of sum_h |w_h| sum_d |q_hd k_d|, is left
        # out). With R = sum_h |w_h| relu(a_h) and S = sum_h |w_h| |a_h| = 2R - L: |P + M - R| <= E, where
        # E = 2u S + gamma(n) R' + absolute terms, R' = the chains' exact sum <= chain_sums, so
        # S <= 2(P + M) + 2E - L, solved for S.
        abs_linear = (w64.abs()[:, None] * a64).sum(0)
        abs_sum = ((2 * (p + m) + 2 * gamma(n) * chain_sums + 2 * absolute - abs_linear) / (1 - 4 * U)).clamp(min=0)
        bound = 2 * U * abs_sum + gamma(n) * chain_sums + absolute
    return {"exact": exact, "gate": p - m, "bound": bound, "outside": int((a.abs() > F16_MAX).any(0).sum())}


def chain_scale(w: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, length: int) -> float:
    """The power of two at or just above the largest chain's sum of |w| (the heads of one sign in order,
    `length` a chain, as chains() takes them): w divided by it has every chain's sum in (1/2, 1], so
    every chain's fp16 sum stays in range and its terms as far above the subnormals as that allows."""
    largest = max((float(g[i:i + length].sum()) for g in (w[pos].abs(), w[neg].abs()) for i in range(0, len(g), length)),
                  default=0.0)
    return 2.0 ** math.ceil(math.log2(largest)) if largest > 0 else 1.0


def fp16_accumulated(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q [heads, 128] . k [keys, 128] accumulated as four fp16-accumulating instructions of 32 products,
    each rounding its exact sum once (the model 52% of the H200's four-instruction results matched;
    the bound does not rely on it)."""
    acc = torch.zeros(q.shape[0], k.shape[0], dtype=torch.float64)
    for c in range(0, q.shape[1], 32):
        acc = (acc + q[:, c:c + 32].double() @ k[:, c:c + 32].double().T).half().double()
    return acc


def power_of_two_to(x: torch.Tensor, limit: float) -> torch.Tensor:
    """2^e per vector (last dim) with |x| / 2^e's largest in (limit / 2, limit] (1 for a zero vector)."""
    amax = x.abs().amax(-1, keepdim=True)
    return torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax.clamp(min=1e-30) / limit))), torch.ones_like(amax))


def to_full_range(wl):
    """The workload as DeepSeek-V3.2's indexer quantizes it: every query head and every key scaled by a
    power of two to fp8's full range (largest value in (224, 448], ue8m0 scales), the weights and key
    scales divided by the same powers, so every exact score is unchanged. Normal fp8 values times a power
    of two stay exact: the scores, the ranking and the top-k are the workload's own."""
    from dataclasses import replace

    q, k = wl.q.float(), wl.k_fp8.float()
    sq, sk = 1 / power_of_two_to(q, FP8_MAX), 1 / power_of_two_to(k, FP8_MAX)
    return replace(wl, q=(q * sq).to(torch.float8_e4m3fn), k_fp8=(k * sk).to(torch.float8_e4m3fn),
                   weights=wl.weights / sq[..., 0], k_scale=wl.k_scale / sk[:, 0])


def full_range_row(q: torch.Tensor, w: torch.Tensor) -> tuple:
    """The gate's query for one row: each head scaled by the power of two 2^-s that keeps every fp16
    accumulation in range whatever the key (sum_d |q_hd| x 448 <= 65504 / 1.01), rounded to fp8 again
    (values it pushes below fp8's normal range lose bits), and the weights times 2^s, so the gate's
    score is the row's own. Returns q_scaled = q 2^-s (exact, [heads, 128]), q_gate (it rounded to fp8),
    w_gate [heads] and the rounding |q_scaled - q_gate|."""
    scale = power_of_two_to(q.abs().sum(-1, keepdim=True), F16_MAX / 1.01 / FP8_MAX)  # 2^s per head
    q_scaled = q.double() / scale
    q_gate = q_scaled.to(torch.float8_e4m3fn).double()
    return q_scaled, q_gate, (w.double() * scale[:, 0]).float(), (q_scaled - q_gate).abs()


# What each key's bound costs the scan (accumulation_bound's kinds).
BOUNDS = {"key": "c . |k|: one product column a row over a sign-cleared copy of each key tile",
          "norm": "max_d c_d x sum_d |k_d|: one number a key, made once a call, one FFMA a (row, key)",
          "row": "sum_d c_d x 448: one number a row, nothing a key"}


def accumulation_bound(q_gate: torch.Tensor, w_gate: torch.Tensor, rounding: torch.Tensor | None, k: torch.Tensor,
                       kind: str) -> torch.Tensor:
    """At least sum_h |w_h| |a16_h - a_h| over the keys ([keys]): the fp16 accumulation's error (at most
    ACCUMULATION sum_d |q_hd| |k_d|) plus the gate query's rounding (sum_d rounding_hd |k_d|), i.e. c . |k|
    with c_d = sum_h |w_h| (ACCUMULATION |q_hd| + rounding_hd), bounded as BOUNDS[kind] says."""
    c = w_gate.double().abs() @ (ACCUMULATION * q_gate.double().abs() + (0 if rounding is None else rounding.double()))
    return over_keys(c, k, kind)


def over_keys(c: torch.Tensor, k: torch.Tensor, kind: str) -> torch.Tensor:
    """An upper bound of c . |k| for every key ([keys]; c >= 0 over the 128 dims), as BOUNDS[kind] says."""
    k_abs = k.double().abs()
    if kind == "key":
        return k_abs @ c
    if kind == "norm":
        return c.max() * k_abs.sum(-1)
    return (c.sum() * FP8_MAX).expand(k.shape[0])


def linear_column(q_scaled: torch.Tensor, w_gate: torch.Tensor, k: torch.Tensor, kind: str) -> tuple:
    """relu's linear half for one row, L = sum_h w_h a_h = v . k with v = sum_h w_h q_h, as the tensor core
    would give it: v scaled by the power of two 2^-t that keeps its fp16 sums in range, cut into two fp8
    pieces (hi, then what hi misses), each a product column accumulated in fp16, added in fp32 and scaled
    back. Returns (L [keys], a bound on |L - v . k| [keys]: the pieces' residual and their accumulation,
    over |k| as `kind` says)."""
    v = w_gate.double() @ q_scaled.double()
    scale = power_of_two_to(v.abs().sum(-1, keepdim=True), F16_MAX / 1.01 / FP8_MAX)
    scaled = v / scale
    hi = scaled.to(torch.float8_e4m3fn).double()
    lo = (scaled - hi).to(torch.float8_e4m3fn).double()
    value = (fp16_accumulated(hi[None].float(), k)[0] + fp16_accumulated(lo[None].float(), k)[0]) * scale
    c = scale * ((scaled - hi - lo).abs() + ACCUMULATION * (hi.abs() + lo.abs()))
    return value, over_keys(c, k, kind) * (1 + U) + 2.0 ** -24 * value.abs()


# What one candidate's exact score costs scored a row at a time, in (row, key) pairs of the shipped
# fused kernel's scan, and what a key of a row block's union costs a row of the block: the cheapest of
# tools/rescore.py's kernels of each kind on the H200 (BENCHMARKS.md, "Past the epilogue: every
# rescoring kernel timed, the union included": four products a barrier at H = 64, in turn at H = 32,
# 8 CTAs an SM; the union kernel, one chunk a barrier).
PAIR_COST = {32: 2.6, 64: 1.6}
UNION_COST = {32: 1.24, 64: 1.19}


def rescoring_shares(candidates: torch.Tensor, pair_cost: float) -> tuple[float, float]:
    """The two ways of scoring a row block's candidates (bool [block rows, keys]) exactly, each as a
    share of the block's scan (a key of the scan costs one pair a row of the block): a row at a time,
    every row's candidates at pair_cost pairs each; or the union of the block's candidates gathered into
    tiles and multiplied with the whole query tile as the scan multiplies its keys (a key of the union
    costs what a key of the scan does, and every row's exact scores come out as the scan's would)."""
    rows, keys = candidates.shape
    row_at_a_time = float(candidates.double().sum()) * pair_cost / (rows * keys)
    return row_at_a_time, float(candidates.any(0).double().mean())


def study(family: str, keys: int, heads: int, top_k: int, rows: int, length: int = 64, seed: int = 0,
          accumulate: str = "fp32", full_range: bool = False, bound: str = "key", block_rows: int = 1,
          relu: str = "max", threshold: str = "exact", pair_cost: float | None = None) -> dict:
    """The gate over `rows` rows of a workload family (each row over every key: a long chunk's last
    rows), against the exact top_k of each row; accumulate: how the tensor core sums the products
    (fp32, then rounded to fp16 for the gate; or fp16). full_range: the data quantized as a server's
    is (to_full_range) and the gate's query scaled back into fp16's range (full_range_row). bound (with
    fp16 sums): accumulation_bound's kind, "key", "norm" or "row" (BOUNDS). block_rows: also the share of
    the keys that are a candidate of any row of each `block_rows` consecutive rows (a gated kernel's row
    block: what scoring the union of its candidates again would cost), median over the blocks. relu (with
    fp16 sums): "max" (HMNMX2 then HFMA2) or "linear" (relu's identity: HFMA2 with |x|, and the linear half
    from two product columns a row: linear_column). threshold: the T keys are gated against, "exact" (the
    row's exact k-th score: the least any gate passes) or "lower" (the k-th largest lower bound, gate -
    bound: what a kernel knows that selects on the fp16 bounds before it scores any key exactly; at most
    the exact k-th, since every key's lower bound is at most its exact score). pair_cost: what scoring one
    candidate exactly a row at a time costs, in (row, key) pairs of today's scan (default PAIR_COST's
    measurement for these heads); with block_rows, each block's two ways of scoring its candidates are
    set side by side as shares of its scan (rescoring_shares)."""
    from generator.workloads import make_workload

    wl = make_workload(family, rows, keys, heads, top_k, seed=seed)
    if full_range:
        wl = to_full_range(wl)
    q = wl.q.float()  # [rows, heads, 128]
    k = wl.k_fp8.float()
    ratios, tied = [], 0
    worst = outside = 0.0
    unscaled_outside = []  # share of the row's products (heads x keys) outside fp16 before the gate's scaling
    candidates = []  # each row's candidate keys
    for r in range(rows):
        a = (q[r].double() @ k.double().T).float()  # the fp32 products (wgmma accumulates in fp32)
        unscaled_outside.append(float((a.abs() > F16_MAX).double().mean()))
        if accumulate == "fp16":
            q_scaled = q_gate = q[r].double()
            w_gate, rounding = wl.weights[r].float(), None
            if full_range:
                q_scaled, q_gate, w_gate, rounding = full_range_row(q[r], wl.weights[r])
                a = (q_scaled @ k.double().T).float()  # (w_gate a = w times the row's own products)
            g = gate_row(a, w_gate, length, fp16_accumulated(q_gate.float(), k),
                         accumulation_bound(q_gate, w_gate, rounding, k, bound),
                         linear_column(q_scaled, w_gate, k, bound) if relu == "linear" else None)
        else:
            g = gate_row(a, wl.weights[r].float(), length)
        scale = wl.k_scale.double()
        exact, gate, margin = g["exact"] * scale, g["gate"] * scale, g["bound"] * scale
        kth = exact.topk(min(top_k, keys)).values[-1]
        at_or_above = int((exact >= kth).sum())
        gate_at = kth if threshold == "exact" else (gate - margin).topk(min(top_k, keys)).values[-1]
        candidates.append((gate + margin) >= gate_at)
        if at_or_above > 2 * top_k:  # (the k-th score tied by most of the row: any gate passes them all)
            tied += 1
        else:
            ratios.append(float(candidates[-1].sum()) / at_or_above)
        worst = max(worst, float(((gate - exact).abs() / margin.clamp(min=1e-300)).max()))
        outside += g["outside"]
    ratios.sort()
    blocks = [torch.stack(candidates[b:b + block_rows]) for b in range(0, rows - block_rows + 1, block_rows)]
    unions = sorted(float(c.any(0).double().mean()) for c in blocks)
    row_costs = sorted(rescoring_shares(c, PAIR_COST[heads] if pair_cost is None else pair_cost)[0] for c in blocks)
    return {"family": family, "keys": keys, "heads": heads, "top_k": top_k, "rows": rows, "chain": length,
            "accumulate": accumulate, "full_range": full_range, "bound": bound, "block_rows": block_rows, "relu": relu,
            "threshold": threshold,
            "union_share": unions[len(unions) // 2] if unions else None,
            "row_at_a_time_share": row_costs[len(row_costs) // 2] if row_costs else None,
            "median_ratio": ratios[len(ratios) // 2] if ratios else None, "worst_ratio": ratios[-1] if ratios else None,
            "tied_rows": tied, "worst_error_over_bound": worst, "keys_outside_fp16": outside / rows,
            "products_outside_fp16_unscaled": sum(unscaled_outside) / rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=32768)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--top-k", type=int, default=2048)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--chain", type=int, default=64, help="heads a chain at most (the heads of one sign split into chains)")
    p.add_argument("--accumulate", choices=("fp32", "fp16"), default="fp32",
                   help="the products summed in fp32 and rounded for the gate (F2FP), or summed in fp16 (ACCUMULATION)")
    p.add_argument("--family", action="append", help="workload families (default: random, signed_weights, peaked)")
    p.add_argument("--full-range", action="store_true",
                   help="quantize as a server does (every query head and key to fp8's full range, ue8m0 scales); "
                        "the gate scales its query back into fp16's range")
    p.add_argument("--block-rows", type=int, default=1,
                   help="also print the share of the keys that are a candidate of any of this many consecutive rows")
    p.add_argument("--bound", choices=tuple(BOUNDS), default="key",
                   help="with --accumulate fp16, the accumulation's bound: " + "; ".join(f"{k}: {v}" for k, v in BOUNDS.items()))
    p.add_argument("--threshold", choices=("exact", "lower"), default="exact",
                   help="gate at the row's exact k-th score (the least any gate passes), or at the k-th largest lower "
                        "bound (gate - bound: a kernel selecting on the fp16 bounds before scoring exactly)")
    p.add_argument("--relu", choices=("max", "linear"), default="max",
                   help="with --accumulate fp16: relu by HMNMX2 (max), or by its identity w relu(x) = (w x + w |x|) / 2 "
                        "(linear: HFMA2 with |x|, the linear half from two product columns a row)")
    p.add_argument("--pair-cost", type=float,
                   help="with --block-rows: scan pairs one candidate costs scored a row at a time (default: measured, PAIR_COST)")
    args = p.parse_args()
    if (args.bound != "key" or args.relu != "max") and args.accumulate != "fp16":
        p.error("--bound and --relu need --accumulate fp16")
    for family in args.family or ["random", "signed_weights", "peaked"]:
        s = study(family, args.keys, args.heads, args.top_k, args.rows, args.chain, accumulate=args.accumulate,
                  full_range=args.full_range, bound=args.bound, block_rows=args.block_rows, relu=args.relu,
                  threshold=args.threshold, pair_cost=args.pair_cost)
        ratios = ("no row without ties" if s["median_ratio"] is None else
                  f"{s['median_ratio']:.3f}x the keys at or above the k-th score (median over rows), {s['worst_ratio']:.3f}x at worst")
        data = (f"{', full range' if s['full_range'] else ''}, {s['bound']} bound{', relu by its identity' if s['relu'] == 'linear' else ''}"
                if args.accumulate == "fp16" else "") + (", gated at the k-th lower bound" if s["threshold"] == "lower" else "")
        print(f"{family:16s} H={s['heads']} top-{s['top_k']} {s['keys']} keys, {s['accumulate']} sums{data}, chains of {s['chain']}: "
              f"the gate passes {ratios}; "
              f"{s['tied_rows']} of {s['rows']} rows tied at the k-th; worst error {s['worst_error_over_bound']:.3f} of its "
              f"bound; keys with products outside fp16: {s['keys_outside_fp16']:.0f} a row"
              + (f" ({100 * s['products_outside_fp16_unscaled']:.0f}% of the products before the gate's scaling)"
                 if s["full_range"] else "")
              + (f"; candidates of any of {args.block_rows} rows: {100 * s['union_share']:.1f}% of the keys (median over blocks)"
                 if args.block_rows > 1 and s["union_share"] is not None else "")
              + (f"; scored exactly a row at a time (at {args.pair_cost or PAIR_COST[s['heads']]} scan pairs a candidate) "
                 f"they would cost {100 * s['row_at_a_time_share']:.1f}% of the scan (median over blocks), their union "
                 f"scored with the query tile (at {UNION_COST[s['heads']]} scan pairs a key a row) "
                 f"{100 * UNION_COST[s['heads']] * s['union_share']:.1f}%"
                 if args.block_rows > 1 and s["row_at_a_time_share"] is not None else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
