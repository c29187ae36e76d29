"""Index scores in torch, for blocks of rows and keys, and the loop that turns them into top-k.

    score[i, j] = k_scale[j] * sum_h weights[i, h] * max(0, dot(q[i, h], k[j]))

Two products compute the dot products: exact from the fp8 values, rounded to fp32 (the reference)
and fp8 tensor cores through torch._scaled_mm (the dense path on sm_89+ GPUs). Both run in pieces so that
any shape fits in a memory budget.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# A product maps (q rows [r, H, 128] e4m3, keys [n, 128] e4m3) to fp32 dot products [r, H, n].
Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def fp32_product(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The dot products of the fp8 values exactly (fp64 holds every sum of 128 e4m3 products), each
    rounded once to fp32. An fp32 GEMM would round by its blocking: identical keys at different
    positions could score differently, and the reference would break their tie by that instead
    of by index."""
    r, h, d = q.shape
    return (q.reshape(r * h, d).double() @ k.double().T).float().view(r, h, -1)


def fp8_tensor_core_product(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r, h, d = q.shape
    n = k.shape[0]
    pad = -n % 16  # _scaled_mm wants every extent a multiple of 16
    if pad:
        k = torch.cat([k.view(torch.uint8), k.new_zeros((pad, d), dtype=torch.uint8)]).view(torch.float8_e4m3fn)
    one = torch.ones((), dtype=torch.float32, device=q.device)
    out = torch._scaled_mm(q.reshape(r * h, d), k.T, scale_a=one, scale_b=one, out_dtype=torch.float32)
    return out[:, :n].view(r, h, n)


def has_fp8_tensor_cores(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def score_block(product: Product, q, k_fp8, k_scale, weights, rows: slice, lo: int, hi: int,
                work_bytes: int = 1 << 30) -> torch.Tensor:
    """Scores [rows, hi - lo] of keys [lo, hi) for the given rows, in the weights' dtype (fp32; fp64
    for the verifier's exact scores), in chunks of keys whose [rows, heads, keys] intermediate stays
    under work_bytes. Every key's score is computed by the same sequence of elementwise operations
    (head_sum), so identical keys score identically: their ties are then broken by index."""
    qr, wr = q[rows], weights[rows]
    r, h = wr.shape
    out = torch.empty((r, hi - lo), dtype=wr.dtype, device=q.device)
    step = max(16, (work_bytes // max(1, wr.element_size() * r * h)) // 16 * 16)  # keys per chunk
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        dots = product(qr, k_fp8[a:b]).clamp_(min=0).mul_(wr[:, :, None])  # elementwise: no TF32 anywhere
        out[:, a - lo:b - lo] = head_sum(dots).mul_(k_scale[a:b])
    return out


def head_sum(terms: torch.Tensor) -> torch.Tensor:
    """terms [rows, heads, keys] summed over the heads one head at a time: the same operations for
    every key (a reduction's order may depend on the key's position: vectorised lanes and a scalar
    tail), so identical keys get identical sums."""
    total = terms[:, 0].clone()
    for head in range(1, terms.shape[1]):
        total += terms[:, head]
    return total


def row_pieces(ks, ke, budget_bytes: int):
    """Consecutive row ranges whose [rows, union key span] fp32 block fits the budget (at least one
    row each), as (first_row, end_row, lo, hi); rows that see nothing do not widen the span, and a
    piece of such rows only has lo == hi == 0. Vectorised per piece: planning 16K rows takes ~1 ms."""
    ks = torch.as_tensor(ks, dtype=torch.int64).cpu()
    ke = torch.as_tensor(ke, dtype=torch.int64).cpu()
    rows = ks.numel()
    empty = ks >= ke
    lo_key = torch.where(empty, torch.full_like(ks, 2**62), ks)  # neutral for min
    hi_key = torch.where(empty, torch.full_like(ke, -(2**62)), ke)  # neutral for max
    start = 0
    while start < rows:
        # The span only grows, so a piece holds at most budget / (first row's span) rows: look no further.
        first = int(ke[start] - ks[start])
        window = rows - start if first <= 0 else min(rows - start, max(1, budget_bytes // (4 * first)) + 1)
        lo = torch.cummin(lo_key[start:start + window], 0).values
        hi = torch.cummax(hi_key[start:start + window], 0).values
        span = (hi - lo).clamp(min=0)
        count = torch.arange(1, window + 1)
        over = (count * span * 4 > budget_bytes).nonzero()
        end = start + (max(1, int(over[0])) if over.numel() else window)
        a, b = int(lo[end - start - 1]), int(hi[end - start - 1])
        yield (start, end, 0, 0) if a >= b else (start, end, a, b)
        start = end


def rows_per_piece(keys: int, budget_bytes: int) -> int:
    """As many rows as whole key ranges of `keys` keys fit the budget (at least one)."""
    return max(1, budget_bytes // (4 * keys)) if keys else 1 << 30


def logits_window(longest_row: int | None, keys: int) -> int:
    """The keys a row's logits take in our dense kernels' pieces: the most keys a row sees (measured,
    or as the caller promises; None: the chunk's N), rounded up to 4 (16-byte rows), at least 4. A row
    that sees more is answered from its first `window` keys."""
    seen = keys if longest_row is None else min(max(longest_row, 0), keys)
    return max(4, -(-seen // 4) * 4)


def window_pieces(rows: int, keys: int, longest_row: int | None, budget_bytes: int) -> tuple[int, int]:
    """Our dense kernels' plan: (the logits window, rows a piece), as many rows as windows fit the budget."""
    window = logits_window(longest_row, keys)
    return window, min(rows, rows_per_piece(window, budget_bytes))


def shape_pieces(rows: int, keys: int, budget_bytes: int) -> list[tuple[int, int, int, int]]:
    """Pieces (first_row, end_row, 0, keys) planned from the shapes alone, with nothing read back from
    the device: rows_per_piece rows a piece. Kernels that take each row's own range from ks/ke on the
    device compute and select only what a row sees, so this costs them only the pieces' count where
    rows see less than N keys (packed requests), never extra work. (Our dense kernels plan theirs by
    the logits window instead: runtime.dense, logits_window.)"""
    if keys == 0:
        return [(0, rows, 0, 0)] if rows else []
    per = rows_per_piece(keys, budget_bytes)
    return [(r0, min(rows, r0 + per), 0, keys) for r0 in range(0, rows, per)]


def plan_pieces(ks: torch.Tensor, ke: torch.Tensor, keys: int, budget_bytes: int) -> list[tuple[int, int, int, int]]:
    """The torch dense path's pieces (first_row, end_row, lo, hi): planned on the host from ks/ke as
    serving engines do (row_pieces: its scores span each piece's union of ranges), or, while a CUDA
    graph is being captured (nothing can be read back from the device then), shape_pieces."""
    if not (ks.is_cuda and torch.cuda.is_current_stream_capturing()):
        return list(row_pieces(ks, ke, budget_bytes))
    return shape_pieces(ks.shape[0], keys, budget_bytes)


def tie_broken_order(scores: torch.Tensor) -> torch.Tensor:
    """int64 keys [rows, n] that order a block's entries as every path selects them: by fp32 score
    descending, then by column ascending (README.md, "Same answer every time"). The score's fp32
    bits (-0 folded onto +0, as the kernels' prim::score_code) made a signed integer of the same
    order, times 2^32, plus 2^32 - 1 - column: all distinct, so topk's choice at a tie is no longer
    its own."""
    bits = (scores.float() + 0.0).view(torch.int32)
    ordered = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)
    column = torch.arange(scores.shape[1], device=scores.device, dtype=torch.int64)
    return ordered * (1 << 32) + ((1 << 32) - 1 - column)


def ascending_with_padding(rel: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each row's valid indices in ascending order, then -1 (the contract's one order)."""
    big = torch.iinfo(torch.int32).max
    ordered = torch.where(valid, rel, torch.full_like(rel, big)).sort(dim=1).values
    return ordered.masked_fill_(ordered == big, -1)


def topk_by_pieces(product: Product, q, k_fp8, k_scale, weights, ks: torch.Tensor, ke: torch.Tensor, top_k: int,
                   budget_bytes: int) -> torch.Tensor:
    """Top-k indices (relative to ks, in ascending order, -1 padded) from materialised score pieces:
    fp32 scores and their int64 order keys (tie_broken_order) together within budget_bytes."""
    rows = q.shape[0]
    out = torch.full((rows, top_k), -1, dtype=torch.int32, device=q.device)
    for r0, r1, lo, hi in plan_pieces(ks, ke, k_fp8.shape[0], budget_bytes // 3):
        if hi <= lo:
            continue
        scores = score_block(product, q, k_fp8, k_scale, weights, slice(r0, r1), lo, hi)
        key = torch.arange(lo, hi, device=q.device)
        visible = (key >= ks[r0:r1, None]) & (key < ke[r0:r1, None])
        scores.masked_fill_(~visible, float("-inf"))
        kk = min(top_k, hi - lo)
        idx = tie_broken_order(scores).topk(kk, dim=1).indices
        rel = (idx + lo - ks[r0:r1, None]).to(torch.int32)
        out[r0:r1, :kk] = ascending_with_padding(rel, visible.gather(1, idx))
    return out
