"""The key space the paged builds of the prefill kernels read (Variant.paged_build,
DenseVariant.paged_build): a chunk's requests laid out again, each from a block boundary, so that a
64-key piece is always in one cache block, with the cache block of each block of it (`pages`). Made on
the device with no readback (capturable); runtime/paged_prefill.py and runtime/paged.py's dense path
hand it to the kernels."""

from __future__ import annotations

from typing import NamedTuple

import torch

MAX_TILE_KEYS = 256  # the most keys a kernel tile loads past a row's end: `pages` covers them too


def spare_blocks(block_size: int) -> int:
    """The blocks `pages` holds past the last request's, so that a tile past a row's end reads block 0."""
    return -(-MAX_TILE_KEYS // block_size)


def request_of(cu: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    """The request whose keys hold position ks (int64; the last request for positions past the end),
    cu being the requests' first keys and the end (int64 [R + 1])."""
    return torch.searchsorted(cu[1:].contiguous(), ks.long(), right=True).clamp(max=cu.numel() - 2)


class PageLayout(NamedTuple):
    """The key space a paged build reads: the chunk's requests laid out again, each from a block
    boundary, so that a 64-key piece is always in one cache block. It depends on the block table and
    the rows' ranges only: a server makes it once a chunk and passes it to every indexer layer's call."""

    pages: torch.Tensor  # int32 [requests x max_blocks + a tile's worth]: each block's cache block (0 past the last)
    ks: torch.Tensor  # int32 [rows]: each row's first key there
    ke: torch.Tensor  # int32 [rows]: and its end (clamped to its request's)
    keys: int  # an upper bound on its keys (every block-table row full)
    block_size: int


def page_layout(block_table, cu_seq_lens, ks, ke, block_size: int, num_blocks: int) -> PageLayout:
    """The PageLayout of a chunk: elementwise on the device (no readback, capturable); block ids
    clamped into the cache's num_blocks."""
    requests, max_blocks = block_table.shape
    cu = cu_seq_lens.long()
    lens = (cu[1:] - cu[:-1]).clamp(0, max_blocks * block_size)
    blocks = (lens + block_size - 1) // block_size
    ends = blocks.cumsum(0)  # each request's last block + 1 in the new layout
    starts = ends - blocks
    slot = torch.arange(requests * max_blocks + spare_blocks(block_size), device=block_table.device)
    owner = torch.searchsorted(ends, slot, right=True)
    inside = owner < requests
    owner = owner.clamp(max=requests - 1)
    pages = block_table.long()[owner, (slot - starts[owner]).clamp(0, max_blocks - 1)].clamp(0, num_blocks - 1)
    pages = torch.where(inside, pages, 0).int()
    request = request_of(cu, ks)
    shift = starts[request] * block_size - cu[request]
    ks_laid = ks.long() + shift
    ke_laid = torch.maximum(torch.minimum(ke.long(), cu[request] + lens[request]) + shift, ks_laid)
    return PageLayout(pages, ks_laid.int(), ke_laid.int(), requests * max_blocks * block_size, block_size)
