"""Timing GPU work as METHOD.md asks: warm-up, then the median of many event-timed runs."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def event_ms(fn: Callable[[], object]) -> float:
    """The time of one fn() on the current stream, in ms, by CUDA events around it (waits for it)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_ms(fn: Callable[[], object], warmup: int = 2, reps: int = 10, max_seconds: float = 20.0) -> float:
    """Median wall time of fn() on the current stream, in ms, with CUDA events around each call.

    Stops early (at least 3 timed runs) once the timed runs pass max_seconds.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(reps):
        times.append(event_ms(fn))
        if len(times) >= 3 and sum(times) > 1000 * max_seconds:
            break
    return statistics.median(times)


def visible_pairs(ks: torch.Tensor, ke: torch.Tensor) -> int:
    return int((ke - ks).clamp(min=0).sum())


def scoring_tflops(pairs: int, heads: int, ms: float) -> float:
    """Scoring rate over visible pairs: 2 * heads * 128 FLOPs each."""
    return 2 * heads * 128 * pairs / (ms * 1e-3) / 1e12


def scoring_floor_ms(pairs: int, heads: int, tflops: float) -> float:
    """The time scoring `pairs` visible pairs takes at `tflops` (scoring_tflops' inverse): the fp8 floor."""
    return 2 * heads * 128 * pairs / (tflops * 1e12) * 1e3
