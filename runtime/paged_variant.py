"""A paged-decode variant: one point of the paged kernel's parameter space (templates/paged_mqa_topk_wgmma.cu.j2).

Name: paged_topk_wgmma_sm90a_h64_k2048_n2_p64_w8_s4_b4096 = arch, heads, top_k, the query rows a
request has each step (next_n), cache block size, math warps (4 per warpgroup, 64 keys each a
tile), K stages, candidate buffer per row; then `_q1` where the queries have one ring stage instead of
two, `_c128` (or `_c256`) where a product takes that many (row, head) columns instead of 64, and
`_g<tiles>` where a part starts each row from a gate sampled over that many tiles (and a second launch
rescans the requests it missed), and `_m<ctas>` where the CTAs of a request's last that many parts
merge its rows in parallel (a row each from a counter) instead of the last part's CTA merging every row
in turn. It parses back (PagedVariant.from_name).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from functools import cached_property, lru_cache

from .arch import ARCHS, MIN_PRODUCER_REGISTERS, SAMPLING_PRODUCER_REGISTERS, wgmma_math_registers
from .variant import RADIX_SCRATCH_BYTES, parse_name

DIM = 128
SUPPORTED_NEXT_N = (1, 2, 3, 4)
CACHE_BYTES_PER_KEY = DIM + 4  # 128 fp8 values and one fp32 scale


def padded_rows(next_n: int, heads: int) -> int:
    """The rows the kernel scores a request's next_n rows as: the fewest of 1, 2, 4 (what the lane
    layout serves) at least next_n whose rows x heads is a multiple of 64 (a wgmma N)."""
    return min(r for r in (1, 2, 4) if r >= next_n and r * heads % 64 == 0)


@dataclass(frozen=True, order=True)
class PagedVariant:
    arch: str
    heads: int
    top_k: int
    next_n: int
    block_size: int
    warps: int  # math warps, 4 per warpgroup (a producer warpgroup is added)
    stages: int
    buffer: int
    q_stages: int = 2  # query tiles in flight: the next work item's loads during this one's scan
    columns: int = 64  # (row, head) columns a product and its head sum take (the template's kColumns)
    gate_tiles: int = 0  # tiles a part's sampled gate scores first (0: no gate; the template's kGateTiles)
    merge_ctas: int = 1  # CTAs that merge a request's rows, those of its last parts (the template's kMergeCtas)

    template = "paged_mqa_topk_wgmma.cu.j2"
    kernels = ("paged_mqa_topk_kernel",)
    _PATTERN = re.compile(
        r"^paged_topk_wgmma_(?P<arch>sm\d+a?)_h(?P<heads>\d+)_k(?P<top_k>\d+)_n(?P<next_n>\d+)_p(?P<block_size>\d+)"
        r"_w(?P<warps>\d+)_s(?P<stages>\d+)_b(?P<buffer>\d+)(?:_q(?P<q_stages>\d+))?(?:_c(?P<columns>\d+))?(?:_g(?P<gate_tiles>\d+))?(?:_m(?P<merge_ctas>\d+))?$"
    )

    @cached_property
    def name(self) -> str:
        return (f"paged_topk_wgmma_{self.arch}_h{self.heads}_k{self.top_k}_n{self.next_n}_p{self.block_size}"
                f"_w{self.warps}_s{self.stages}_b{self.buffer}" + (f"_q{self.q_stages}" if self.q_stages != 2 else "")
                + (f"_c{self.columns}" if self.columns != 64 else "") + (f"_g{self.gate_tiles}" if self.gate_tiles else "")
                + (f"_m{self.merge_ctas}" if self.merge_ctas != 1 else ""))

    @classmethod
    def from_name(cls, name: str) -> PagedVariant:
        return parse_name(cls, cls._PATTERN, name)

    def params(self) -> dict:
        return asdict(self)

    @property
    def rows(self) -> int:
        return padded_rows(self.next_n, self.heads)

    @property
    def key_tile(self) -> int:
        return 16 * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps + 128

    @property
    def max_smem(self) -> int:
        return ARCHS[self.arch].max_smem_per_block

    @property
    def producer_min(self) -> int:
        """The producer warpgroup's registers at least (the template's Shape kProducerMin)."""
        return SAMPLING_PRODUCER_REGISTERS if self.gate_tiles else MIN_PRODUCER_REGISTERS

    @property
    def math_registers(self) -> int:
        """Registers a math thread gets after setmaxnreg (the template's Shape::kMathRegisters)."""
        return wgmma_math_registers(self.threads, 32 * self.warps, self.producer_min)

    def smem_bytes(self) -> int:
        """The template's kSmemBytes (pipeline::SpaceAgrees: a wrong sum here fails the build)."""
        q_ring = self.q_stages * self.rows * self.heads * DIM
        k_ring = self.stages * self.key_tile * CACHE_BYTES_PER_KEY
        candidates = self.next_n * self.buffer * 8
        # rank_select's three histograms, two sets of largest and smallest a warp, a kept count a warp, base (16-byte aligned); the
        # select scratch; counts, item per Q stage, merge flag, merge row (merge_ctas > 1), count and floor
        radix = -(-(3 * 256 * 4 + 20 * self.warps + 4) // 16) * 16
        gates = 4 * self.next_n if self.gate_tiles else 0  # each row's sampled gate
        state = -(-(radix + RADIX_SCRATCH_BYTES + 4 * self.next_n + (self.q_stages + (4 if self.merge_ctas > 1 else 3)) * 4 + gates) // 16) * 16
        return (q_ring + k_ring + candidates + state + 7) // 8 * 8 + 8 * 2 * (self.q_stages + self.stages) + 1024

    def invalid_reason(self) -> str | None:
        """Why this point cannot be compiled or run, or None."""
        if self.arch not in ARCHS or "wgmma" not in ARCHS[self.arch].mma_kinds:
            return f"arch {self.arch} has no wgmma"
        if self.next_n not in SUPPORTED_NEXT_N:
            return f"next_n {self.next_n} not in {SUPPORTED_NEXT_N}"
        if self.heads % 8 or self.rows * self.heads > 256:
            return f"{self.rows} rows x {self.heads} heads is no wgmma N"
        if self.columns not in (64, 128, 256) or self.rows * self.heads % self.columns:
            return f"products of {self.columns} columns do not cut {self.rows} rows x {self.heads} heads"
        if self.block_size % 64:
            return f"block_size {self.block_size} is not a multiple of 64"
        if self.warps not in (4, 8, 12, 16):
            return "one to four math warpgroups"
        if self.stages < 2:
            return "the ring needs two stages"
        if self.q_stages not in (1, 2):
            return f"{self.q_stages} query stages: one or two"
        if not 1 <= self.merge_ctas <= self.next_n:
            return f"{self.merge_ctas} merging CTAs for {self.next_n} rows a request"
        if self.gate_tiles < 0 or self.gate_tiles * self.key_tile > self.buffer - self.key_tile:
            return f"a sample of {self.gate_tiles} tiles must leave the buffer of {self.buffer} a tile"
        if self.buffer < self.top_k + self.key_tile or self.buffer % (32 * self.warps) or self.top_k % (32 * self.warps):
            return (f"buffer {self.buffer} must hold top_k + a tile, and it and top_k {self.top_k} split evenly over "
                    f"the {32 * self.warps} math threads")
        if self.smem_bytes() > self.max_smem:
            return f"{self.smem_bytes()} bytes of shared memory, over {self.max_smem}"
        # one group's accumulators, every column's weights, the rest (the template's kGroups)
        if self.columns // 2 + self.rows * self.heads // 4 + 40 > self.math_registers:
            return "more registers than setmaxnreg can give the math warps"
        return None


@lru_cache(maxsize=None)  # (asked on every call of paged_mqa_topk)
def default_paged_variant(heads: int, top_k: int, next_n: int, block_size: int, arch: str = "sm90a") -> PagedVariant | None:
    """The untuned choice for a shape, the valid point that ranks first by: a buffer of at least
    top_k + 1024 (a smaller one compacts every few tiles), at least three stages, the most math
    warpgroups (a decode tile is a small product: more warpgroups in flight hide more of each one's
    latency), a larger buffer still (up to four times top_k: fewer compactions, cheaper merges), more
    stages; at next_n 2 to 4, a gate sampled over half the buffer's keys (where it fits: a part longer
    than its buffer then compacts a few times, not every few tiles, and places fewer candidates; at
    next_n 1 the H200 measured no gain), and its rows merged in parallel by the CTAs of a request's
    last next_n parts (`_m<next_n>`). None where nothing fits."""
    points = [PagedVariant(arch, heads, top_k, next_n, block_size, warps, stages, buffer)
              for warps in (16, 12, 8, 4) for stages in (4, 3, 2)
              for buffer in (4 * top_k, 2 * top_k, top_k + 1024, top_k + 512, top_k + 256)]
    valid = [v for v in points if v.invalid_reason() is None]
    rank = lambda v: (min(v.buffer, top_k + 1024), min(v.stages, 3), v.warps, v.buffer, v.stages)  # noqa: E731
    best = max(valid, key=rank, default=None)
    if best is None or next_n == 1:
        return best
    merged = replace(best, merge_ctas=next_n)
    best = merged if merged.invalid_reason() is None else best
    gated = replace(best, gate_tiles=best.buffer // 2 // best.key_tile)
    return gated if gated.invalid_reason() is None else best
