"""A variant: one point of the kernel's parameter space, as a plain immutable value.

Its name encodes every parameter, is filename-safe, and parses back (`Variant.from_name`), so a
name in a tuned-config table, a cache directory or a log line is the whole description.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property

from .arch import SELECTOR_REGISTERS, wgmma_math_registers

DIM = 128  # fp8 bytes per key and per query head: fixed by the models this serves
SMEM_KEY_STRIDE = DIM + 16  # padded shared-memory row of one key (see the kernel template)
# sel::RadixScratch per list: a 256-bin histogram and five words (prefix, remaining, slot counter,
# entries of the k-th code, slack)
RADIX_SCRATCH_BYTES = 256 * 4 + 5 * 4


@dataclass(frozen=True, order=True)
class Variant:
    mma: str  # scoring core: "mmasync" (portable fp8 mma.sync) or "wgmma" (Hopper: TMA + wgmma, warp-specialised)
    arch: str  # compile target, a key of runtime.arch.ARCHS
    heads: int
    top_k: int
    rows: int  # query rows per block
    key_tile: int  # keys per pipeline stage
    warps: int  # mmasync: all warps; wgmma: the math warps (4 per warpgroup; a producer warpgroup is added)
    stages: int  # key tiles in flight
    buffer: int  # candidate capacity per row: shared memory (streaming), or the row's workspace slab (gate)
    # Selection: 0 = exact streaming top-k in a compacting shared-memory buffer; n > 0 = the sampled
    # gate (wgmma only): up to n key tiles sampled per row block set each row's threshold, candidates go
    # to a slab in the workspace, and blocks the gate cannot serve are redone by the streaming kernel.
    sample_tiles: int = 0
    # Gated only: who selects each block's answers from its slab. 0 = the math warps, after the block's
    # scan; 3 = the producer warpgroup's three spare warps, while the math warps scan the next block
    # (two slabs per CTA; the producer warpgroup keeps SELECTOR_REGISTERS, the math warps get the rest);
    # 7 = those and a selector warpgroup of four more (also at SELECTOR_REGISTERS), for short blocks.
    select_warps: int = 0
    # wgmma only: 0 reads k [keys, 128] and k_scale [keys] laid end to end; n > 0 is the same kernel
    # reading its keys straight from the paged indexer cache of n-token blocks through a block table
    # (runtime/paged_prefill.py), its name the gathered variant's with _pb<n> (an axis the tuner does
    # not search: a paged build times as its gathered twin, whose tuned choice it takes).
    page_block_size: int = 0
    # Gated only: the arithmetic the scan gates in. 32: every key scored exactly in fp32 as it streams.
    # 16: every key gated in fp16 (products accumulated in fp16, a packed fp16 head sum, a rigorous
    # bound of the exact score: runtime/gate16.py), the keys a row may need scored again exactly; the
    # answers are the fp32 gate's, byte for byte. Built for 64 heads in two-row blocks; name _g16.
    gate_bits: int = 32

    _TEMPLATES = {"mmasync": "fused_mqa_topk_mmasync.cu.j2", "wgmma": "fused_mqa_topk_wgmma.cu.j2"}
    _GATE_TEMPLATE = "fused_mqa_topk_gate_wgmma.cu.j2"
    # name <-> fields; the prefix letters keep names readable: mqa_topk_mmasync_sm90a_h32_k2048_r2_t256_w8_s3_b4096,
    # gated variants end in _m<sample_tiles>: mqa_topk_wgmma_sm90a_h32_k2048_r4_t192_w12_s4_b16384_m32, and
    # those with selector warps in _sw<select_warps>: ..._b16384_m32_sw3, paged builds in _pb<page_block_size>,
    # the fp16 gate in _g16
    _PATTERN = re.compile(
        r"^mqa_topk_(?P<mma>[a-z]+)_(?P<arch>sm\d+a?)_h(?P<heads>\d+)_k(?P<top_k>\d+)_r(?P<rows>\d+)"
        r"_t(?P<key_tile>\d+)_w(?P<warps>\d+)_s(?P<stages>\d+)_b(?P<buffer>\d+)(?:_m(?P<sample_tiles>[1-9]\d*))?(?:_sw(?P<select_warps>[1-9]\d*))?"
        r"(?:_pb(?P<page_block_size>[1-9]\d*))?(?:_g(?P<gate_bits>16))?$"
    )

    @cached_property  # (asked on every call of the op: the library is found by it)
    def name(self) -> str:
        gate = f"_m{self.sample_tiles}" if self.gated else ""
        gate += f"_sw{self.select_warps}" if self.select_warps else ""
        paged = f"_pb{self.page_block_size}" if self.page_block_size else ""
        bits = f"_g{self.gate_bits}" if self.gate_bits != 32 else ""
        return (
            f"mqa_topk_{self.mma}_{self.arch}_h{self.heads}_k{self.top_k}_r{self.rows}"
            f"_t{self.key_tile}_w{self.warps}_s{self.stages}_b{self.buffer}{gate}{paged}{bits}"
        )

    @property
    def gated(self) -> bool:
        return self.sample_tiles > 0

    @property
    def kernels(self) -> tuple[str, ...]:
        """The __global__ functions a build holds."""
        return ("fused_mqa_topk_gate_kernel", "fused_mqa_topk_kernel") if self.gated else ("fused_mqa_topk_kernel",)

    @property
    def rescan_variant(self) -> Variant:
        """A gated variant's exact fallback, compiled into the same library: the streaming kernel on the
        same row blocks (same rows), two math warpgroups and the smallest buffer that fits."""
        return replace(self, key_tile=128, warps=8, stages=4, buffer=smallest_wgmma_buffer(self.top_k), sample_tiles=0,
                       select_warps=0, gate_bits=32)

    def paged_build(self, block_size: int) -> Variant:
        """This variant reading its keys straight from a paged cache of block_size-token blocks."""
        if self.mma != "wgmma" or self.gate_bits != 32:
            raise ValueError(f"{self.name}: only the wgmma kernels gated in fp32 read the paged cache")
        return replace(self, page_block_size=check_page_block_size(block_size))

    @classmethod
    def from_name(cls, name: str) -> Variant:
        return parse_name(cls, cls._PATTERN, name)

    def params(self) -> dict:
        return asdict(self)

    @property
    def template(self) -> str:
        return self._GATE_TEMPLATE if self.gated else self._TEMPLATES[self.mma]

    @property
    def threads(self) -> int:
        """Threads of the CTA (wgmma adds a producer warpgroup to the math warps, and seven selector
        warps a selector warpgroup)."""
        other_warpgroups = (1 if self.mma == "wgmma" else 0) + (1 if self.select_warps > 3 else 0)
        return 32 * self.warps + 128 * other_warpgroups

    @property
    def math_threads(self) -> int:
        return 32 * self.warps

    def smem_bytes(self) -> int:
        """Dynamic shared memory the kernel asks for: the template's kSmemBytes (asserted equal: a wrong sum fails the build)."""
        candidates = 0 if self.gated else 2 * self.rows * self.buffer * 4
        select_scratch = RADIX_SCRATCH_BYTES * (self.rows if self.gated else 1)
        if self.gated:  # + sel::BinnedScratch: distance histogram, nine ints and 512 gathered (code, key) a row
            select_scratch += (33 * 32 * 4 + 9 * 4 + 512 * 8) * self.rows
        if self.mma == "wgmma":
            q_ring = 2 * self.rows * self.heads * DIM
            k_ring = self.stages * self.key_tile * (DIM + 4)
            # + per row: each math warp's count and the sample's largest code (gate; a set per slab) or
            # the count (streaming); the Q stages' work items; with selector warps their scratch and
            # the two handed-over items (item, served)
            slabs = 2 if self.select_warps else 1
            state = select_scratch + (4 * (self.warps + 1) * slabs if self.gated else 4) * self.rows + 4 * 2
            if self.select_warps:  # their radix scratch; per slab the item, served flag and gates; a split
                # block's last-part flag, counts (up to 8 parts' segments a row) and bounds (two a row)
                state += RADIX_SCRATCH_BYTES * self.rows + 2 * (2 + self.rows) * 4 + 4 + 4 * self.rows * (8 * self.warps + 2)
            region = 0
            if self.gate_bits == 16:  # the fp16 gate's region and its union lists' counts (templates: kGate16Bytes)
                region = self.gate16_region_bytes(q_ring + k_ring)
                state += 4 * self.warps
            barriers = 8 * (2 * (2 + self.stages) + (2 * slabs if self.select_warps else 0))
            return _round_up(q_ring + k_ring + region + candidates + state, 8) + barriers + 1024
        key_ring = self.stages * self.key_tile * SMEM_KEY_STRIDE
        scale_ring = self.stages * self.key_tile * 4
        state = select_scratch + 8 * self.rows + 4  # theta/count per row, block id
        return key_ring + scale_ring + candidates + _round_up(state, 4)

    def gate16_region_bytes(self, rings: int) -> int:
        """The fp16 gate's shared memory past the rings (which end at `rings`): padding to 1024 bytes, the
        gate's Q tiles (a Q stage each), each math warpgroup's two gathered key tiles (64 keys of 128
        bytes), the key norms' ring, and four gathered chunks' scales and key indices a warpgroup."""
        pad = -rings % 1024
        math_wgs = self.warps // 4
        return pad + 2 * self.rows * self.heads * DIM + math_wgs * 2 * 64 * DIM + self.stages * self.key_tile * 4 + \
            math_wgs * 4 * 64 * 8

    def registers_available(self) -> int:
        """Registers a (math) thread may use: 255 for mmasync; for wgmma what setmaxnreg can give the
        math warpgroups out of the launch allocation (the template's kMathRegisters)."""
        if self.mma != "wgmma":
            return 255
        if self.select_warps:
            return wgmma_math_registers(self.threads, self.math_threads, SELECTOR_REGISTERS)
        return wgmma_math_registers(self.threads, self.math_threads)

    @property
    def slices(self) -> int:
        """wgmma: 64-key slices each math warpgroup scores per tile (two are software-pipelined)."""
        return self.key_tile // (16 * self.warps)

    def registers_estimate(self) -> int:
        """Registers a (math) thread needs, from what stays live."""
        n = self.rows * self.heads  # (row, head) columns
        if self.gated:  # accumulators (a set per slice), weights, the rest
            return n // 2 * self.slices + n // 4 + 16
        if self.mma == "wgmma":  # accumulators, weights, the compaction's staged candidates, the rest
            return n // 2 + n // 4 + 2 * self.buffer // self.math_threads + 40
        return n + n // 4 + n // 2 + 16 + 40  # q fragments, weights, one m16 tile of acc, A, overhead


