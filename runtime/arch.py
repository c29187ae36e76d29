"""The GPU architectures a variant can be compiled for: one table, read by every other module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    name: str  # as it appears in variant names
    compute_capability: tuple[int, int]
    gencode: str  # nvcc target flag
    max_smem_per_block: int  # bytes of dynamic shared memory a block may opt into
    mma_kinds: tuple[str, ...]  # scoring cores this target can run


# nvcc's flags for every library (besides the arch's gencode): part of what decides what a library
# computes, so they live here, in a module the code digest covers (runtime/kernel_code.py).
BASE_NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", "-Xptxas", "-v")

ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("sm89", (8, 9), "-gencode=arch=compute_89,code=sm_89", 101_376, ("mmasync",)),
        Arch("sm90a", (9, 0), "-gencode=arch=compute_90a,code=sm_90a", 232_448, ("mmasync", "wgmma")),
        Arch("sm100a", (10, 0), "-gencode=arch=compute_100a,code=sm_100a", 232_448, ("mmasync",)),
    )
}


# Registers the producer warpgroup of a wgmma kernel keeps at least (templates/common/sm90.cuh:
# kMinProducerRegisters): its TMA address math spilled at 32. Gated variants whose producer warpgroup
# also selects (select_warps > 0) keep SELECTOR_REGISTERS (the template's kSelectorRegisters).
MIN_PRODUCER_REGISTERS = 40
# The paged kernel's producer where it also loads a sampled gate's tiles (gate_tiles): at 40 its block
# ids and tile positions spilled (16-20 bytes) with two math warpgroups.
SAMPLING_PRODUCER_REGISTERS = 56
SELECTOR_REGISTERS = 56


def wgmma_math_registers(threads: int, math_threads: int, producer_min: int = MIN_PRODUCER_REGISTERS) -> int:
    """Registers a math thread of a wgmma kernel gets after setmaxnreg (sm90.cuh's math_registers):
    the launch allocation (threads x 65536/threads, rounded down to 8, at most 240) less the other
    warpgroups' share (the producer's, and a selector warpgroup's if any: at least producer_min each)."""
    launch = min(240, 65536 // threads // 8 * 8)
    return min(240, (launch * threads - (threads - math_threads) * producer_min) // math_threads // 8 * 8)


def arch_for_capability(major: int, minor: int) -> Arch | None:
    """The arch whose kernels run best on a device of this compute capability, or None if none runs.

    Architecture-specific ("a") targets run only on their exact capability; the portable sm89 build
    is the fallback for other sm_89+ parts.
    """
    for arch in ARCHS.values():
        if arch.compute_capability == (major, minor):
            return arch
    if (major, minor) >= (8, 9):
        return ARCHS["sm89"]
    return None
