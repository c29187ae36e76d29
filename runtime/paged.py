"""Paged decode: each decode row's top-k keys read from the paged indexer cache (SPEC section 7).

    idx = paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k)

q e4m3 [B, next_n, H, 128]; kv_cache uint8 [num_blocks, block_size, 1, 132] in DeepGEMM's paged
layout (each block's bytes: block_size x 128 fp8 values, then block_size fp32 scales: the [block_size,
132] shape is a byte count, not a per-token record); weights f32 [B * next_n, H]; context_lens i32 [B];
block_table i32 [B, max_blocks]. Row b * next_n + j sees the request's tokens [0, context_lens[b] -
next_n + j + 1); the answer is int32 [B * next_n, top_k] token positions in ascending order, -1 after
the last. Scores, the correctness rule and the tie-break are the prefill contract's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import torch

from .arch import Arch, arch_for_capability
from .contract import DIM, _capturing, _tensor, check_inputs, check_queries, check_top_k
from .decode_table import DecodeEntry, DecodeTable, decode_table
from .dense import run_dense_paged
from .dense_kernels import DENSE_ENV, dense_variant_for
from .dense_variant import DenseVariant
from .environment import getenv
from .fused import AUTO as FUSED_AUTO
from .fused import run_checked
from .gpu import device_identity
from .loader import aligned16, allocate, answer_buffer, launch_on, load, load_or_warn
from .page_layout import PageLayout, spare_blocks
from .paged_variant import (
    CACHE_BYTES_PER_KEY,
    SUPPORTED_NEXT_N,
    PagedVariant,
    default_paged_variant,
)
from .reference import reference_mqa_topk
from .table import recently_looked

AUTO = "auto"
GATHERED = "gathered"  # the fallback: the request's keys gathered out of the cache, then fused_mqa_topk
DENSE = "dense"  # our dense kernels' paged build: a logits kernel through the block tables, then a top-k
REFERENCE = "reference"
# Each part of a request the kernel scans covers at least this many tokens of the block table's
# capacity. A short context alone in a step is cut too (one CTA's scan of it would set the step's
# time); but each part's list (up to top_k entries) is merged by one CTA, so parts of fewer tokens than
# a list holds would add merging, not take scanning away (BENCHMARKS.md, "Decode from the paged cache").
MIN_PART_KEYS = 2048
# A part's scan shrinks as 1/parts while the merge of the parts' lists grows as parts x top_k, so the
# step is quickest near parts ~ sqrt(capacity / top_k): this many parts at 128K tokens and top-2048
# (fitted to the graph-replayed times of one to 16 requests of 8K-128K tokens, 64 heads, next_n 1-2:
# BENCHMARKS.md, "Decode from the paged cache").
PARTS_AT_128K_TOP_2048 = 16


class PagedProblem(NamedTuple):
    batch: int
    next_n: int
    heads: int
    top_k: int
    num_blocks: int
    block_size: int
    max_blocks: int
    device: torch.device

    @property
    def rows(self) -> int:
        return self.batch * self.next_n

    @property
    def capacity(self) -> int:
        """The most tokens a request's block-table row can hold."""
        return self.max_blocks * self.block_size


def check_paged_inputs(q, kv_cache, weights, context_lens, block_table, top_k, *, check_values: bool = True) -> PagedProblem:
    """Raises TypeError/ValueError naming the argument that breaks the paged contract; returns the shape.
    check_values (a readback, skipped while a CUDA graph is captured) also checks 0 <= context_lens[b]
    <= max_blocks * block_size and that every block a request's context uses is inside the cache."""
    q = check_queries(q, 4)
    num_blocks, block_size = check_cache(kv_cache)
    weights = _tensor("weights", weights, torch.float32, 2)
    context_lens = _tensor("context_lens", context_lens, torch.int32, 1)
    block_table = _tensor("block_table", block_table, torch.int32, 2)
    check_top_k(top_k)
    batch, next_n, heads, _ = q.shape
    if next_n not in SUPPORTED_NEXT_N:
        raise ValueError(f"q: next_n = {next_n} (dimension 1) is not supported; supported: {SUPPORTED_NEXT_N}")
    if tuple(weights.shape) != (batch * next_n, heads):
        raise ValueError(f"weights: expected shape [{batch * next_n}, {heads}] (B * next_n, H), got {tuple(weights.shape)}")
    if tuple(context_lens.shape) != (batch,):
        raise ValueError(f"context_lens: expected shape [{batch}] (one per request), got {tuple(context_lens.shape)}")
    if block_table.shape[0] != batch or block_table.shape[1] < 1:
        raise ValueError(f"block_table: expected shape [{batch}, max_blocks >= 1], got {tuple(block_table.shape)}")
    for name, x in (("kv_cache", kv_cache), ("weights", weights), ("context_lens", context_lens),
                    ("block_table", block_table)):
        if x.device != q.device:
            raise ValueError(f"{name}: on {x.device}, but q is on {q.device}; all inputs must share one device")
    problem = PagedProblem(batch, next_n, heads, top_k, num_blocks, block_size, block_table.shape[1], q.device)
    if check_values and batch > 0 and not _capturing(q.device):
        _check_paged_values(problem, context_lens, block_table)
    return problem


