"""The untuned variants: what serves where no tuned table names one (FUSED_MQA_TOPK_PATH=fused on a
GPU without a bucket, first builds, tests), one per kernel kind an arch can run.

Fixed shapes, not a search: the variant space (generator.space) checks each of them valid on its
arch (tests/test_variant_space.py), and the tuner starts every study from them.
"""

from __future__ import annotations

from .arch import ARCHS
from .variant import Variant, smallest_wgmma_buffer


def kernel_kinds(arch: str = "sm90a") -> list[tuple[str, bool]]:
    """The (scoring core, gated) kernels `arch` can run: mma.sync and wgmma cores, the gate on wgmma."""
    kinds = [(mma, False) for mma in ARCHS[arch].mma_kinds]
    return kinds + [("wgmma", True)] if "wgmma" in ARCHS[arch].mma_kinds else kinds


def default_variant(heads: int, top_k: int, arch: str = "sm90a", mma: str | None = None,
                    gated: bool | None = None) -> Variant:
    """A sound untuned choice; `mma` defaults to the arch's fastest core (wgmma where it exists),
    `gated` to the gate on wgmma."""
    kinds = ARCHS[arch].mma_kinds
    mma = mma or ("wgmma" if "wgmma" in kinds else "mmasync")
    gated = mma == "wgmma" if gated is None else gated
    if (mma, gated) not in kernel_kinds(arch):
        raise ValueError(f"{arch} runs no {'gated ' if gated else ''}{mma} kernel (it runs {kernel_kinds(arch)})")
    if gated:
        # 128 (row, head) columns, three math warpgroups (192 keys per tile), slabs of 16K candidates.
        # Four warpgroups get only 104 registers each and spill; three get 152 and do not. Which
        # shapes won where: the experiment log, "2026-11-29: logits kernel's time" and "cheaper epilogue".
        return Variant(mma=mma, arch=arch, heads=heads, top_k=top_k, rows=128 // heads, key_tile=192, warps=12,
                       stages=4, buffer=16384, sample_tiles=32)
    if mma == "wgmma":  # 128 (row, head) columns, two math warpgroups, the smallest buffer that fits
        return Variant(mma=mma, arch=arch, heads=heads, top_k=top_k, rows=128 // heads, key_tile=128, warps=8,
                       stages=4, buffer=smallest_wgmma_buffer(top_k))
    if ARCHS[arch].max_smem_per_block < 128 << 10:
        # (sm_89's 99 KB a block: one row, four warps, two stages of 128-key tiles, the smallest buffer)
        return Variant(mma=mma, arch=arch, heads=heads, top_k=top_k, rows=1, key_tile=128, warps=4, stages=2,
                       buffer=smallest_wgmma_buffer(top_k))
    return Variant(mma=mma, arch=arch, heads=heads, top_k=top_k, rows=64 // heads, key_tile=256, warps=8, stages=3,
                   buffer=top_k * 2 if top_k >= 1024 else 1024)


def default_variants(heads: int, top_k: int, arch: str = "sm90a") -> list[Variant]:
    """One default per kernel kind of `arch` (what CI compiles and the GPU tests run)."""
    return [default_variant(heads, top_k, arch, mma, gated) for mma, gated in kernel_kinds(arch)]
