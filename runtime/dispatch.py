"""Which path serves a call: the tuned table's variant for this GPU, or the dense path.

Dense where: the tensors are not on a CUDA GPU; no compiled arch runs on it (needs sm_89+ fp8
tensor cores); there is no table for this GPU model; the nearest bucket's entry says dense won;
or FUSED_MQA_TOPK_PATH=dense. FUSED_MQA_TOPK_PATH=fused forces the fused kernel (the table's
variant, else the untuned default) wherever one can run.
"""

from __future__ import annotations

import os
from functools import lru_cache

import torch

from generator.arch import arch_for_capability
from generator.space import default_variant
from generator.variant import Variant

from .contract import Problem
from .table import Entry, find_table, load_table, nearest

PATH_ENV = "FUSED_MQA_TOPK_PATH"
PATHS = ("auto", "fused", "dense")


@lru_cache(maxsize=None)
def device_info(index: int) -> tuple[str, str | None]:
    """(GPU name, the arch name our builds use on it, or None)."""
    arch = arch_for_capability(*torch.cuda.get_device_capability(index))
    return torch.cuda.get_device_name(index), arch.name if arch else None


def choose_variant(problem: Problem) -> Variant | None:
    """The fused variant to run for this problem, or None for the dense path."""
    path = os.environ.get(PATH_ENV, "auto")
    if path not in PATHS:
        raise ValueError(f"{PATH_ENV}={path!r}: expected one of {PATHS}")
    if path == "dense" or problem.device.type != "cuda":
        return None
    gpu, arch = device_info(problem.device.index if problem.device.index is not None else torch.cuda.current_device())
    return select_variant(load_table(find_table(gpu)) or [], arch, problem, force_fused=path == "fused")


def select_variant(entries: list[Entry], arch: str | None, problem: Problem, force_fused: bool = False) -> Variant | None:
    """The table's answer for this problem on a GPU whose builds target `arch` (None: no fp8 tensor
    cores); None means dense. force_fused takes the variant even where dense won, or the default."""
    if arch is None:
        return None
    entry = nearest(entries, problem.heads, problem.top_k, problem.rows, problem.keys)
    if entry is not None:
        variant = Variant.from_name(entry.variant)
        if variant.arch == arch and (entry.use == "fused" or force_fused):
            return variant
    return default_variant(problem.heads, problem.top_k, arch) if force_fused else None
