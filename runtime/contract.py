"""The operation's input contract (README.md, "The contract"): checks that name the offending argument."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .dense_kernels import dense_variant_for
from .loader import KernelUnavailable, aligned16, allocate, launch_on, load

DIM = 128
SUPPORTED_HEADS = (32, 64)
SUPPORTED_TOP_K = (512, 1024, 2048)
MAX_KEYS = 2**31 - 1  # indices are int32


class Problem(NamedTuple):
    """The shape of one call: what dispatch and bucketing look at. (A named tuple: one is made on
    every call of the op, a frozen dataclass costs several times as much.)"""

    rows: int
    keys: int
    heads: int
    top_k: int
    device: torch.device
    visible_keys: int | None = None  # the most keys one row sees, where known (measured or told); else None

    @property
    def longest_row(self) -> int:
        """The most keys a row sees: as measured or told, else the chunk's keys (an upper bound)."""
        return self.keys if self.visible_keys is None else self.visible_keys

    @property
    def packing(self) -> int:
        """How many times the key buffer holds the longest row's keys, rounded: the number of
        requests a chunk packs where they are alike (a server lays each request's keys after the
        last's), 1 for one request or where the longest row is not known. Read from the shapes and
        the caller's max_visible_keys, so it costs no readback; dispatch looks buckets up by it."""
        longest = self.longest_row
        return max(1, round(self.keys / longest)) if longest > 0 else 1


def check_queries(q, ndim: int) -> torch.Tensor:
    """q's checks in every entry: e4m3 with `ndim` dimensions, the last DIM, a supported head count in
    the one before it."""
    q = _tensor("q", q, torch.float8_e4m3fn, ndim)
    if q.shape[-1] != DIM:
        raise ValueError(f"q: last dimension must be {DIM}, got shape {tuple(q.shape)}")
    if q.shape[-2] not in SUPPORTED_HEADS:
        raise ValueError(f"q: {q.shape[-2]} heads is not supported; supported: {SUPPORTED_HEADS}")
    return q


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


def check_inputs(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, *, check_values: bool = True,
                 max_visible_keys: int | None = None) -> Problem:
    """Raises TypeError/ValueError naming the argument that breaks the contract; returns the shape.

    check_values reads the inputs' values back from the device (one synchronisation) to check
    0 <= ks <= ke <= N, finite k_scale > 0, finite weights and no NaN codes in q or k_fp8, and
    measures the most keys a row sees (Problem.visible_keys); it is skipped while a CUDA graph is
    being captured (nothing can be read back then). The kernels clamp ranges themselves, so
    unchecked bad values give wrong indices, never a fault or a hang. max_visible_keys, where the
    caller knows it (as flash-attn's max_seqlen_k), stands in for the measurement: a promise that no
    row sees more keys. Dispatch and the dense kernels' logits layout follow it; checked values must
    keep it (ValueError naming it), and unchecked, a row that sees more is answered by our dense
    kernels from its first max_visible_keys keys.
    """
    shape = _well_formed(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k)
    if shape is None:  # something is wrong: find it and say which argument
        shape = _check_forms(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k)
    rows, heads, keys = shape
    k_fp8, k_scale = kv
    ks, ke = cu_seqlen_ks, cu_seqlen_ke
    if max_visible_keys is not None:
        if isinstance(max_visible_keys, bool) or not isinstance(max_visible_keys, int):
            raise TypeError(f"max_visible_keys: expected an int, got {type(max_visible_keys).__name__}")
        if not 0 <= max_visible_keys <= keys:
            raise ValueError(f"max_visible_keys: {max_visible_keys} is outside [0, {keys}] (N = {keys} keys)")
    visible = max_visible_keys
    if check_values and rows > 0 and not _capturing(q.device):
        visible = _check_values(q, k_fp8, ks, ke, keys, k_scale, weights, top_k)
        if max_visible_keys is not None and visible > max_visible_keys:
            raise ValueError(f"max_visible_keys: {max_visible_keys}, but a row sees {visible} keys")
    return Problem(rows=rows, keys=keys, heads=heads, top_k=top_k, device=q.device, visible_keys=visible)


