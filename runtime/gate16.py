"""The inputs of the gate scanned in fp16 (gated variants with gate_bits 16: `_g16`), made once a call.

The gated kernel's exact epilogue costs two fp32 instructions a (row, head, key) element and holds its
scan at 0.80-0.88 of the fp8 floor. A `_g16` build scans every key with products accumulated in fp16
(wgmma .f16) and a packed fp16 epilogue (HMNMX2 and HFMA2 over two heads: one instruction an element),
and lets a key through when an upper bound of its exact score reaches the row's gate; the keys a row
of the block lets through are then scored exactly, by the products and epilogue of today's scan, so
the selection sees exactly the (score, key) pairs the fp32 scan would have appended and returns the
same answer, byte for byte. Nothing here is approximate: a key whose exact score reaches the gate is
always let through; a loose bound only costs exact rescoring.

What the kernel cannot afford a key, made once a call (docs/fp16-gate.md): `gate_inputs` defines them
with torch ops; the variant's library makes the same in one pass over q and one over the keys
(`mqa_topk_gate16_inputs`, templates/gate16_inputs.cuh: `gate_inputs_on_device`, what a launch uses):

* `q_gate` [rows, heads, 128] fp8: each head of q scaled by a power of two 2^-s (sum_d |q_hd| x 448 <=
  65,504 / 1.01, so no fp16 sum of products leaves fp16's range whatever the key), rounded to fp8
  again, and each row's heads put in the order of the kernel's fp16 chains (`chain_positions`);
* `w_gate` [rows, heads] fp16: the weights times 2^s, times the row's chain scale 2^-r (every chain's
  sum of |w| in (1/2, 1]), in the same order;
* `row_bounds` [rows, 8] fp32: the constants of the row's bound (ROW_BOUND_FIELDS);
* `key_norms` [keys] fp32: each key's norm weighted by the k-steps whose roundings reach its dims,
  sum_d (4 - d // 32) |k_d| (STEP_WEIGHTS).

The bound, for a key of a row with the fp16 chains' values v_c (G = sum_c v_c, over the row's four
chains of 16 heads), with u = 2^-11 and gamma = gamma_8 + u (1 + gamma_8), gamma_n = nu / (1 - nu):

    |2^r G - exact| <= alpha 2^r C + beta sum_d (4 - d // 32) |k_d| + absolute,    C = sum_c |v_c|

* the chains' roundings: a chain is two FMA chains of 8 terms (each within gamma_8 of its terms'
  magnitudes) added in fp16 (u of the sum), so its error is at most gamma times its terms' magnitudes
  (the bound as first built took gamma_16, as for one chain of 16: nearly twice this); a chain whose
  heads have one sign has that sum at most |v_c| / (1 - gamma); the heads are sorted by weight so
  that at most one chain (`mixed`) holds both signs, and it holds the smallest |w| of both.
  Its terms' sum P + M (positive and negative parts) is |P - M| + 2 min(P, M) <= (|v_c| + 2 min(P, M))
  / (1 - gamma): |v_c| is in C like the others', and min(P, M) is at most the part of either sign,
  bounded by the norm: (1 + u)(1 + 4e) max_d sum_{h of that sign in it} |w_h| |q_gate_hd| x sum_d |k_d|,
  the smaller of the two signs' (the fewer heads, nearest zero weight);
* the weights' rounding to fp16: u of the same sums (the bound takes 2u: the other u, taken for the
  chains' add before gamma counted it, is kept as margin);
* the products: the four k32 instructions of an fp16-accumulated 128-dim product each round once,
  within e = STEP_ERROR of |C| + their 32 terms' magnitudes (measured on the H200: one instruction
  within 0.88u, tools/accumulation.py --wgmma-f16-steps 1; the bound takes 1.25u). Instruction i's
  C holds the terms of the instructions before it (times at most (1 + e)^i), so the error is at most
  e (1 + e)^3 sum_d (4 - d // 32) |q_gate_hd k_d|: a term of the first 32 dims is in four roundings,
  one of the last 32 in one (on keys whose magnitudes spread evenly, 2.5 e of sum_d |q_gate_hd k_d|
  where taking 4e for every term gives 4e). With q_gate's rounding, c_d = sum_h |w_h 2^s| (e (1 + e)^3
  |q_gate_hd| + |q_hd 2^-s - q_gate_hd|): at most max_d c_d sum_d (4 - d // 32) |k_d|;
* fp16's subnormal range: absolute terms (tools/half_gate.py's);
* the exact path's own fp32 arithmetic (its products accumulated in fp32 over 128 dims, its fp32 head
  sums, the gate's fp32 adds and the key scale's multiply): FP32_SLACK of C and of the norm.

Every term bounded by sum_d |k_d| is bounded by the weighted norm too (each weight is at least 1).
tools/gate16_model.py models the kernel's arithmetic on the CPU (kernel_gate) and measures how many keys
the bound lets through; tests/test_gate16.py holds this module to it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

U = 2.0 ** -11            # fp16's unit roundoff
CHAIN = 16                # heads in each of a row's fp16 chains (kRows 2, 64 heads: two lanes x two halves)
# A chain's rounding over its terms' magnitudes: the kernel sums its 16 heads as two FMA chains of 8 (the
# even and odd terms, for the issue rate) and adds the two in fp16.
GAMMA_8 = 8 * U / (1 - 8 * U)
GAMMA = GAMMA_8 + U * (1 + GAMMA_8)
# An fp16-accumulating k32 instruction's rounding, over |C| + its 32 terms' magnitudes (measured within
# 0.88u on the H200), and what it becomes over the four instructions of a 128-dim product: instruction i's
# C carries the terms before it, grown by at most (1 + e)^i.
STEP_ERROR = 1.25 * U
STEP_ACCUMULATION = STEP_ERROR * (1 + STEP_ERROR) ** 3   # times sum_d STEP_WEIGHTS[d] |q_d k_d|
STEP_WEIGHTS = torch.arange(4, 0, -1, dtype=torch.float32).repeat_interleave(32)  # [128]: the roundings dim d is in
FP32_SLACK = 2.0 ** -14   # the fp32 paths' roundings, generously (each is under 2^-16 of the same sums)
TINY = 2.0 ** -25         # fp16's absolute rounding below its normal range
F16_MAX = 65504.0
FP8_MAX = 448.0
GATE_HEADS = 64           # the one shape built so far: two rows a block, 64 heads (DeepSeek-V3.2's indexer)
# row_bounds' columns: the chain scale 2^r, alpha 2^r, beta, the absolute term, the mixed chain (-1: none;
# the kernel does not read it)
ROW_BOUND_FIELDS = ("chain_scale", "alpha_scaled", "beta", "absolute", "mixed_chain")


class GateInputs(NamedTuple):
    q_gate: torch.Tensor      # [rows, heads, 128] fp8
    w_gate: torch.Tensor      # [rows, heads] fp16
    row_bounds: torch.Tensor  # [rows, 8] fp32 (ROW_BOUND_FIELDS, then zeros)
    key_norms: torch.Tensor   # [keys] fp32


def chain_positions(heads: int = GATE_HEADS) -> torch.Tensor:
    """Where the kernel's chains read their heads: position[c * 16 + i] is the query column (head slot of
    the row in the tile, sm90_host::query_map's order) of chain c's i-th term. With two rows a block a
    lane t of a quad holds head slots 4j + 2 (t >> 1) + e of row t & 1 (j = 0 .. 15, e = 0, 1: the two
    halves of its half2 registers); chain c = 2 (t >> 1) + e runs over j."""
    if heads != GATE_HEADS:
        raise ValueError(f"the fp16 gate is built for {GATE_HEADS} heads (two rows a block), got {heads}")
    c = torch.arange(4).repeat_interleave(CHAIN)
    j = torch.arange(CHAIN).repeat(4)
    return 4 * j + 2 * (c >> 1) + (c & 1)


def power_of_two_to(x: torch.Tensor, limit: float) -> torch.Tensor:
    """2^e per element with x / 2^e in (limit / 2, limit] (1 where x is 0): from x / limit's exponent
    (frexp, exact, where a logarithm may round across a power of two: the CUDA kernel does the same)."""
    m, e = torch.frexp(x / limit)                                                  # x / limit = m 2^e, m in [1/2, 1)
    return torch.where(x > 0, torch.ldexp(torch.ones_like(x), e - (m == 0.5).to(e.dtype)), torch.ones_like(x))


@torch.no_grad()
def gate_inputs(q: torch.Tensor, weights: torch.Tensor, k_fp8: torch.Tensor) -> GateInputs:
    """The fp16 gate's inputs for q [rows, 64, 128] fp8, weights [rows, 64] fp32 and k_fp8 [keys, 128], by
    torch ops on q's device: their definition, which tests hold the library's kernels to (a launch uses
    those, gate_inputs_on_device: these ops take a dozen fp32 passes over q, 7.3-7.5 ms a call at 16,384
    rows on an H100; BENCHMARKS.md, "Past the epilogue: the fp16 gate built")."""
    rows, heads, dim = q.shape
    positions = chain_positions(heads).to(q.device)
    qf = q.float()
    # Each head scaled to fp16's safe range, and rounded to fp8 again.
    head_scale = power_of_two_to(qf.abs().sum(-1), F16_MAX / 1.01 / FP8_MAX)      # [rows, heads]
    q_scaled = qf / head_scale[..., None]
    q_rounded = q_scaled.to(torch.float8_e4m3fn)
    rounding = (q_scaled - q_rounded.float()).abs()
    w_full = weights.float() * head_scale                                          # the row's score unchanged
    # Heads sorted by weight, largest first: chain c takes sorted heads 16c .. 16c + 15, so at most one
    # chain (where the signs change) holds both, and it holds the smallest |w| of each sign.
    order = torch.argsort(w_full, dim=1, descending=True, stable=True)            # [rows, heads]: sorted -> head
    head_at = torch.empty_like(order)
    head_at[:, positions] = order                                                  # query column -> head
    w_sorted = torch.gather(w_full, 1, order).view(rows, 4, CHAIN)
    mixed = ((w_sorted > 0).any(-1) & (w_sorted < 0).any(-1))                      # [rows, 4], at most one a row
    mixed_chain = torch.where(mixed.any(-1), mixed.float().argmax(-1), torch.full_like(mixed[:, 0], -1, dtype=torch.long))
    chain_abs = w_sorted.abs().sum(-1).amax(-1)                                    # [rows]
    chain_scale = power_of_two_to(chain_abs, 1.0)                                  # 2^r
    w_gate = torch.gather(w_full, 1, head_at) / chain_scale[:, None]
    q_gate = torch.gather(q_rounded.view(torch.uint8), 1, head_at[..., None].expand(rows, heads, dim)).view(torch.float8_e4m3fn)

    abs_w = w_full.abs()
    qg = q_rounded.float().abs()
    # (sums of products by multiply and sum, not einsum: a matmul may run in TF32 where a caller allows it)
    c = (abs_w[..., None] * (STEP_ACCUMULATION * qg + rounding + FP32_SLACK * q_scaled.abs())).sum(1)
    # The mixed chain's terms of its cheaper sign: each at most (1 + u)(1 + 4e) |w_h| sum_d |q_gate_hd k_d|.
    in_mixed = torch.zeros_like(abs_w, dtype=torch.bool)
    sorted_mixed = mixed.repeat_interleave(CHAIN, dim=1)                           # [rows, heads] by sorted index
    in_mixed.scatter_(1, order, sorted_mixed)
    side = torch.stack([((abs_w * (in_mixed & sign))[..., None] * qg).sum(1).amax(-1) for sign in (w_full > 0, w_full < 0)])
    minority = (1 + U) * (1 + 4 * STEP_ACCUMULATION) * side.amin(0)               # [rows]
    alpha = (GAMMA + 2 * U) / (1 - GAMMA) + FP32_SLACK
    beta = 2 * (GAMMA + 2 * U) / (1 - GAMMA) * minority + (1 + FP32_SLACK) * c.amax(-1)
    w16_max = (w_gate.abs().amax(-1) * (1 + U))
    absolute = (heads * TINY * (2 * w16_max + 1) + 2 * CHAIN * TINY) * chain_scale
    row_bounds = torch.zeros(rows, 8, dtype=torch.float32, device=q.device)
    row_bounds[:, 0] = chain_scale
    row_bounds[:, 1] = alpha * chain_scale
    row_bounds[:, 2] = beta
    row_bounds[:, 3] = absolute
    row_bounds[:, 4] = mixed_chain.float()
    key_norms = (k_fp8.float().abs() * STEP_WEIGHTS.to(k_fp8.device)).sum(-1)
    return GateInputs(q_gate.contiguous(), w_gate.to(torch.float16).contiguous(), row_bounds, key_norms.contiguous())


def gate_inputs_on_device(lib, q: torch.Tensor, weights: torch.Tensor, k_fp8: torch.Tensor, stream: int,
                          out: GateInputs | None = None) -> GateInputs:
    """gate_inputs made by the `_g16` library `lib` (its mqa_topk_gate16_inputs kernels, on `stream`) into
    `out` (allocated here when None): q_gate and w_gate byte for byte gate_inputs', row_bounds and
    key_norms within fp32 rounding of its (sums in another order)."""
    rows, heads, _ = q.shape
    if heads != GATE_HEADS:
        raise ValueError(f"the fp16 gate is built for {GATE_HEADS} heads (two rows a block), got {heads}")
    if out is None:
        out = GateInputs(torch.empty_like(q), torch.empty(rows, heads, dtype=torch.float16, device=q.device),
                         torch.empty(rows, 8, dtype=torch.float32, device=q.device),
                         torch.empty(k_fp8.shape[0], dtype=torch.float32, device=q.device))
    lib.gate16_inputs(q.data_ptr(), weights.data_ptr(), k_fp8.data_ptr(), rows, k_fp8.shape[0],
                      *(x.data_ptr() for x in out), stream)
    return out
