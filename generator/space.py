"""The variant space: the axes, the rule that rejects a point (with its reason), enumeration, and
where a study starts (runtime.defaults' untuned variants, then shapes that won elsewhere)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from runtime.arch import ARCHS
from runtime.defaults import default_variant, default_variants
from runtime.variant import BUFFERS, Variant

SUPPORTED_HEADS = (32, 64)
SUPPORTED_TOP_K = (512, 1024, 2048)

# Every axis and the values the tuner may try. heads and top_k are fixed by the model, the others
# are the tuner's to choose.
AXES: dict[str, tuple] = {
    "mma": ("mmasync", "wgmma"),
    "arch": tuple(ARCHS),
    "heads": SUPPORTED_HEADS,
    "top_k": SUPPORTED_TOP_K,
    "rows": (1, 2, 4),
    "key_tile": (128, 192, 256),
    "warps": (4, 8, 12, 16),
    "stages": (2, 3, 4),
    "buffer": BUFFERS + (16384,),
    "sample_tiles": (0, 8, 16, 32),
    "select_warps": (0, 3, 7),
}

# Boundary-bin candidates a row of the gated kernel's selection gathers (the template's kGather).
GATE_GATHER = 512
MAX_REGISTERS_PER_THREAD = 232  # 255 minus headroom: the estimate is coarse
REGISTERS_PER_SM = 65_536


def kind_of(v: Variant) -> str:
    """The kernel kind of `v`: the sampled gate (wgmma), the exact streaming top-k on wgmma, or on
    mma.sync."""
    return "mmasync" if v.mma == "mmasync" else "gated" if v.gated else "streaming"


def rejection_reason(v: Variant) -> str | None:
    """Why the point `v` cannot be built or run, or None if it is valid. Checked before compiling."""
    for axis, allowed in AXES.items():
        if getattr(v, axis) not in allowed:
            return f"{axis}={getattr(v, axis)} is not one of {allowed}"
    if v.gate_bits != 32:
        # (not an axis the tuner searches yet: BENCHMARKS.md, "Past the epilogue: the fp16 gate built")
        if v.gate_bits != 16:
            return f"gate_bits={v.gate_bits}: the gate is scored in fp32 (32) or gated in fp16 (16)"
        if not v.gated:
            return "gate_bits=16 gates the sampled gate's scan: gated variants (sample_tiles > 0) only"
        if (v.heads, v.rows) != (64, 2):
            return "the fp16 gate's chains are laid out for 64 heads in two-row blocks (heads=64, rows=2)"
        if v.page_block_size:
            return "the fp16 gate gathers its rescored keys from k_fp8 laid end to end: no paged build"
    arch = ARCHS[v.arch]
    if v.mma not in arch.mma_kinds:
        return f"{v.arch} has no {v.mma} scoring core"
    if v.mma == "wgmma":
        # Each math warpgroup (4 warps) scores 64-key slices: one per tile, or (gated) two pipelined.
        slices = (1, 2) if v.gated else (1,)
        if v.warps % 4 or v.key_tile not in [16 * v.warps * s for s in slices]:
            return (f"wgmma: key_tile must be {' or '.join(str(16 * v.warps * s) for s in slices)} "
                    f"(64-key slices per math warpgroup{', one or two' if v.gated else ''})")
        if (v.rows * v.heads) % 64 or v.rows * v.heads > 256:
            return f"wgmma N = rows x heads = {v.rows * v.heads} must be a multiple of 64, at most 256"
    elif v.key_tile % (16 * v.warps):
        return f"key_tile {v.key_tile} does not split into 16-key mma tiles over {v.warps} warps"
    if v.select_warps and not v.gated:
        return "selector warps (select_warps > 0) serve the sampled gate's slabs only"
    if v.select_warps > 3 and v.warps != 8:
        # (three math warpgroups would get 120 registers a thread beside two other warpgroups: they spill)
        return "a selector warpgroup (select_warps=7) needs two math warpgroups (warps=8)"
    if v.gated:
        if v.mma != "wgmma":
            return "the sampled gate (sample_tiles > 0) runs on the wgmma core only"
        if v.sample_tiles * v.key_tile > v.buffer:
            return f"a sample of {v.sample_tiles} tiles x {v.key_tile} keys does not fit a {v.buffer}-entry slab"
        if v.buffer < 2 * v.top_k:
            return f"slab of {v.buffer} < 2 x top_k: no room for the candidates a gate aims for"
        if 2 * v.rows * GATE_GATHER < v.top_k:
            # (the template's static_assert on sel::BinnedScratch<kRows, kGather>::kStageInts)
            return (f"the gated kernel stages an answer in its selection's gather arrays, 2 x rows x {GATE_GATHER} = "
                    f"{2 * v.rows * GATE_GATHER} ints < top_k {v.top_k}")
        rescan_reason = rejection_reason(v.rescan_variant)
        if rescan_reason:
            return f"its rescan variant {v.rescan_variant.name} is invalid: {rescan_reason}"
    if v.buffer < v.top_k + v.key_tile:
        return f"buffer {v.buffer} < top_k + key_tile = {v.top_k + v.key_tile}: a compacted row could not take a tile"
    if not v.gated and v.buffer % v.math_threads:
        return f"buffer {v.buffer} is not a multiple of the {v.math_threads} threads that select over it"
    regs, available = v.registers_estimate(), min(MAX_REGISTERS_PER_THREAD, v.registers_available())
    if regs > available:
        return f"about {regs} registers a thread (rows*heads = {v.rows * v.heads} query columns) > {available}"
    if v.mma == "mmasync" and regs * v.threads > REGISTERS_PER_SM:
        return f"about {regs} registers x {v.threads} threads > {REGISTERS_PER_SM} registers per SM"
    smem = v.smem_bytes()
    if smem > arch.max_smem_per_block:
        return f"{smem} bytes of shared memory > {arch.max_smem_per_block} on {v.arch}"
    return None


def enumerate_space(**fixed) -> Iterator[tuple[Variant, str | None]]:
    """Every point of the space with its rejection reason (None = valid); `fixed` pins axes."""
    unknown = set(fixed) - set(AXES)
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)}; axes are {list(AXES)}")
    axes = {a: ((fixed[a],) if a in fixed else values) for a, values in AXES.items()}
    for combo in itertools.product(*axes.values()):
        v = Variant(**dict(zip(axes, combo)))
        yield v, rejection_reason(v)


def valid_variants(**fixed) -> list[Variant]:
    return [v for v, reason in enumerate_space(**fixed) if reason is None]


def starting_points(heads: int, top_k: int, arch: str = "sm90a", skip_kinds=frozenset()) -> list[Variant]:
    """The points a tuning study measures before it searches: the arch's default (its fastest kind),
    shapes of that kind that won buckets where the default did not, then the other kinds' defaults.
    Such shapes so far (docs/experiment-log.md):
      * the gated kernel with two math warpgroups of two 64-key slices each (232 registers a
        thread; it wins long chunks, from 256K keys on an H200: "2026-11-29: cheaper epilogue");
      * that shape with selector warps (each block's answers selected beside the next block's scan;
        it wins at 128K keys, not at 32K, where three selector warps cannot keep up with the scan:
        "2026-11-29: selector warps");
      * and with a selector warpgroup more (seven selector warps, for short blocks: "2026-11-30:
        seven selector warps").
    Points of `skip_kinds` are left out (tune.losing_kinds: kinds that lost by a wide margin), except
    the arch's default, which a study always measures first."""
    first = default_variant(heads, top_k, arch)
    shapes = [replace(first, key_tile=256, warps=8, select_warps=s) for s in (0, 3, 7)] if first.gated else []
    points = [first, *shapes, *(d for d in default_variants(heads, top_k, arch) if d != first)]
    return [v for i, v in enumerate(points) if rejection_reason(v) is None and (i == 0 or kind_of(v) not in skip_kinds)]


def neighbors(v: Variant, axes: tuple[str, ...]) -> list[Variant]:
    """The valid points that differ from `v` in exactly one of `axes`, axis by axis in that order:
    where a tuning study looks next after its starting points, before it samples. The tuned axes
    interact little near a good point (each gain logged from "2026-11-29: logits kernel's time" to
    "2026-11-29: cheaper epilogue" moved one axis), and a study of a few dozen trials cannot afford
    TPE's random start over a space of thousands of points."""
    out = []
    for axis in axes:
        for value in AXES[axis]:
            if value != getattr(v, axis):
                w = replace(v, **{axis: value})
                if rejection_reason(w) is None:
                    out.append(w)
    return out
