"""Decode steps laid out in a paged cache, for the tests, the checker and the benchmarks.

A step's data comes from a prefill family (generator.workloads): its keys are the requests' tokens
end to end, its first B x next_n query rows the step's rows. The keys are written into cache blocks
in DeepGEMM's paged layout through a shuffled block table, with spare blocks of noise between them;
with shared_prefix, every request's first blocks are request 0's (prefix caching: one block in many
tables), so those requests see request 0's first tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.paged import gather_paged, reference_paged_mqa_topk
from runtime.paged_variant import CACHE_BYTES_PER_KEY

from .verify import VerifyReport, verify_topk
from .workloads import Workload, make_workload


@dataclass(frozen=True)
class PagedWorkload:
    family: str
    q: torch.Tensor  # [B, next_n, H, 128] e4m3
    kv_cache: torch.Tensor  # [num_blocks, block_size, 1, 132] uint8
    weights: torch.Tensor  # [B * next_n, H] f32
    context_lens: torch.Tensor  # [B] i32
    block_table: torch.Tensor  # [B, max_blocks] i32
    top_k: int

    @property
    def batch(self) -> int:
        return self.q.shape[0]

    @property
    def next_n(self) -> int:
        return self.q.shape[1]

    @property
    def heads(self) -> int:
        return self.q.shape[2]

    def args(self) -> tuple:
        """Positional arguments of paged_mqa_topk / reference_paged_mqa_topk."""
        return (self.q, self.kv_cache, self.weights, self.context_lens, self.block_table, self.top_k)

    def cache_bytes_read(self) -> int:
        """The cache bytes a step must read: every request's tokens once (132 bytes each)."""
        return int(self.context_lens.long().sum()) * CACHE_BYTES_PER_KEY

    def describe(self) -> str:
        lens = self.context_lens.tolist()
        shown = lens if len(lens) <= 4 else f"{len(lens)} requests, {min(lens)}..{max(lens)} tokens"
        return f"{self.family} B={self.batch} next_n={self.next_n} H={self.heads} k={self.top_k} contexts {shown}"


def make_paged_workload(family: str, contexts: list[int], next_n: int, heads: int, top_k: int, *, block_size: int = 64,
                        seed: int = 0, device="cpu", shared_prefix: int = 0, spare_blocks: int = 3,
                        table_slack: int = 1) -> PagedWorkload:
    """A decode step of len(contexts) requests with these context lengths. shared_prefix: the first
    shared_prefix blocks of every request are request 0's (at most request 0's full blocks; requests
    shorter than that share what they use). table_slack: block-table columns beyond the longest context's (left at -1)."""
    batch = len(contexts)
    total = max(sum(contexts), 1)
    base = make_workload(family, max(batch * next_n, 1), total, heads, top_k, seed=seed, device=device)
    cache, table = lay_out_in_pages(base.k_fp8, base.k_scale, contexts, block_size, seed=seed, shared_prefix=shared_prefix,
                                    spare_blocks=spare_blocks, table_slack=table_slack)
    q = base.q[: batch * next_n].reshape(batch, next_n, heads, 128)
    weights = base.weights[: batch * next_n].contiguous()
    return PagedWorkload(family, q.contiguous(), cache.to(device), weights,
                         torch.tensor(contexts, dtype=torch.int32, device=device), table.to(device), top_k)