_FP8, _F32, _I32 = torch.float8_e4m3fn, torch.float32, torch.int32


def _well_formed(q, kv, weights, ks, ke, top_k) -> tuple[int, int, int] | None:
    """(rows, heads, keys) where every argument has its contract's type, dtype, shape, layout and
    device, else None (then _check_forms names what is wrong): the rules of _check_forms in as few
    attribute reads as they allow, for every call of the op."""
    try:
        k_fp8, k_scale = kv
        rows, heads, dim = q.shape
        keys, k_dim = k_fp8.shape
        device = q.device
        if not (q.dtype is _FP8 and k_fp8.dtype is _FP8 and k_scale.dtype is _F32 and weights.dtype is _F32
                and ks.dtype is _I32 and ke.dtype is _I32 and dim == DIM and k_dim == DIM and heads in SUPPORTED_HEADS
                and keys <= MAX_KEYS and k_scale.shape == (keys,) and weights.shape == (rows, heads)
                and ks.shape == (rows,) and ke.shape == (rows,) and type(top_k) is int and top_k in SUPPORTED_TOP_K
                and isinstance(kv, (tuple, list)) and q.is_contiguous() and k_fp8.is_contiguous()
                and k_scale.is_contiguous() and weights.is_contiguous() and ks.is_contiguous() and ke.is_contiguous()
                and k_fp8.device == device and k_scale.device == device and weights.device == device
                and ks.device == device and ke.device == device):
            return None
    except (TypeError, ValueError, AttributeError):
        return None
    return rows, heads, keys


def _check_forms(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, top_k) -> tuple[int, int, int]:
    """Raises TypeError/ValueError naming the first argument that breaks the contract's forms (type,
    dtype, shape, layout, device); returns (rows, heads, keys) where none does."""
    q = check_queries(q, 3)
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError("kv: expected a (k_fp8, k_scale) pair")
    k_fp8 = _tensor("k_fp8", kv[0], torch.float8_e4m3fn, 2)
    k_scale = _tensor("k_scale", kv[1], torch.float32, 1)
    weights = _tensor("weights", weights, torch.float32, 2)
    ks = _tensor("cu_seqlen_ks", cu_seqlen_ks, torch.int32, 1)
    ke = _tensor("cu_seqlen_ke", cu_seqlen_ke, torch.int32, 1)
    check_top_k(top_k)

    rows, heads, _ = q.shape
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
    return rows, heads, keys


def check_top_k(top_k) -> None:
    """Raises TypeError/ValueError naming top_k where it is not one of SUPPORTED_TOP_K."""
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"top_k: expected an int, got {type(top_k).__name__}")
    if top_k not in SUPPORTED_TOP_K:
        raise ValueError(f"top_k: {top_k} is not supported; supported: {SUPPORTED_TOP_K}")