def check_cache(kv_cache) -> tuple[int, int]:
    """The paged cache's checks (a uint8 [num_blocks >= 1, block_size, 1, 132] tensor); returns
    (num_blocks, block_size)."""
    kv_cache = _tensor("kv_cache", kv_cache, torch.uint8, 4)
    num_blocks, block_size, one, record = kv_cache.shape
    if one != 1 or record != CACHE_BYTES_PER_KEY or block_size < 1:
        raise ValueError(f"kv_cache: expected shape [num_blocks, block_size, 1, {CACHE_BYTES_PER_KEY}], "
                         f"got {tuple(kv_cache.shape)}")
    if num_blocks < 1:
        raise ValueError("kv_cache: holds no blocks")
    return num_blocks, block_size


def _check_paged_values(problem: PagedProblem, context_lens: torch.Tensor, block_table: torch.Tensor) -> None:
    negative, too_long, bad_ids = block_table_flags(context_lens, block_table, problem.num_blocks, problem.block_size)
    flags = torch.stack([negative, too_long, bad_ids.any()]).tolist()
    if flags[0]:
        raise ValueError("context_lens: a length is negative")
    if flags[1]:
        raise ValueError(f"context_lens: a context is longer than its block-table row holds "
                         f"({problem.max_blocks} blocks x {problem.block_size} tokens = {problem.capacity})")
    if flags[2]:
        b, slot = (int(i) for i in bad_ids.nonzero()[0])
        raise ValueError(f"block_table: request {b}'s block {slot} is {int(block_table[b, slot])}, outside the cache's "
                         f"{problem.num_blocks} blocks")


def block_table_flags(lens: torch.Tensor, block_table: torch.Tensor, num_blocks: int, block_size: int):
    """On the device, for requests of `lens` tokens read through `block_table`: (a length is negative,
    a length is past its row's capacity, bool [B, max_blocks]: the slots a request uses whose block
    id is outside the cache)."""
    lens = lens.long()
    max_blocks = block_table.shape[1]
    used = torch.arange(max_blocks, device=lens.device) * block_size < lens[:, None]
    ids = block_table.long()
    return (lens < 0).any(), (lens > max_blocks * block_size).any(), used & ((ids < 0) | (ids >= num_blocks))