def lay_out_in_pages(k_fp8: torch.Tensor, k_scale: torch.Tensor, lens: list[int], block_size: int, *, seed: int = 0,
                     shared_prefix: int = 0, spare_blocks: int = 3, table_slack: int = 1):
    """Requests of `lens` tokens, laid end to end in k_fp8/k_scale, written into a paged cache (on the
    CPU) through a shuffled block table with blocks of noise (finite scales) between them: (kv_cache
    uint8 [num_blocks, block_size, 1, 132], block_table int32 [len(lens), max_blocks], -1 past each
    request's blocks). shared_prefix: as make_paged_workload's."""
    batch = len(lens)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed + 1)
    blocks_of = [-(-n // block_size) for n in lens]
    max_blocks = max([*blocks_of, 1]) + table_slack
    shared = min(shared_prefix, lens[0] // block_size if batch else 0)  # request 0's full blocks only
    own = [b - (min(shared, b) if r else 0) for r, b in enumerate(blocks_of)]
    num_blocks = sum(own) + spare_blocks + 1
    ids = torch.randperm(num_blocks, generator=gen)
    table = torch.full((batch, max_blocks), -1, dtype=torch.int32)
    cache = torch.randint(0, 256, (num_blocks, block_size * CACHE_BYTES_PER_KEY), generator=gen, dtype=torch.uint8)
    noise_scales = torch.rand(num_blocks, block_size, generator=gen) + 0.5
    cache[:, block_size * 128:] = noise_scales.view(torch.uint8).view(num_blocks, -1)  # finite scales everywhere
    values = k_fp8.cpu().view(torch.uint8)
    scales = k_scale.cpu()
    next_id, start = 0, 0
    for r, n in enumerate(lens):
        for j in range(blocks_of[r]):
            if r and j < shared:
                table[r, j] = table[0, j]
                continue
            block = int(ids[next_id])
            next_id += 1
            table[r, j] = block
            lo, hi = start + j * block_size, min(start + (j + 1) * block_size, start + n)
            cache[block, : (hi - lo) * 128] = values[lo:hi].reshape(-1)
            cache[block, block_size * 128: block_size * 128 + (hi - lo) * 4] = scales[lo:hi].view(torch.uint8)
        start += n
    return cache.view(num_blocks, block_size, 1, CACHE_BYTES_PER_KEY), table


@dataclass(frozen=True)
class PagedChunkWorkload:
    """A prefill chunk (a generator.workloads.Workload) with its keys in a paged cache: request r is
    keys [cu_seq_lens[r], cu_seq_lens[r + 1]) of the workload, its rows' ranges unchanged, so the
    expected answer is the workload's."""

    base: Workload
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    cu_seq_lens: torch.Tensor

    def args(self) -> tuple:
        """Positional arguments of paged_prefill_mqa_topk."""
        wl = self.base
        return (wl.q, self.kv_cache, wl.weights, self.block_table, self.cu_seq_lens, wl.ks, wl.ke, wl.top_k)


def page_chunk(wl: Workload, block_size: int = 64, seed: int = 0, spare_blocks: int = 3) -> PagedChunkWorkload:
    """`wl` with its keys in a paged cache, one request for each distinct first key of its rows
    (a row's range must then lie in its request: the causal and multi-request families)."""
    keys = wl.k_fp8.shape[0]
    starts = sorted({0, *wl.ks.tolist()} - {keys})
    cu = [*starts, keys]
    lens = [b - a for a, b in zip(cu, cu[1:])]
    cache, table = lay_out_in_pages(wl.k_fp8, wl.k_scale, lens, block_size, seed=seed, spare_blocks=spare_blocks)
    device = wl.q.device
    return PagedChunkWorkload(wl, cache.to(device), table.to(device), torch.tensor(cu, dtype=torch.int32, device=device))


def verify_paged(out: torch.Tensor, wl: PagedWorkload, rows=None, strict: bool = False) -> VerifyReport:
    """The two-sided rule (generator.verify) for a paged answer: the requests' keys gathered out of
    the cache, each row's answer read as positions from its request's first token."""
    k_fp8, k_scale, ks, ke = gather_paged(wl.kv_cache, wl.context_lens, wl.block_table, wl.next_n)
    flat_q = wl.q.reshape(-1, wl.heads, 128)
    return verify_topk(out, flat_q, (k_fp8, k_scale), wl.weights, ks, ke, wl.top_k, rows=rows, strict=strict)


def reference_answer(wl: PagedWorkload) -> torch.Tensor:
    return reference_paged_mqa_topk(*wl.args())


def laid_out_keys(kv_cache: torch.Tensor, layout) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys a paged build reads through `layout` (runtime.page_layout), gathered on the CPU as
    (k_fp8 [layout.keys, 128], k_scale): key x at slot x % block_size of block pages[x / block_size].
    Keys no row of the layout sees hold the cache's noise (NaN codes among it) and are zeroed, so the
    reference (which refuses NaN codes) can read them; a NaN code inside a row's range is an error."""
    cache = kv_cache.cpu().view(kv_cache.shape[0], -1)
    bs = kv_cache.shape[1]
    x = torch.arange(layout.keys)
    block, slot = layout.pages.cpu().long()[x // bs], x % bs
    codes = cache[block[:, None], slot[:, None] * 128 + torch.arange(128)]
    k_scale = cache[block[:, None], bs * 128 + slot[:, None] * 4 + torch.arange(4)].contiguous().view(torch.float32)[:, 0]
    seen = torch.zeros(layout.keys + 1, dtype=torch.int32)
    ks, ke = layout.ks.cpu().long(), layout.ke.cpu().long()
    seen.index_add_(0, ks, torch.ones_like(ks, dtype=torch.int32))
    seen.index_add_(0, ke, -torch.ones_like(ke, dtype=torch.int32))
    seen = seen.cumsum(0)[: layout.keys] > 0
    if bool(((codes & 0x7F) == 0x7F)[seen].any()):
        raise ValueError("a row of the layout sees a NaN code: the layout maps a key it should not")
    return codes.masked_fill(~seen[:, None], 0).view(torch.float8_e4m3fn).contiguous(), k_scale.contiguous()
