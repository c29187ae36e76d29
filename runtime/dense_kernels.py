"""Whether our dense kernels (templates/dense_mqa_topk_sm90.cu.j2) serve a device, and which variant.

Its own module because two others ask: the dense path (runtime.dense) and the contract's value
checks, which run in the dense library's check kernel (runtime.contract).
"""

from __future__ import annotations

import torch

from .dense_variant import SHORT_ROW_KEYS, DenseVariant, default_dense_variant
from .environment import getenv
from .gpu import device_identity

DENSE_ENV = "FUSED_MQA_TOPK_DENSE"  # "auto" (default): our kernels where they run; "torch": always torch


def dense_variant_for(device: torch.device, heads: int, top_k: int, longest_row: int | None = None) -> DenseVariant | None:
    """The dense kernels for this device and chunk (rows that see at most `longest_row` keys; None:
    unknown), or None where they do not run (torch serves instead)."""
    if getenv(DENSE_ENV, "auto") == "torch" or device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if device_identity(index).capability != (9, 0):  # (cached: every call asks)
        return None
    return hopper_dense_variant(heads, top_k, longest_row)


def hopper_dense_variant(heads: int, top_k: int, longest_row: int | None = None) -> DenseVariant:
    """The dense kernels a Hopper GPU runs for a chunk whose rows see at most `longest_row` keys (None:
    unknown): the short-row top-k's build where every row is short."""
    return default_dense_variant(heads, top_k, short_rows=longest_row is not None and longest_row <= SHORT_ROW_KEYS)