def decode_ranges(starts: torch.Tensor, lens: torch.Tensor, next_n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode rows' key ranges (int64 [B * next_n]) where request b's tokens begin at starts[b]:
    row b * next_n + j sees the first lens[b] - next_n + j + 1 of them (none where that is below 1)."""
    j = torch.arange(next_n, device=lens.device).repeat(lens.numel())
    visible = (lens.long().repeat_interleave(next_n) - next_n + j + 1).clamp(min=0)
    start = starts.long().repeat_interleave(next_n)
    return start, start + visible


def gather_requests(kv_cache, lens: torch.Tensor, block_table: torch.Tensor):
    """The requests' first lens[b] tokens out of the cache, laid end to end, as vLLM's
    cp_gather_indexer_k_quant_cache writes them: (k_fp8 [sum of lens, 128], k_scale [...], each
    request's first key there (int64 [B])). Reads the total back (a synchronisation)."""
    num_blocks, block_size = kv_cache.shape[:2]
    blocks = kv_cache.view(num_blocks, block_size * CACHE_BYTES_PER_KEY)
    values = blocks[:, : block_size * DIM].view(num_blocks, block_size, DIM)
    scales = blocks[:, block_size * DIM:].contiguous().view(torch.float32)  # [num_blocks, block_size]
    device = kv_cache.device
    lens = lens.clamp(0, block_table.shape[1] * block_size).long()
    total = int(lens.sum())  # (the readback)
    offsets = lens.cumsum(0) - lens
    request = torch.repeat_interleave(torch.arange(lens.numel(), device=device), lens, output_size=total)
    positions = torch.arange(total, device=device) - offsets[request]  # each token's position in its request
    ids = block_table.long()[request, positions // block_size].clamp(0, num_blocks - 1)
    within = positions % block_size
    return values[ids, within].view(torch.float8_e4m3fn).contiguous(), scales[ids, within].contiguous(), offsets


def gather_paged(kv_cache, context_lens, block_table, next_n: int):
    """The requests' keys out of the cache, laid end to end, and the prefill ranges of their rows:
    (k_fp8 [sum of contexts, 128], k_scale [...], ks, ke [B * next_n]). Reads the lengths back (a
    synchronisation): the fallback and the reference, not a decode step's path."""
    k_fp8, k_scale, starts = gather_requests(kv_cache, context_lens, block_table)
    ks, ke = decode_ranges(starts, context_lens.clamp(0, block_table.shape[1] * kv_cache.shape[1]), next_n)
    return k_fp8, k_scale, ks.int(), ke.int()


def reference_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k: int) -> torch.Tensor:
    """The paged contract computed the slow exact way (the tests' oracle), on any device."""
    problem = check_paged_inputs(q, kv_cache, weights, context_lens, block_table, top_k)
    k_fp8, k_scale, ks, ke = gather_paged(kv_cache, context_lens, block_table, problem.next_n)
    flat_q = q.reshape(problem.rows, problem.heads, DIM)
    return reference_mqa_topk(flat_q, (k_fp8, k_scale), weights, ks, ke, top_k)


def gathered_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k: int) -> torch.Tensor:
    """The paged contract by gathering every request's keys (gather_paged) and calling
    fused_mqa_topk on them: what serves where the paged kernel cannot (and a server's path today)."""
    next_n, heads = q.shape[1], q.shape[2]
    k_fp8, k_scale, ks, ke = gather_paged(kv_cache, context_lens, block_table, next_n)
    flat_q = q.reshape(-1, heads, DIM)
    if k_fp8.shape[0] == 0:
        return torch.full((flat_q.shape[0], top_k), -1, dtype=torch.int32, device=q.device)
    longest = int((ke - ks).max()) if ks.numel() else 0
    problem = check_inputs(flat_q, (k_fp8, k_scale), weights, ks, ke, top_k, check_values=False,
                           max_visible_keys=longest)
    return run_checked(problem, flat_q, k_fp8, k_scale, weights, ks, ke, FUSED_AUTO)


def decode_layout(context_lens, block_table, next_n: int, block_size: int, num_blocks: int) -> PageLayout:
    """A decode step as a chunk the prefill kernels' paged builds read (runtime.page_layout): row
    b * next_n + j sees its request's first context_lens[b] - next_n + j + 1 tokens. Request b is laid
    out from key b x the block table's capacity, so the layout's blocks are the block table's rows end
    to end (and a tile's worth of block 0): seven small kernels on the device, where page_layout's
    packing of requests end to end takes over thirty, each a few microseconds of a small step. The
    key space is the same size: page_layout's bound is every row full."""
    batch, max_blocks = block_table.shape
    capacity = max_blocks * block_size
    pages = torch.nn.functional.pad(block_table.reshape(-1), (0, spare_blocks(block_size))).clamp_(0, num_blocks - 1).int()
    make = _decode_rows if _capturing(block_table.device) else _kept_decode_rows
    first, lag = make(batch, next_n, capacity, block_table.device)
    lens = context_lens.clamp(0, capacity).repeat_interleave(next_n, output_size=batch * next_n)
    return PageLayout(pages, first, first + (lens + lag).clamp_(min=0), batch * capacity, block_size)


def check_layout(layout: PageLayout, problem: PagedProblem) -> None:
    """A layout given to a call must be decode_layout's of this step's shapes (the rows, the block
    table's width, the block size): one made from another block table (wider, or cut to another
    length) would have the kernels read other keys. Shapes only: no readback."""
    made_for = (layout.ks.numel(), layout.keys, layout.block_size)
    if made_for != (problem.rows, problem.batch * problem.capacity, problem.block_size):
        raise ValueError(f"layout: made for {made_for[0]} rows over {made_for[1]} keys at block size {made_for[2]}; "
                         f"this step has {problem.rows} rows over a block table of {problem.max_blocks} blocks of "
                         f"{problem.block_size} tokens a request: make it with runtime.decode_layout from the block "
                         "table this call is given")


def _decode_rows(batch: int, next_n: int, capacity: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Of each decode row: its request's first key in decode_layout (int32 [B * next_n]), and j -
    next_n + 1 (int32), what its visible tokens lack of the context. Fixed by the shapes, so made once;
    not kept when made inside a CUDA graph's capture (its kernels run only at replay)."""
    row = torch.arange(batch * next_n, device=device, dtype=torch.int32)
    return row // next_n * capacity, row % next_n - next_n + 1


_kept_decode_rows = lru_cache(maxsize=64)(_decode_rows)


def dense_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k: int,
                         out: torch.Tensor | None = None, layout: PageLayout | None = None,
                         build: DenseVariant | None = None) -> torch.Tensor:
    """The paged contract by our dense kernels' paged build (Hopper, block sizes a multiple of 64):
    the serving path's shape, a logits kernel spread over the SMs then a top-k kernel, exact and
    reading the cache through the block tables. No readback (capturable); its fp32 logits take
    B x next_n x the block table's capacity x 4 bytes, in pieces under the dense path's budget.
    `layout`: the step's decode_layout, made once a step for every indexer layer (else made here).
    `build`: dense_paged_build's answer, where the caller has it."""
    batch, next_n, heads = q.shape[:3]
    num_blocks, block_size = kv_cache.shape[:2]
    capacity = block_table.shape[1] * block_size
    build = build or dense_paged_build(q.device, heads, top_k, capacity, block_size, next_n)
    if build is None:
        raise ValueError("the dense paged path runs our Hopper dense kernels, at block sizes that are multiples of 64")
    if layout is None:
        layout = launched_decode_layout(build, context_lens, block_table, next_n, num_blocks)
    return run_dense_paged(build, q.reshape(batch * next_n, heads, DIM), kv_cache, weights, layout, top_k, capacity,
                           out=out)


def launched_decode_layout(build: DenseVariant, context_lens, block_table, next_n: int, num_blocks: int) -> PageLayout:
    """decode_layout's PageLayout made by one launch of the paged build's layout kernel (the torch ops
    take seven: about 17 us of a small step in a graph), on the current stream: what a call given no
    layout makes. Capturable."""
    batch, max_blocks = block_table.shape
    block_size, spare = build.page_block_size, spare_blocks(build.page_block_size)
    device = block_table.device
    pages = torch.empty(batch * max_blocks + spare, dtype=torch.int32, device=device)
    ks = torch.empty(batch * next_n, dtype=torch.int32, device=device)
    ke = torch.empty_like(ks)
    context, stream = launch_on(device)
    with context:
        load(build).decode_layout(context_lens.contiguous(), block_table.contiguous(), next_n, num_blocks, spare,
                                  pages.data_ptr(), ks.data_ptr(), ke.data_ptr(), stream)
    return PageLayout(pages, ks, ke, batch * max_blocks * block_size, block_size)


# (kept: a new DenseVariant a call would compute its name again, which finding its library asks)
_decode_build = lru_cache(maxsize=64)(DenseVariant.decode_build)


def dense_paged_build(device: torch.device, heads: int, top_k: int, capacity: int, block_size: int,
                      next_n: int) -> DenseVariant | None:
    """The dense kernels' paged build dense_paged_mqa_topk runs for a decode step of next_n rows a
    request whose block-table rows hold `capacity` tokens (DenseVariant.decode_build), or None where
    there is none (not Hopper, a block size off 64)."""
    variant = dense_variant_for(device, heads, top_k, capacity)
    return _decode_build(variant, block_size, next_n) if variant is not None and block_size % 64 == 0 else None


class DecodeRoute(NamedTuple):
    """What the GPU's decode table says of a step: asked on every automatic call, worded (why) only
    for explain_paged."""

    table: DecodeTable
    entry: DecodeEntry | None  # the nearest timed step, or None
    planned: bool  # a layout is given
    no_dense: bool = False  # the table chose the dense path, and no dense kernels serve this device

    def why(self) -> str:
        if self.entry is None:
            return f"no decode table entry for these heads, top-k and next_n ({self.table.why})"
        e = self.entry
        dense = e.dense_planned_ms if self.planned else e.dense_ms
        return (f"the nearest entry of {self.table.path.name} (B {e.batch} x {e.context} tokens): paged kernel "
                f"{e.kernel_ms * 1e3:.1f} us, dense {dense * 1e3:.1f} us" + (" with the layout given" if self.planned else "")
                + ("; but no dense kernels serve this device" if self.no_dense else "")
                + (f" ({self.table.why})" if self.table.borrowed else ""))


def _decode_route(problem: PagedProblem, planned: bool) -> tuple[DenseVariant | None, DecodeRoute]:
    """(the dense path's build, the table's say) where the GPU's decode table says the dense path is
    faster for the step's nearest entry, else (None, its say)."""
    table = decode_table(device_identity(_index(problem.device)))
    entry = table.nearest(problem.heads, problem.top_k, problem.next_n, problem.batch, problem.capacity)
    if entry is None or entry.use(planned) == "kernel":
        return None, DecodeRoute(table, entry, planned)
    variant = dense_paged_build(problem.device, problem.heads, problem.top_k, problem.capacity, problem.block_size,
                                problem.next_n)
    return variant, DecodeRoute(table, entry, planned, variant is None)


def _auto_route(problem: PagedProblem, planned: bool) -> tuple[DenseVariant | None, PagedVariant | None]:
    """Automatic dispatch's choice for a step: (the dense path's build, the paged kernel's variant) where
    the decode table says the dense path is faster, else (None, the paged kernel's variant or None).
    Every eager call asks, and the asking (the decode table, the dense build, the paged variant) was
    a tenth or more of a small step's host time, so the answer is kept per step shape and layout as the
    table files are (runtime.table.recently_looked: RECHECK_S, and at once where the variables the
    tables and the dense kernels follow change)."""
    def look() -> tuple[DenseVariant | None, PagedVariant | None]:
        chosen = paged_variant_for(problem)
        return (_decode_route(problem, planned)[0] if chosen is not None else None), chosen

    return recently_looked(("paged route", problem, planned, getenv(DENSE_ENV)), look)


def paged_variant_for(problem: PagedProblem) -> PagedVariant | None:
    """The paged kernel for this shape on this device, or None where none serves (no_paged_kernel
    says why)."""
    return _paged_choice(problem)[0]


def no_paged_kernel(problem: PagedProblem) -> str | None:
    """Why no paged kernel serves this shape on this device (then the gathered path does), or None."""
    return _paged_choice(problem)[1]


def _paged_choice(problem: PagedProblem) -> tuple[PagedVariant | None, str | None]:
    """(the paged kernel's variant, None), or (None, why none serves)."""
    if problem.device.type != "cuda":
        return None, f"the tensors are on {problem.device}: the paged kernel runs on CUDA devices"
    if problem.block_size % 64:
        return None, f"block size {problem.block_size}: the paged kernel reads 64-key pieces of a block"
    arch, _ = _device_facts(_index(problem.device))
    if arch is None or "wgmma" not in arch.mma_kinds:
        name = torch.cuda.get_device_name(problem.device)
        return None, f"{name} is not Hopper (sm_90): the paged kernel is a wgmma kernel"
    variant = default_paged_variant(problem.heads, problem.top_k, problem.next_n, problem.block_size, arch.name)
    return (variant, None) if variant is not None else (None, "no variant of the paged kernel fits this shape")


def parts_for(batch: int, capacity: int, top_k: int, device: torch.device) -> int:
    """parts_per_request on `device` (its SM count): how a launch over `batch` requests whose block-table
    rows hold `capacity` tokens cuts each request's keys."""
    return parts_per_request(batch, capacity, top_k, _device_facts(_index(device))[1])


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@dataclass(frozen=True)
class PagedDecision:
    """What paged_mqa_topk does with a call, and why (explain_paged returns it)."""

    variant: PagedVariant | None  # None: the gathered path (or the dense path, where `dense` is set)
    why: str
    parts: int = 1  # how many parts each request's keys are cut into
    workspace_bytes: int = 0  # the launch's workspace (where the library is loaded)
    dense: DenseVariant | None = None  # the dense path's build, where the decode table chose it

    @property
    def path(self) -> str:
        return "dense" if self.dense is not None else "gathered" if self.variant is None else "paged kernel"

    def __str__(self) -> str:
        chosen = self.dense or self.variant
        lines = [f"path: {self.path}" + (f" ({chosen.name})" if chosen else ""), f"why: {self.why}"]
        if self.variant is not None and self.dense is None:
            lines.append(f"parts per request: {self.parts}" +
                         (f"; workspace {self.workspace_bytes / 2**20:.1f} MiB" if self.workspace_bytes else ""))
        return "\n".join(lines)


def explain_paged(q, kv_cache, weights, context_lens, block_table, top_k: int, *, validate: bool = False,
                  layout: PageLayout | None = None) -> PagedDecision:
    """What paged_mqa_topk would do with these arguments and why: the dense path and the decode
    table's times that chose it, or the paged kernel's variant and its split, or the gathered path
    and the reason. Checks shapes and dtypes (and with validate, the values); launches nothing and
    compiles nothing."""
    from .library_cache import find_library

    problem = check_paged_inputs(q, kv_cache, weights, context_lens, block_table, top_k, check_values=validate)
    variant, reason = _paged_choice(problem)
    if variant is None:
        return PagedDecision(None, reason)
    dense, route = _decode_route(problem, layout is not None)
    timed = route.why()
    if dense is not None:
        return PagedDecision(None, f"faster by the decode table: {timed}", dense=dense)
    parts = parts_for(problem.batch, problem.capacity, problem.top_k, problem.device)
    library = find_library(variant)
    default = f"the untuned default for these heads, top-k, next_n and block size; {timed}"
    if library is None:
        why = f"{default}; no library is built yet: the first call compiles it (or, without nvcc or with " \
              "FUSED_MQA_TOPK_NO_COMPILE, takes the gathered path)"
        return PagedDecision(variant, why, parts)
    workspace = load(variant).workspace_bytes(problem.batch, parts)
    return PagedDecision(variant, f"{default} ({library})", parts, workspace)


@lru_cache(maxsize=64)
def _device_facts(index: int) -> tuple[Arch | None, int]:
    """(the arch its kernels are built for, its SM count) of CUDA device `index`, asked once."""
    major, minor = torch.cuda.get_device_capability(index)
    return arch_for_capability(major, minor), torch.cuda.get_device_properties(index).multi_processor_count


@lru_cache(maxsize=1024)
def parts_per_request(batch: int, capacity: int, top_k: int, sms: int, at_128k: int = PARTS_AT_128K_TOP_2048) -> int:
    """How many parts a request's keys are cut into (a fixed choice from the shapes: the lengths stay on
    the device). Parts of equal requests take equal time, so a launch lasts ceil(batch x parts / sms)
    parts' times: the fewest parts that come within 10% of its minimum, each at least MIN_PART_KEYS
    tokens of the block table's capacity, and no more than the merge's balance allows (`at_128k` parts
    at 128K tokens and top-2048, scaled as sqrt(capacity / top_k); tools/paged_split_fit.py fits it)."""
    balance = max(1, round(at_128k * math.sqrt(capacity / 131072 * 2048 / top_k)))
    most = max(1, min(capacity // MIN_PART_KEYS, 4 * sms, balance))
    span = {p: math.ceil(batch * p / sms) / p for p in range(1, most + 1)}  # in a whole request's scans
    best = min(span.values())
    return min(p for p, s in span.items() if s <= 1.1 * best)  # (fewer parts where more gain under 10%)


def launch_paged(variant: PagedVariant, q, kv_cache, weights, context_lens, block_table, top_k: int,
                 out: torch.Tensor | None = None, parts: int | None = None) -> torch.Tensor:
    """Runs the paged kernel `variant` on the current stream (into `out` if given); inputs must
    satisfy the contract's forms. No readback: capturable in a CUDA graph."""
    batch, next_n, heads = q.shape[:3]
    if (variant.heads, variant.top_k, variant.next_n, variant.block_size) != (heads, top_k, next_n, kv_cache.shape[1]):
        raise ValueError(f"{variant.name} serves heads={variant.heads}, top_k={variant.top_k}, next_n={variant.next_n}, "
                         f"block_size={variant.block_size}; got {heads}, {top_k}, {next_n}, {kv_cache.shape[1]}")
    rows = batch * next_n
    out = answer_buffer(out, rows, top_k, q.device)
    if batch == 0:
        return out
    lib = load(variant)
    if parts is None:
        parts = parts_for(batch, block_table.shape[1] * kv_cache.shape[1], top_k, q.device)
    q, kv_cache = aligned16(q), aligned16(kv_cache)
    context, stream = launch_on(q.device)
    with context:
        workspace = allocate(lib.workspace_bytes(batch, parts), q.device, f"{variant.name}'s workspace")
        lib.launch(q.data_ptr(), kv_cache.data_ptr(), weights.data_ptr(), context_lens.data_ptr(),
                   block_table.data_ptr(), out.data_ptr(), workspace.data_ptr(), batch, block_table.shape[1],
                   kv_cache.shape[0], parts, stream)
    return out



def paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k: int, *,
                   variant: PagedVariant | str | None = None, validate: bool = True,
                   out: torch.Tensor | None = None, layout: PageLayout | None = None) -> torch.Tensor:
    """Top-k token positions per decode row, int32 [B * next_n, top_k], ascending, -1 padded.

    Runs the paged kernel (Hopper; one launch, no readback, CUDA-graph capturable) where one serves
    the shape, or our dense kernels' paged build where the GPU's decode table (runtime.decode_table)
    timed it faster for the nearest step (also capturable; its logits take B x next_n x the block
    table's capacity x 4 bytes, in pieces under 512 MiB), else the gathered path
    (gathered_paged_mqa_topk: reads the lengths back), which gives the same answer; `variant` forces
    a PagedVariant (or its name), or "gathered" / "dense" (our dense kernels' paged build:
    dense_paged_mqa_topk) / "reference".
    validate=False skips the value checks (a readback: turn them off in CUDA graphs); shape and dtype
    checks always run, and unchecked bad values never fault or hang: lengths are clamped to the
    block table and block ids into the cache. `out`: a caller-owned contiguous int32 [B * next_n, top_k]
    the answer is written into (and returned). `layout`: the step's decode_layout, made once a step
    and passed to every indexer layer's call (the dense path's only; the decode table then reads the
    dense path's time without the layout's kernels)."""
    problem = check_paged_inputs(q, kv_cache, weights, context_lens, block_table, top_k, check_values=validate)
    if out is not None:
        answer_buffer(out, problem.rows, top_k, q.device)  # (its checks)
    if layout is not None:
        check_layout(layout, problem)
    name = AUTO if variant is None else variant if isinstance(variant, str) else variant.name
    if name == REFERENCE:
        return _into(out, reference_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k))
    if name == GATHERED:
        return _into(out, gathered_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k))
    if name == DENSE:
        return dense_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k, out=out, layout=layout)
    if name == AUTO:
        dense, chosen = _auto_route(problem, layout is not None)
        if dense is not None and load_or_warn(dense, "the paged kernel") is not None:
            return dense_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k, out=out, layout=layout,
                                        build=dense)
    else:
        chosen = PagedVariant.from_name(name)
    # (a forced variant that cannot be had raises KernelUnavailable from launch_paged's load; automatic
    # dispatch degrades to the gathered path with one warning)
    if chosen is not None and (name != AUTO or load_or_warn(chosen, "the gathered path") is not None):
        return launch_paged(chosen, q, kv_cache, weights, context_lens, block_table, top_k, out=out)
    return _into(out, gathered_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, top_k))


def _into(out: torch.Tensor | None, answer: torch.Tensor) -> torch.Tensor:
    return answer if out is None else out.copy_(answer)
