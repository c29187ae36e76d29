"""A dense-path variant: the Hopper logits kernel + the top-k-over-logits kernel, as one library.

Name: mqa_dense_sm90a_h32_k2048_r4_g4x1_q2_s4_t512_b8192_rc32 = arch, heads, top_k, rows per
block, math warpgroups x key slices per warpgroup (64 keys each), Q stages, K stages, top-k threads,
top-k candidate buffer, and the logits each thread of the short-row top-k holds in registers (it
serves chunks whose rows see at most 512 times that, in the smallest CTA, 128, 256 or 512 threads,
that holds their longest row; windows of at most 1,024 keys at top-512 take a 128-thread CTA of 8
logits a thread). With two or more slices a warpgroup keeps one slice's products in flight
while it reduces another's (software pipelining across the tensor cores and the epilogue).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from functools import cached_property, lru_cache

from .arch import ARCHS, wgmma_math_registers
from .variant import RADIX_SCRATCH_BYTES, check_page_block_size, parse_name

DIM = 128
COARSE_BINS = 2048
CLUSTER_BITMAP_WORDS = 4096  # the cluster top-k's answer bitmap (the template's kClusterWords)
MAX_CLUSTER_CTAS = 16  # the cluster top-k's largest cluster (the template's kMaxClusterCtas)


@dataclass(frozen=True, order=True)
class DenseVariant:
    arch: str
    heads: int
    top_k: int
    rows: int  # query rows per block: rows * heads is the wgmma N
    math_wgs: int
    slices: int  # 64-key wgmma slices per warpgroup and tile, one accumulator set each
    q_stages: int
    kv_stages: int
    topk_threads: int
    topk_buffer: int
    reg_cached: int  # logits each thread of the short-row top-k holds: rows of up to 256 x reg_cached keys
    # 0: keys from k [keys, 128] and k_scale laid end to end; n > 0: the same kernels reading them from
    # the paged cache of n-token blocks (Variant.page_block_size's twin), the name ending _pb<n>
    page_block_size: int = 0

    template = "dense_mqa_topk_sm90.cu.j2"
    # The short-row top-k's CTAs, as the template renders them (the one source of both).
    short_topk_threads = property(lambda self: SHORT_TOPK_THREADS)
    short_topk_small_cta = property(lambda self: SHORT_TOPK_SMALL_CTA)

    @property
    def kernels(self) -> tuple[str, ...]:
        """The __global__ functions a build holds (the short-row top-k once per CTA: as its mangled
        names read in ptxas's report)."""
        threads, held = SHORT_TOPK_SMALL_CTA
        small = (f"dense_short_topk_kernelILi{threads}ELi{held}E",) if threads * held > self.top_k else ()
        paged = ("dense_cluster_topk_kernel", "decode_layout_kernel") if self.page_block_size else ()
        return ("dense_logits_kernel", "dense_topk_kernel", *paged,
                *(f"dense_short_topk_kernelILi{t}ELi{self.reg_cached}E" for t in SHORT_TOPK_THREADS), *small)
    _PATTERN = re.compile(
        r"^mqa_dense_(?P<arch>sm\d+a?)_h(?P<heads>\d+)_k(?P<top_k>\d+)_r(?P<rows>\d+)_g(?P<math_wgs>\d+)x(?P<slices>\d+)"
        r"_q(?P<q_stages>\d+)_s(?P<kv_stages>\d+)_t(?P<topk_threads>\d+)_b(?P<topk_buffer>\d+)"
        r"_rc(?P<reg_cached>\d+)(?:_pb(?P<page_block_size>[1-9]\d*))?$"
    )

    @cached_property  # (asked on every call of the op: the library is found by it)
    def name(self) -> str:
        return (f"mqa_dense_{self.arch}_h{self.heads}_k{self.top_k}_r{self.rows}_g{self.math_wgs}x{self.slices}_q{self.q_stages}"
                f"_s{self.kv_stages}_t{self.topk_threads}_b{self.topk_buffer}_rc{self.reg_cached}"
                + (f"_pb{self.page_block_size}" if self.page_block_size else ""))

    def paged_build(self, block_size: int) -> DenseVariant:
        """These kernels reading their keys straight from a paged cache of block_size-token blocks."""
        return replace(self, page_block_size=check_page_block_size(block_size))

    def decode_build(self, block_size: int, next_n: int) -> DenseVariant:
        """The paged build a decode step of next_n rows a request runs: its rows per block cut to next_n,
        rounded up to a multiple of 64 / heads (the wgmma's N is a multiple of 64). A block's rows share
        keys only within a request, so a block of more rows than next_n scores every key of its requests
        for each of its rows, the other requests' products thrown away: at next_n 1 half the logits
        kernel's products and epilogue at 64 heads, three quarters at 32."""
        step = 64 // self.heads
        return replace(self, rows=-(-min(self.rows, next_n) // step) * step).paged_build(block_size)

    @classmethod
    def from_name(cls, name: str) -> DenseVariant:
        return parse_name(cls, cls._PATTERN, name)

    def params(self) -> dict:
        return asdict(self)

    @property
    def n(self) -> int:
        return self.rows * self.heads

    @property
    def max_smem(self) -> int:
        return ARCHS[self.arch].max_smem_per_block

    @property
    def key_tile(self) -> int:
        return 64 * self.math_wgs * self.slices

    @property
    def math_registers(self) -> int:
        """Registers a math thread gets after setmaxnreg (the template's kMathRegisters): the launch
        allocation (threads x 65536/threads, rounded down to 8) minus what the producer keeps."""
        return wgmma_math_registers(128 * (self.math_wgs + 1), 128 * self.math_wgs)

    def logits_smem_bytes(self) -> int:
        tiles = self.q_stages * self.n * DIM + self.kv_stages * (self.key_tile * DIM + self.key_tile * 4)
        return tiles + 8 * 2 * (self.q_stages + self.kv_stages) + 1024

    def topk_smem_bytes(self) -> int:
        return RADIX_SCRATCH_BYTES + COARSE_BINS * 4 + 5 * 4 + self.topk_buffer * 8

    def cluster_gate_smem_bytes(self) -> int:
        """The paged builds' cluster top-k, its gate route (the template's ClusterTopKShared): its answer
        bitmap, its buffer (twice the one-CTA kernel's), three histograms and the cluster's sums, the
        select scratch, three words a warp, eight more."""
        return CLUSTER_BITMAP_WORDS * 4 + 2 * self.topk_buffer * 8 + 4 * 256 * 4 + RADIX_SCRATCH_BYTES + 12 * (self.topk_threads // 32) + 8 * 4

    @property
    def cluster_resident_keys(self) -> int:
        """The longest slice of a row the cluster top-k holds in shared memory (its resident route): four
        times the one-CTA kernel's buffer, at most 32,768 keys (128 KiB of logits)."""
        return min(4 * self.topk_buffer, 32768)

    def cluster_resident_smem_bytes(self) -> int:
        """The resident route's shared memory (the template's ResidentShared): the slice's fp32 logits and
        its answer bitmap, rank 0's buffer for the k-th's bin (half the one-CTA kernel's, codes and
        keys), this CTA's and the cluster's coarse bins, the select scratch, a word a warp, two a cluster CTA
        and 6 more."""
        keys = self.cluster_resident_keys
        return (keys * 4 + keys // 8 + self.topk_buffer // 2 * 8 + 2 * COARSE_BINS * 4 + RADIX_SCRATCH_BYTES
                + 4 * (self.topk_threads // 32) + (2 * MAX_CLUSTER_CTAS + 6) * 4)

    def cluster_topk_smem_bytes(self) -> int:
        """The cluster top-k's launch: the larger of its two routes' shared memory (they share it)."""
        return max(self.cluster_gate_smem_bytes(), self.cluster_resident_smem_bytes())

    @property
    def short_row_keys(self) -> int:
        """The longest row the short-row top-k kernel holds in registers (in its largest CTA)."""
        return SHORT_TOPK_THREADS[-1] * self.reg_cached


def dense_rejection_reason(v: DenseVariant) -> str | None:
    if v.arch != "sm90a":
        return f"the dense kernels use wgmma and TMA: sm90a only, not {v.arch}"
    if v.heads not in (32, 64) or v.top_k not in (512, 1024, 2048):
        return f"heads={v.heads}, top_k={v.top_k} unsupported"
    if v.n % 64 or v.n > 256:
        return f"rows * heads = {v.n}: the wgmma N must be a multiple of 64, at most 256"
    if not 2 <= v.math_wgs <= 4 or not 1 <= v.slices <= 4 or v.key_tile > 256:
        return (f"{v.math_wgs} math warpgroups x {v.slices} slices: 2 to 4 warpgroups (with one, ptxas gives "
                "fewer launch registers than setmaxnreg assumes), 64 keys a slice, at most 256 keys a tile (one TMA box)")
    needed = v.slices * v.n // 2 + v.n // 4 + 16  # accumulators, weights, addresses (ptxas: 96 for N = 128, 1 slice)
    if needed > v.math_registers:
        return f"about {needed} registers a math thread, {v.math_registers} available with {v.math_wgs} warpgroups"
    limit = ARCHS[v.arch].max_smem_per_block
    if v.logits_smem_bytes() > limit:
        return f"logits kernel needs {v.logits_smem_bytes()} bytes of shared memory > {limit}"
    if v.topk_smem_bytes() > limit:
        return f"top-k kernel needs {v.topk_smem_bytes()} bytes of shared memory > {limit}"
    if v.page_block_size and v.cluster_topk_smem_bytes() > limit:
        return f"cluster top-k kernel needs {v.cluster_topk_smem_bytes()} bytes of shared memory > {limit}"
    if COARSE_BINS % v.topk_threads or v.topk_threads % 32 or v.topk_threads > 1024:
        return f"top-k threads {v.topk_threads} must be a multiple of 32 dividing {COARSE_BINS}, at most 1024"
    if v.topk_buffer % v.topk_threads:
        return f"top-k buffer {v.topk_buffer} is not a multiple of the {v.topk_threads} threads that select over it"
    if v.reg_cached not in (16, 32):
        return f"the short-row top-k holds 16 or 32 logits a thread (64 registers), not {v.reg_cached}"
    return None


# The short-row top-k's CTAs (rendered into the template as kShortThreads, and its small CTA's threads
# and kSmallHeld): the smallest that holds a chunk's window (its longest row) serves it; windows the
# small CTA holds (fewer logits a thread than top_k keys) take it before them.
SHORT_TOPK_THREADS = (128, 256, 512)
SHORT_TOPK_SMALL_CTA = (128, 8)

# Rows that see at most this many keys take the top-k configuration for short rows (below).
SHORT_ROW_KEYS = 32_768


@lru_cache(maxsize=None)  # (asked on every call of the dense path)
def default_dense_variant(heads: int, top_k: int, arch: str = "sm90a", short_rows: bool = False) -> DenseVariant:
    """The dense variant for (heads, top_k); short_rows: for chunks whose rows see at most
    SHORT_ROW_KEYS keys. The two differ in their top-k kernel only."""
    # 2 warpgroups x 2 pipelined slices: faster than 4 x 1 at H = 32, even at H = 64, and 4 x 1 spills
    # at H = 32 (experiment log, "2026-11-29: logits kernel's time"). Top-k: 256 threads over 4,096
    # candidates (four CTAs an SM) are faster on chunks of many short rows, 512 over 8,192 on a few
    # long rows, which one CTA streams at its threads' rate (experiment log, "2026-12-01: the chunks
    # a server sends").
    threads, buffer = (256, 4096) if short_rows else (512, 8192)
    return DenseVariant(arch=arch, heads=heads, top_k=top_k, rows=128 // heads, math_wgs=2, slices=2, q_stages=2, kv_stages=4,
                        topk_threads=threads, topk_buffer=buffer, reg_cached=32)
