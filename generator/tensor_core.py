"""How the fp8 tensor cores accumulate a 128-byte dot product, as the verifier models it.

Measured bit for bit on an H200 (tools/accumulation.py; BENCHMARKS.md, "Correctness"),
and as published by Khattak & Mikaitis ("Accurate models of NVIDIA tensor cores", arXiv 2512.07004)
and Xie et al. (MMA-Sim, arXiv 2511.10909):

* `wgmma ... .f32.e4m3.e4m3` (sm_90a; every Hopper kernel of this project and its dense path): one
  instruction adds 32 products and the running fp32 sum C in one step. Products are exact. Every term
  is aligned to the largest exponent M among them (a product's exponent is the sum of its factors'
  exponents, subnormal factors counting as 2^-6; C's is its own) and truncated toward zero to 13
  fraction bits below 2^M; the integer sum of the truncated terms is exact; the result is truncated
  (toward zero) to 13 fraction bits of its own exponent, so the low 10 bits of every fp32 result are
  zero. A 128-byte key is four such steps over dims 0-31, 32-63, 64-95, 96-127, from C = 0.
* `mma.sync.m16n8k32 ... e4m3` on Hopper, as nvcc 13.0 compiles it: two fp16 HMMA steps of 16
  products each (25 fraction bits) and an fp32 add: within fp32 rounding of exact (see verify.py).

The truncation makes the wgmma error depend on the data in a way no cheap bound follows tightly: a
product 2^13 times smaller than a step's largest term (or than C, once the sum has grown) is dropped
whole. With a large common offset in every score (the `large_offset` family: each dot is 1,024 plus
a spread of +-10) every small product loses up to 2^-3, so the worst case is about 1% of the score
while the scores near the k-th differ by 0.1%. The verifier therefore computes the wgmma's own
results (`wgmma_dots`) instead of bounding them.
"""

from __future__ import annotations

from functools import lru_cache

import torch

WGMMA_FRACTION_BITS = 13  # bits kept below the step's largest exponent, and in the result
WGMMA_STEP = 32  # products per instruction (k of m64nNk32 for 8-bit inputs)
FP8_MIN_EXPONENT = -6  # e4m3's smallest normal exponent: subnormals align as if they had it
FP32_MIN_EXPONENT = -126
_NONE = -10_000  # the exponent of a zero term: below every real one


def _exponent(x: torch.Tensor, floor: int) -> torch.Tensor:
    """floor(log2 |x|) clamped below at `floor`, and _NONE where x == 0 (x fp64)."""
    e = torch.frexp(x).exponent.to(torch.int32) - 1
    return torch.where(x == 0, torch.full_like(e, _NONE), e.clamp(min=floor))


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e (fp64) for integer e in [-1022, 1023], built from its bits: exact by construction."""
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)


def _step(acc: torch.Tensor, q: torch.Tensor, k: torch.Tensor, qe: torch.Tensor, ke: torch.Tensor) -> torch.Tensor:
    """One wgmma step: acc [r, H, n] fp64 (fp32 values), q [r, H, 32] and k [n, 32] fp64, their exponents."""
    f = WGMMA_FRACTION_BITS
    products = q[:, :, None, :] * k[None, None, :, :]  # [r, H, n, 32], exact
    pe = qe[:, :, None, :] + ke[None, None, :, :]  # a zero factor's _NONE keeps its product out of the max
    m = torch.maximum(pe.amax(-1), _exponent(acc, FP32_MIN_EXPONENT))  # [r, H, n]
    shift = (f - m).clamp(min=-1000, max=1000)
    up = _pow2(shift)
    s = (products * up[..., None]).trunc_().sum(-1) + (acc * up).trunc_()  # integers: the sum is exact
    result = s * _pow2(-shift)
    e = _exponent(result, FP32_MIN_EXPONENT).clamp(max=1000)
    out = (result * _pow2(f - e)).trunc_() * _pow2(e - f)
    return torch.where((result == 0) | (m == _NONE), torch.zeros_like(out), out)


def emulate_wgmma_dots(q: torch.Tensor, k: torch.Tensor, work_elements: int = 1 << 22) -> torch.Tensor:
    """Every dot product of q [r, H, 128] and k [n, 128] (e4m3) as wgmma computes it: fp64 [r, H, n]
    holding the fp32 results. Elementwise torch, in chunks of keys (any device; slow on a CPU)."""
    r, h, d = q.shape
    n = k.shape[0]
    qd, kd = q.double(), k.double()
    qe, ke = _exponent(qd, FP8_MIN_EXPONENT), _exponent(kd, FP8_MIN_EXPONENT)
    out = torch.empty((r, h, n), dtype=torch.float64, device=q.device)
    chunk = max(1, work_elements // max(1, r * h * WGMMA_STEP))
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        acc = torch.zeros((r, h, b - a), dtype=torch.float64, device=q.device)
        for s in range(0, d, WGMMA_STEP):
            t = slice(s, s + WGMMA_STEP)
            acc = _step(acc, qd[:, :, t], kd[a:b, t], qe[:, :, t], ke[a:b, t])
        out[:, :, a:b] = acc
    return out


@lru_cache(maxsize=None)
def scaled_mm_is_wgmma(device_index: int) -> bool:
    """Whether torch._scaled_mm on this GPU returns exactly the wgmma results (checked once, on random
    e4m3 values over the whole exponent range): then it computes them at tensor-core speed."""
    device = torch.device("cuda", device_index)
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    from runtime.scoring import fp8_tensor_core_product

    gen = torch.Generator(device=device).manual_seed(12345)
    q = random_e4m3((16, 32, 128), gen, device)
    k = random_e4m3((512, 128), gen, device)
    try:
        fast = fp8_tensor_core_product(q, k).double()
    except RuntimeError:  # no fp8 GEMM in this torch build
        return False
    return bool(torch.equal(fast, emulate_wgmma_dots(q, k)))


def wgmma_dots(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """emulate_wgmma_dots's result, through torch._scaled_mm where that is shown to give it exactly."""
    if q.device.type == "cuda" and scaled_mm_is_wgmma(q.device.index if q.device.index is not None
                                                       else torch.cuda.current_device()):
        from runtime.scoring import fp8_tensor_core_product

        return fp8_tensor_core_product(q, k).double()
    return emulate_wgmma_dots(q, k)


def random_e4m3(shape, gen: torch.Generator, device) -> torch.Tensor:
    """e4m3 values with random signs and exponents over the whole range, subnormals and zeros included
    (never NaN): what a model of the arithmetic must reproduce."""
    codes = torch.randint(0, 256, shape, generator=gen, device=device, dtype=torch.int32)
    codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes)  # 0x7F / 0xFF are NaN
    return codes.to(torch.uint8).view(torch.float8_e4m3fn)