# Candidate capacities a row may have: shared-memory buffers of the streaming kernels (the gate's
# slabs also take 16384: the variant space, generator.space.AXES, adds it).
BUFFERS = (1024, 1536, 2048, 3072, 4096, 6144, 8192)


def smallest_wgmma_buffer(top_k: int) -> int:
    """The smallest buffer of the streaming wgmma kernel (two math warpgroups, 128-key tiles) for
    top_k: room for top_k + a tile, a multiple of its 256 math threads."""
    return min(b for b in BUFFERS if b >= top_k + 128 and b % 256 == 0)


def check_page_block_size(block_size: int) -> int:
    """block_size, where a paged build can read its cache blocks (in 64-key TMA boxes), else ValueError."""
    if block_size < 64 or block_size % 64:
        raise ValueError(f"block size {block_size}: the paged builds read 64-key pieces of a block")
    return block_size


def parse_name(cls, pattern: re.Pattern, name: str):
    """The `cls` instance (a variant dataclass) whose name `pattern` matches: one named group per
    field, ints converted."""
    m = pattern.match(name)
    if m is None:
        raise ValueError(f"not a {cls.__name__} name: {name!r}")
    values = {k: v for k, v in m.groupdict().items() if v is not None}  # optional groups keep their defaults
    return cls(**{f.name: (values[f.name] if f.type == "str" else int(values[f.name])) for f in fields(cls)
                  if f.name in values})


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m
