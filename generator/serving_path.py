"""The serving engines' prefill path that `bench --sweep --serving` compares AUTO with: times recorded
in a file, or vLLM's own two ops, installed here, called as vLLM's sparse_attn_indexer calls them and
timed in the same run as ours.

`--serving FILE`: JSON lines {"requests", "rows", "keys", "heads", "top_k", "ms"}, one a shape (the
serving path built from its sources and timed in the same run by the same method: CONTRIBUTING.md).

`--serving installed`: DeepGEMM's MQA logits, through vLLM's wrapper where vLLM has one
(vllm.utils.deep_gemm: fp8_fp4_mqa_logits in newer releases, fp8_mqa_logits before), else DeepGEMM's
own entry (the same two names), then vLLM's `torch.ops._C.top_k_per_row_prefill` into the
chunk's rows of an index buffer. A chunk is scored in row pieces of at most 512 MiB of fp32 logits
each (the bound of vLLM v0.33's prefill pieces, which the recorded serving times used too: BENCHMARKS.md,
"Every chunk a server sends"); each piece's logits are allocated by the op, as in vLLM.
Its answers are verified by the two-sided rule on sampled rows (not strictly: vLLM's top-k leaves the
order and the ties unspecified). The benchmark only: the runtime never imports vLLM or DeepGEMM."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

LOGITS_PIECE_BYTES = 512 << 20


class ServingUnavailable(RuntimeError):
    """The installed serving ops cannot be had here (which package is missing, and why)."""


def read_serving(path: Path) -> dict[tuple, float]:
    """Serving-path times by shape key (requests, rows, keys, heads, top_k), from JSON lines."""
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out[(d["requests"], d["rows"], d["keys"], d["heads"], d["top_k"])] = float(d["ms"])
    return out


def logits_op() -> tuple[str, Callable]:
    """The installed MQA-logits entry, by the name it is reached under, as fn(q, (k_fp8, k_scale),
    weights, ks, ke) -> fp32 logits [M, N]: vLLM's wrapper first (the call its indexer makes), in its
    fp8/fp4 form (q given as (values, None)) where it has one, else DeepGEMM's own entry; logits past a
    row's range cleaned, as vLLM asks for them."""
    import inspect

    reasons = []
    for module_name in ("vllm.utils.deep_gemm", "deep_gemm"):
        try:
            module = __import__(module_name, fromlist=["_"])
        except ImportError as e:
            reasons.append(f"{module_name}: {e}")
            continue
        if hasattr(module, "fp8_fp4_mqa_logits"):
            fn = module.fp8_fp4_mqa_logits
            return f"{module_name}.fp8_fp4_mqa_logits", lambda q, kv, w, ks, ke: fn((q, None), kv, w, ks, ke,
                                                                                      clean_logits=True)
        if hasattr(module, "fp8_mqa_logits"):
            fn = module.fp8_mqa_logits
            if "clean_logits" in inspect.signature(fn).parameters:
                return f"{module_name}.fp8_mqa_logits", lambda q, kv, w, ks, ke: fn(q, kv, w, ks, ke, clean_logits=True)
            return f"{module_name}.fp8_mqa_logits", fn
        reasons.append(f"{module_name} has neither fp8_mqa_logits nor fp8_fp4_mqa_logits")
    raise ServingUnavailable(f"no MQA-logits op here ({'; '.join(reasons)})")


def top_k_op() -> Callable:
    """vLLM's per-row prefill top-k, torch.ops._C.top_k_per_row_prefill(logits, ks, ke, out, rows,
    stride0, stride1, top_k), which importing vllm._custom_ops registers."""
    import torch

    try:
        import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
    except ImportError as e:
        if not _has_top_k_op():
            raise ServingUnavailable(f"vLLM is not installed here ({e})") from None
    if not _has_top_k_op():
        raise ServingUnavailable("vLLM is installed but registers no torch.ops._C.top_k_per_row_prefill")
    return torch.ops._C.top_k_per_row_prefill


def _has_top_k_op() -> bool:
    import torch

    try:
        torch.ops._C.top_k_per_row_prefill
    except (AttributeError, RuntimeError):
        return False
    return True


@dataclass
class InstalledServing:
    """vLLM's prefill indexer pair, as installed here."""

    logits_name: str
    logits: Callable
    top_k: Callable
    piece_bytes: int = LOGITS_PIECE_BYTES

    @classmethod
    def find(cls) -> "InstalledServing":
        name, logits = logits_op()
        return cls(name, logits, top_k_op())

    def describe(self) -> str:
        return f"{self.logits_name} + torch.ops._C.top_k_per_row_prefill, installed"

    def __call__(self, q, k_fp8, k_scale, weights, ks, ke, top_k: int, out):
        """The chunk's top-k positions into out [M, top_k] (int32), relative to ks, as vLLM writes them."""
        rows, keys = q.shape[0], k_fp8.shape[0]
        step = max(1, self.piece_bytes // (4 * max(keys, 1)))
        for lo in range(0, rows, step):
            hi = min(rows, lo + step)
            logits = self.logits(q[lo:hi], (k_fp8, k_scale), weights[lo:hi], ks[lo:hi], ke[lo:hi])
            self.top_k(logits, ks[lo:hi], ke[lo:hi], out[lo:hi], hi - lo, logits.stride(0), logits.stride(1), top_k)
        return out
