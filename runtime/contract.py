"""The operation's input contract (SPEC section 1): checks that name the offending argument."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DIM = 128
SUPPORTED_HEADS = (32, 64)
SUPPORTED_TOP_K = (512, 1024, 2048)
MAX_KEYS = 2**31 - 1  # indices are int32


@dataclass(frozen=True)
class Problem:
    """The shape of one call: what dispatch and bucketing look at."""

    rows: int
    keys: int
    heads: int
    top_k: int
    device: torch.device


def _tensor(name: str, x, dtype: torch.dtype, ndim: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (got strides {x.stride()} for shape {tuple(x.shape)})")
    return x


def check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, *, check_values: bool = True) -> Problem:
    """Raises TypeError/ValueError naming the argument that breaks the contract; returns the shape.

    check_values reads ks/ke/k_scale/weights back from the device (a synchronisation) to check
    0 <= ks <= ke <= N, k_scale > 0 and finite weights; pass False inside CUDA graphs. The kernels
    clamp ranges themselves, so unchecked bad values give wrong indices, never a fault.
    """
    q = _tensor("q", q, torch.float8_e4m3fn, 3)
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError("kv: expected a (k_fp8, k_scale) pair")
    k_fp8 = _tensor("k_fp8", kv[0], torch.float8_e4m3fn, 2)
    k_scale = _tensor("k_scale", kv[1], torch.float32, 1)
    weights = _tensor("weights", weights, torch.float32, 2)
    ks = _tensor("cu_seqlen_ks", cu_seqlen_ks, torch.int32, 1)
    ke = _tensor("cu_seqlen_ke", cu_seqlen_ke, torch.int32, 1)
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"top_k: expected an int, got {type(top_k).__name__}")
    if top_k not in SUPPORTED_TOP_K:
        raise ValueError(f"top_k: {top_k} is not supported; supported: {SUPPORTED_TOP_K}")

    rows, heads, dim = q.shape
    if dim != DIM:
        raise ValueError(f"q: last dimension must be {DIM}, got shape {tuple(q.shape)}")
    if heads not in SUPPORTED_HEADS:
        raise ValueError(f"q: {heads} heads is not supported; supported: {SUPPORTED_HEADS}")
    keys = k_fp8.shape[0]
    if k_fp8.shape[1] != DIM:
        raise ValueError(f"k_fp8: expected shape [N, {DIM}], got {tuple(k_fp8.shape)}")
    if keys > MAX_KEYS:
        raise ValueError(f"k_fp8: {keys} keys exceed the int32 index range")
    if tuple(k_scale.shape) != (keys,):
        raise ValueError(f"k_scale: expected shape [{keys}] (one per key), got {tuple(k_scale.shape)}")
    if tuple(weights.shape) != (rows, heads):
        raise ValueError(f"weights: expected shape [{rows}, {heads}], got {tuple(weights.shape)}")
    for name, x in (("cu_seqlen_ks", ks), ("cu_seqlen_ke", ke)):
        if tuple(x.shape) != (rows,):
            raise ValueError(f"{name}: expected shape [{rows}] (one per row of q), got {tuple(x.shape)}")
    for name, x in (("k_fp8", k_fp8), ("k_scale", k_scale), ("weights", weights), ("cu_seqlen_ks", ks), ("cu_seqlen_ke", ke)):
        if x.device != q.device:
            raise ValueError(f"{name}: on {x.device}, but q is on {q.device}; all inputs must share one device")

    if check_values and rows > 0:
        _check_values(ks, ke, keys, k_scale, weights)
    return Problem(rows=rows, keys=keys, heads=heads, top_k=top_k, device=q.device)


def _check_values(ks, ke, keys, k_scale, weights) -> None:
    flags = torch.stack([
        (ks < 0).any(),
        (ks > ke).any(),
        (ke > keys).any(),
        (~(k_scale > 0)).any() if k_scale.numel() else torch.zeros((), dtype=torch.bool, device=ks.device),
        (~torch.isfinite(weights)).any(),
    ]).tolist()  # one synchronisation for all five
    if flags[0]:
        row = int((ks < 0).nonzero()[0])
        raise ValueError(f"cu_seqlen_ks: row {row} has ks = {int(ks[row])} < 0")
    if flags[1]:
        row = int((ks > ke).nonzero()[0])
        raise ValueError(f"cu_seqlen_ks/cu_seqlen_ke: row {row} has ks = {int(ks[row])} > ke = {int(ke[row])}")
    if flags[2]:
        row = int((ke > keys).nonzero()[0])
        raise ValueError(f"cu_seqlen_ke: row {row} has ke = {int(ke[row])} > N = {keys} keys")
    if flags[3]:
        key = int((~(k_scale > 0)).nonzero()[0])
        raise ValueError(f"k_scale: key {key} has scale {float(k_scale[key])}; scales must be > 0")
    if flags[4]:
        raise ValueError("weights: contains NaN or infinity")
