"""Generated inputs shared by the tests, the tuner and the benchmarks.

A realistic prefill chunk is the last `rows` tokens of a `keys`-token context (causal: row i sees
keys [0, keys - rows + i + 1)); a multi-request chunk packs several such requests. The hard
families stress what a top-k kernel gets wrong: ties, offsets, exact zeros, skew, short rows.
Every family is random (never zeros) and reproducible from its seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from runtime.contract import DIM

FP8_MAX = 448.0


@dataclass(frozen=True)
class Workload:
    family: str
    q: torch.Tensor  # [M, H, 128] e4m3
    k_fp8: torch.Tensor  # [N, 128] e4m3
    k_scale: torch.Tensor  # [N] f32
    weights: torch.Tensor  # [M, H] f32
    ks: torch.Tensor  # [M] i32
    ke: torch.Tensor  # [M] i32
    top_k: int

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    @property
    def keys(self) -> int:
        return self.k_fp8.shape[0]

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    def longest_row(self) -> int:
        """The most keys one row sees (its range clamped to [0, N]; reads the ranges back)."""
        return int((self.ke.clamp(max=self.keys) - self.ks.clamp(min=0)).clamp(min=0).max()) if self.rows else 0

    def args(self) -> tuple:
        """Positional arguments of fused_mqa_topk / dense_mqa_topk / reference_mqa_topk."""
        return (self.q, (self.k_fp8, self.k_scale), self.weights, self.ks, self.ke, self.top_k)

    def describe(self) -> str:
        return f"{self.family} M={self.rows} N={self.keys} H={self.heads} k={self.top_k}"


def fp8(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def causal_ranges(rows: int, keys: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    if keys < rows:
        raise ValueError(f"a causal chunk of {rows} rows needs at least as many keys, got {keys}")
    ke = torch.arange(keys - rows + 1, keys + 1, dtype=torch.int32, device=device)
    return torch.zeros_like(ke), ke


def multi_request_ranges(requests: list[tuple[int, int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """requests: (context length, chunk rows) each; keys are laid out request after request."""
    ks, ke, start = [], [], 0
    for length, rows in requests:
        if rows > length:
            raise ValueError(f"request of {length} keys cannot have {rows} chunk rows")
        first_end = start + length - rows + 1
        ks += [start] * rows
        ke += range(first_end, first_end + rows)
        start += length
    return (torch.tensor(ks, dtype=torch.int32, device=device), torch.tensor(ke, dtype=torch.int32, device=device))


def _random(rows, keys, heads, top_k, gen, device, family="random") -> Workload:
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    ks, ke = causal_ranges(rows, keys, device)
    return Workload(
        family=family,
        q=fp8(randn(rows, heads, DIM)),
        k_fp8=fp8(randn(keys, DIM)),
        k_scale=torch.rand(keys, generator=gen, device=device) * 0.5 + 0.75,
        weights=randn(rows, heads) / heads**0.5,
        ks=ks,
        ke=ke,
        top_k=top_k,
    )


def _multi_request(rows, keys, heads, top_k, gen, device) -> Workload:
    base = _random(rows, keys, heads, top_k, gen, device, "multi_request")
    lengths = [keys // 2, keys // 3]
    lengths.append(keys - sum(lengths))
    chunk = [rows // 3, rows // 3]
    chunk.append(rows - sum(chunk))
    if any(c > n for c, n in zip(chunk, lengths)):
        raise ValueError(f"multi_request needs keys >= 3 * rows (got M={rows}, N={keys})")
    ks, ke = multi_request_ranges(list(zip(lengths, chunk)), device)
    return replace(base, ks=ks, ke=ke)


def _all_equal(rows, keys, heads, top_k, gen, device) -> Workload:
    base = _random(rows, keys, heads, top_k, gen, device, "all_equal")
    return replace(base, k_fp8=base.k_fp8[:1].expand(keys, DIM).contiguous(), k_scale=torch.ones_like(base.k_scale))


def _large_offset(rows, keys, heads, top_k, gen, device) -> Workload:
    # Dims 0..63 are 4.0 in every key and query: each dot gets +1024, on top of a +-10 spread
    # (unit scales, so the offset is common to every key).
    base = _random(rows, keys, heads, top_k, gen, device, "large_offset")
    k = base.k_fp8.float()
    k[:, :64] = 4.0
    q = base.q.float()
    q[:, :, :64] = 4.0
    return replace(base, q=fp8(q), k_fp8=fp8(k), k_scale=torch.ones_like(base.k_scale), weights=base.weights.abs() + 0.01)


def _mostly_zero(rows, keys, heads, top_k, gen, device) -> Workload:
    # Queries positive; 98% of keys negative, so their dots are < 0 and relu makes the score exactly 0.
    base = _random(rows, keys, heads, top_k, gen, device, "mostly_zero")
    q = base.q.float().abs()
    k = base.k_fp8.float().abs()
    negative = torch.rand(keys, generator=gen, device=device) < 0.98
    k[negative] = -k[negative]
    return replace(base, q=fp8(q), k_fp8=fp8(k), weights=base.weights.abs())


def _peaked(rows, keys, heads, top_k, gen, device) -> Workload:
    base = _random(rows, keys, heads, top_k, gen, device, "peaked")
    scale = base.k_scale.clone()
    hot = torch.randint(0, keys, (16,), generator=gen, device=device)
    scale[hot] *= 1000.0
    return replace(base, k_scale=scale)


def _flat(rows, keys, heads, top_k, gen, device) -> Workload:
    # Keys near 2.0: the fp8 grid (step 0.25 there) turns most of the noise into exact ties.
    base = _random(rows, keys, heads, top_k, gen, device, "flat")
    k = 2.0 + 0.06 * torch.randn(keys, DIM, generator=gen, device=device)
    return replace(base, k_fp8=fp8(k), k_scale=torch.ones_like(base.k_scale))


def _signed_weights(rows, keys, heads, top_k, gen, device) -> Workload:
    # Rows cycle through: all-zero weights (every score 0), all negative (top-k are the exact zeros),
    # half zero, random signs.
    base = _random(rows, keys, heads, top_k, gen, device, "signed_weights")
    w = base.weights.clone()
    kind = torch.arange(rows, device=device) % 4
    w[kind == 0] = 0.0
    w[kind == 1] = -w[kind == 1].abs()
    w[kind == 2, : heads // 2] = 0.0
    return replace(base, weights=w)


def _short_rows(rows, keys, heads, top_k, gen, device) -> Workload:
    # Visible lengths cycle through 0, 1, k-1, k, k+1 and random lengths below k.
    base = _random(rows, keys, heads, top_k, gen, device, "short_rows")
    lengths = torch.tensor([0, 1, top_k - 1, top_k, top_k + 1], device=device)
    length = lengths[torch.arange(rows, device=device) % 5]
    random_len = torch.randint(0, top_k, (rows,), generator=gen, device=device)
    length = torch.where(torch.arange(rows, device=device) % 7 == 6, random_len, length).clamp(max=keys)
    start = (torch.rand(rows, generator=gen, device=device) * (keys - length + 1)).long().clamp(max=keys - length)
    return replace(base, ks=start.to(torch.int32), ke=(start + length).to(torch.int32))


def _increasing(rows, keys, heads, top_k, gen, device) -> Workload:
    # One key vector, strictly increasing scales, positive weights: scores rise with the key index,
    # so a streaming selection admits every key (its worst case).
    base = _random(rows, keys, heads, top_k, gen, device, "increasing")
    k = base.k_fp8[:1].float().abs().expand(keys, DIM)
    q = base.q.float().abs()
    scale = torch.linspace(0.5, 2.0, keys, device=device)
    return replace(base, q=fp8(q), k_fp8=fp8(k).contiguous(), k_scale=scale, weights=base.weights.abs() + 0.01)


def _all_negative(rows, keys, heads, top_k, gen, device) -> Workload:
    # Positive queries and keys, negative weights: every score strictly negative and distinct. A
    # selection that orders fp32 bit patterns as unsigned integers ranks these backwards.
    base = _random(rows, keys, heads, top_k, gen, device, "all_negative")
    return replace(base, q=fp8(base.q.float().abs()), k_fp8=fp8(base.k_fp8.float().abs()),
                   weights=-(base.weights.abs() + 0.01))


def _wide_range(rows, keys, heads, top_k, gen, device) -> Workload:
    # Key scales log-uniform over 2^-40 .. 2^40: scores span 24 decades, so histogram bins laid out
    # for one range of magnitudes (or a log-scale distance above a gate) see the top k spread over
    # many octaves, and the sample's largest score is far above the rest.
    base = _random(rows, keys, heads, top_k, gen, device, "wide_range")
    octaves = torch.rand(keys, generator=gen, device=device) * 80 - 40
    return replace(base, k_scale=torch.exp2(octaves))


def _boundary_ties(rows, keys, heads, top_k, gen, device) -> Workload:
    # top_k / 2 distinct hot keys, then 3 top_k copies of one key vector (an exact tie that straddles
    # the k-th place), the rest cold: a radix select must take every hot key and exactly the right
    # number of tied ones (its "equal taken" count), never a cold key and never a tied key twice.
    base = _random(rows, keys, heads, top_k, gen, device, "boundary_ties")
    q = base.q.float().abs()
    k = base.k_fp8.float().abs() * 0.25
    scale = torch.ones_like(base.k_scale)
    perm = torch.randperm(keys, generator=gen, device=device)
    hot, tied = perm[: top_k // 2], perm[top_k // 2: top_k // 2 + 3 * top_k]
    k[tied] = 1.0  # the same vector: one exact score per row
    scale[hot] = 8.0  # hot keys score far above the tie (and the cold ones far below it)
    return replace(base, q=fp8(q), k_fp8=fp8(k), k_scale=scale, weights=base.weights.abs() + 0.01)


def _bursts(rows, keys, heads, top_k, gen, device) -> Workload:
    # The best keys come in a few contiguous bursts of 192 keys (scales x 30): a strided sample either
    # hits a burst and sets the gate too high (fewer than k keys pass it) or misses every burst and
    # sets it from the cold keys (every burst passes on top of the intended candidates).
    base = _random(rows, keys, heads, top_k, gen, device, "bursts")
    scale = base.k_scale.clone()
    count = max(1, min(8, keys // 4096))
    for start in torch.randint(0, max(1, keys - 192), (count,), generator=gen, device=device).tolist():
        scale[start:start + 192] *= 30.0
    return replace(base, k_scale=scale)


def _sliding_window(rows, keys, heads, top_k, gen, device) -> Workload:
    # Causal rows that see only their last `window` keys (ks > 0, moving with the row): a window of a
    # few top_k, so the top k is a large share of what a row sees.
    base = _random(rows, keys, heads, top_k, gen, device, "sliding_window")
    window = 3 * top_k + 17
    return replace(base, ks=(base.ke - window).clamp(min=0).to(torch.int32))


def _random_ranges(rows, keys, heads, top_k, gen, device) -> Workload:
    # Every row its own [ks, ke) anywhere in the keys, not monotone across rows: rows of one block see
    # disjoint, nested or empty ranges, of lengths from 0 to all keys.
    base = _random(rows, keys, heads, top_k, gen, device, "random_ranges")
    a = torch.randint(0, keys + 1, (rows,), generator=gen, device=device)
    b = torch.randint(0, keys + 1, (rows,), generator=gen, device=device)
    ks, ke = torch.minimum(a, b), torch.maximum(a, b)
    full = torch.arange(rows, device=device) % 5 == 0  # some rows see everything
    ks, ke = torch.where(full, 0, ks), torch.where(full, keys, ke)
    return replace(base, ks=ks.to(torch.int32), ke=ke.to(torch.int32))


def _duplicate_keys(rows, keys, heads, top_k, gen, device) -> Workload:
    # Every key a copy of one of keys / 4 random key vectors (scale included), the copies scattered:
    # exact ties between far-apart keys at every rank, in any arithmetic (equal inputs, equal scores).
    base = _random(rows, keys, heads, top_k, gen, device, "duplicate_keys")
    source = torch.randint(0, max(1, keys // 4), (keys,), generator=gen, device=device)
    return replace(base, k_fp8=base.k_fp8[source].contiguous(), k_scale=base.k_scale[source].contiguous())


def _integers(shape: tuple[int, ...], low: int, high: int, gen, device) -> torch.Tensor:
    """Uniform integers in [low, high], as floats."""
    return torch.randint(low, high + 1, shape, generator=gen, device=device).float()


def _integer_ties(rows, keys, heads, top_k, gen, device) -> Workload:
    # q and k entries in {-1, 0, 1}, weights in {1, 2}, unit scales: every score an integer below 2^15,
    # which fp32, the mma.sync kernels' fp16 steps and the wgmma (products of magnitude 1, no
    # truncation) all compute exactly. Scores take a few hundred values over thousands of keys, so
    # ties cross the k-th place in every row, and every path must take the same keys.
    base = _random(rows, keys, heads, top_k, gen, device, "integer_ties")
    q = _integers((rows, heads, DIM), -1, 1, gen, device)
    return replace(base, q=fp8(q), k_fp8=fp8(_integers((keys, DIM), -1, 1, gen, device)),
                   k_scale=torch.ones_like(base.k_scale), weights=_integers((rows, heads), 1, 2, gen, device))


def _relu_plateau(rows, keys, heads, top_k, gen, device) -> Workload:
    # Positive integer queries; every key negative (its dots < 0: score exactly 0) but top_k / 2 of
    # them, positive integers: a row's k-th place is on the plateau of exact zeros, which the smallest
    # indices must win.
    base = _random(rows, keys, heads, top_k, gen, device, "relu_plateau")
    q = _integers((rows, heads, DIM), 1, 2, gen, device)
    k = -_integers((keys, DIM), 1, 2, gen, device)
    hot = torch.randperm(keys, generator=gen, device=device)[: top_k // 2]
    k[hot] = -k[hot]
    return replace(base, q=fp8(q), k_fp8=fp8(k), k_scale=torch.ones_like(base.k_scale),
                   weights=_integers((rows, heads), 1, 2, gen, device))


FAMILIES: dict[str, Callable[..., Workload]] = {
    "random": _random,
    "multi_request": _multi_request,
    "all_equal": _all_equal,
    "large_offset": _large_offset,
    "mostly_zero": _mostly_zero,
    "peaked": _peaked,
    "flat": _flat,
    "signed_weights": _signed_weights,
    "short_rows": _short_rows,
    "increasing": _increasing,
    "all_negative": _all_negative,
    "wide_range": _wide_range,
    "boundary_ties": _boundary_ties,
    "bursts": _bursts,
    "sliding_window": _sliding_window,
    "random_ranges": _random_ranges,
    "duplicate_keys": _duplicate_keys,
    "integer_ties": _integer_ties,
    "relu_plateau": _relu_plateau,
}
HARD_FAMILIES = tuple(f for f in FAMILIES if f not in ("random", "multi_request"))
# Families whose ties are exact in every path's arithmetic (equal inputs, or integers every
# arithmetic sums exactly): there every path must return the same bytes (README.md, "Same answer every
# time").
EXACT_TIE_FAMILIES = ("all_equal", "boundary_ties", "integer_ties", "relu_plateau")
# Families whose rows start at keys other than 0 (the indices' origin ks matters).
OFFSET_FAMILIES = ("multi_request", "short_rows", "sliding_window", "random_ranges")


def make_workload(family: str, rows: int, keys: int, heads: int, top_k: int, seed: int = 0, device="cpu") -> Workload:
    if family not in FAMILIES:
        raise ValueError(f"unknown workload family {family!r}; known: {list(FAMILIES)}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return FAMILIES[family](rows, keys, heads, top_k, gen, torch.device(device))


def packed_workload(rows: int, keys: int, heads: int, top_k: int, requests: int, seed: int = 0,
                    device="cpu") -> Workload:
    """A chunk of `requests` equal requests side by side, random data: each holds keys / requests
    tokens and rows / requests rows (its last tokens, each seeing its own request's prefix). One
    request is the causal chunk of make_workload("random", ...)."""
    if requests < 1 or rows % requests or keys % requests:
        raise ValueError(f"{rows} rows and {keys} keys do not split into {requests} equal requests")
    base = make_workload("random", rows, keys, heads, top_k, seed=seed, device=device)
    if requests == 1:
        return base
    ks, ke = multi_request_ranges([(keys // requests, rows // requests)] * requests, device)
    return replace(base, family=f"{requests} requests", ks=ks, ke=ke)
