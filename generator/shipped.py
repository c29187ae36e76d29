"""The variants this project ships: every fused variant a tuned table names, the default fused
variant per (kernel kind, heads, top_k), the dense variant per (heads, top_k), the paged decode
kernel's default per (heads, top_k, next_n), the paged builds of the Hopper fused and dense ones
(prefill from the paged cache), these two at the block size vLLM's indexer cache uses, and the dense
ones' paged builds for decode steps (rows per block by next_n). CI compiles
a fused and a dense one of each kind (tests/test_build.py), two paged decode ones (tests/test_paged.py)
and three paged prefill builds (tests/test_paged_prefill.py); `build --shipped` compiles them all and
holds them to generator/resources.py's rules."""

from __future__ import annotations

import json

from runtime.defaults import default_variants
from runtime.dense_variant import DenseVariant, default_dense_variant
from runtime.paged_variant import SUPPORTED_NEXT_N, PagedVariant, default_paged_variant
from runtime.table import SHIPPED_TABLE_DIR
from runtime.variant import Variant

from .space import AXES


def shipped_dense_variants() -> list[DenseVariant]:
    return sorted({default_dense_variant(h, k, short_rows=short) for h in AXES["heads"] for k in AXES["top_k"]
                   for short in (False, True)})


def shipped_variants() -> list[Variant]:
    names = set()
    for path in sorted(SHIPPED_TABLE_DIR.glob("*.json")):
        names.update(e["variant"] for e in json.loads(path.read_text())["entries"])
    variants = {Variant.from_name(n) for n in names}
    variants.update(v for h in AXES["heads"] for k in AXES["top_k"] for v in default_variants(h, k))
    return sorted(variants)


SHIPPED_BLOCK_SIZE = 64  # vLLM's indexer cache (DeepGEMM's sm90 paged kernel asserts it)


def shipped_paged_variants() -> list[PagedVariant]:
    return sorted({default_paged_variant(h, k, n, SHIPPED_BLOCK_SIZE) for h in AXES["heads"] for k in AXES["top_k"]
                   for n in SUPPORTED_NEXT_N})


def shipped_dense_decode_builds() -> list[DenseVariant]:
    """The dense paged builds decode steps run (DenseVariant.decode_build: rows per block by next_n)."""
    return sorted({d.decode_build(SHIPPED_BLOCK_SIZE, n) for d in shipped_dense_variants() for n in SUPPORTED_NEXT_N})


def shipped_paged_prefill_variants() -> list[Variant | DenseVariant]:
    """The paged builds (runtime/paged_prefill.py) of every shipped wgmma fused variant and dense variant."""
    fused = [v.paged_build(SHIPPED_BLOCK_SIZE) for v in shipped_variants() if v.mma == "wgmma"]
    return fused + [d.paged_build(SHIPPED_BLOCK_SIZE) for d in shipped_dense_variants()]