def clamp_ranges(ks: torch.Tensor, ke: torch.Tensor, keys: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ks, ke clamped so that 0 <= ks <= ke <= keys (on the device, without reading them back)."""
    ks = ks.clamp(0, keys)
    return ks, torch.maximum(ke.clamp(max=keys), ks)


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _nan_codes(x: torch.Tensor) -> torch.Tensor:
    """e4m3fn has no infinities; its only non-finite codes are NaN: S.1111.111."""
    return (x.view(torch.uint8) & 0x7F) == 0x7F


# One bit per rule, as templates/common/input_check.cuh sets them.
KS_NEGATIVE, KS_ABOVE_KE, KE_ABOVE_N, BAD_SCALE, BAD_WEIGHTS, NAN_Q, NAN_K = (1 << i for i in range(7))


def _check_values(q, k_fp8, ks, ke, keys, k_scale, weights, top_k) -> int:
    """Checks the values (see check_inputs) and returns the most keys a row sees. One launch of the
    dense library's input check where it runs, else a handful of torch reductions; either way one
    synchronisation. The slow search for the offender runs only on failure."""
    flags, longest = _kernel_checks(q, k_fp8, ks, ke, keys, k_scale, weights, top_k) or \
        _torch_checks(q, k_fp8, ks, ke, k_scale, weights, keys)
    if flags & KS_NEGATIVE:
        row = int((ks < 0).nonzero()[0])
        raise ValueError(f"cu_seqlen_ks: row {row} has ks = {int(ks[row])} < 0")
    if flags & KS_ABOVE_KE:
        row = int((ks > ke).nonzero()[0])
        raise ValueError(f"cu_seqlen_ks/cu_seqlen_ke: row {row} has ks = {int(ks[row])} > ke = {int(ke[row])}")
    if flags & KE_ABOVE_N:
        row = int((ke > keys).nonzero()[0])
        raise ValueError(f"cu_seqlen_ke: row {row} has ke = {int(ke[row])} > N = {keys} keys")
    if flags & BAD_SCALE:
        key = int((~((k_scale > 0) & torch.isfinite(k_scale))).nonzero()[0])
        raise ValueError(f"k_scale: key {key} has scale {float(k_scale[key])}; scales must be finite and > 0")
    if flags & BAD_WEIGHTS:
        raise ValueError("weights: contains NaN or infinity")
    if flags & NAN_Q:
        row = int(_nan_codes(q).flatten(1).any(1).nonzero()[0])
        raise ValueError(f"q: row {row} holds an fp8 NaN code (0x7F or 0xFF)")
    if flags & NAN_K:
        key = int(_nan_codes(k_fp8).any(1).nonzero()[0])
        raise ValueError(f"k_fp8: key {key} holds an fp8 NaN code (0x7F or 0xFF)")
    return longest


def _kernel_checks(q, k_fp8, ks, ke, keys, k_scale, weights, top_k) -> tuple[int, int] | None:
    """(flags, longest row) from the dense library's check kernel, or None where it cannot run here
    (not a Hopper GPU, or the library cannot be had: the torch checks serve, without a warning)."""
    if q.device.type != "cuda":
        return None
    variant = dense_variant_for(q.device, q.shape[1], top_k)
    if variant is None:
        return None
    try:
        lib = load(variant)
    except KernelUnavailable:
        return None
    q, k_fp8 = aligned16(q), aligned16(k_fp8)
    context, stream = launch_on(q.device)
    with context:
        result = allocate(8, q.device, "the input check's result", torch.int32)
        return lib.check_inputs(q.data_ptr(), k_fp8.data_ptr(), k_scale.data_ptr(), weights.data_ptr(), ks.data_ptr(),
                                ke.data_ptr(), q.shape[0], q.shape[1], keys, result.data_ptr(), stream)


def _torch_checks(q, k_fp8, ks, ke, k_scale, weights, keys) -> tuple[int, int]:
    """(flags, longest row) from torch reductions, read back together."""
    zero = torch.zeros((), dtype=torch.float64, device=ks.device)

    def largest_code(x: torch.Tensor) -> torch.Tensor:
        return (x.view(torch.uint8) & 0x7F).amax().double() if x.numel() else zero

    scale_lo, scale_hi = k_scale.aminmax() if k_scale.numel() else (zero + 1, zero + 1)
    span = ke.clamp(max=keys) - ks.clamp(min=0)
    # amax/aminmax propagate NaN, and NaN fails every comparison below
    stats = torch.stack([ks.amin().double(), (ke - ks).amin().double(), ke.amax().double(), scale_lo.double(),
                         scale_hi.double(), weights.abs().amax().double() if weights.numel() else zero,
                         largest_code(q), largest_code(k_fp8), span.clamp(min=0).amax().double()]).tolist()
    ks_min, span_min, ke_max, scale_min, scale_max, weight_max, q_code, k_code, longest = stats
    flags = ((KS_NEGATIVE if ks_min < 0 else 0) | (KS_ABOVE_KE if span_min < 0 else 0) |
             (KE_ABOVE_N if ke_max > keys else 0) |
             (0 if scale_min > 0 and scale_max < float("inf") else BAD_SCALE) |
             (0 if weight_max < float("inf") else BAD_WEIGHTS) |
             (NAN_Q if q_code == 0x7F else 0) | (NAN_K if k_code == 0x7F else 0))
    return flags, int(longest)
