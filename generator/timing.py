"""Timing GPU work as METHOD.md asks: warm-up, then the median of many event-timed runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

# GPU cycles the stream sleeps before a launch-hidden timing (about 120 us at the H200's clocks):
# longer than the host takes to enqueue one call of ours (28-60 us on the lent hosts).
HIDE_LAUNCH_CYCLES = 200_000


def event_ms(fn: Callable[[], object], hide_launch: bool = False) -> float:
    """The time of one fn() on the current stream, in ms, by CUDA events around it (waits for it).

    By default the host's work is inside: the stream is idle when the first event is recorded, so
    the time runs while the host prepares and enqueues the call (what a caller waits for). With
    hide_launch the stream first sleeps longer than the host takes, so the events close around the
    GPU's work alone: a kernel of 10-30 us measured the first way reads mostly its host's launch."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if hide_launch:
        torch.cuda._sleep(HIDE_LAUNCH_CYCLES)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_ms(fn: Callable[[], object], warmup: int = 2, reps: int = 10, max_seconds: float = 20.0,
              hide_launch: bool = False) -> float:
    """Median time of fn() on the current stream, in ms, with CUDA events around each call (the
    host's work inside, or with hide_launch the GPU's alone: event_ms).

    Stops early (at least 3 timed runs) once the timed runs pass max_seconds.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(reps):
        times.append(event_ms(fn, hide_launch))
        if len(times) >= 3 and sum(times) > 1000 * max_seconds:
            break
    return statistics.median(times)


@dataclass(frozen=True)
class Timed:
    """A call's median time (ms) over its repeats and their spread (spread())."""

    ms: float
    spread: float


def spread(times: list[float]) -> float:
    """Half the interquartile range over the median: how far apart repeated timings lie."""
    if len(times) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4)
    return (q3 - q1) / 2 / statistics.median(times)


COMPARE_REPS = 15  # rounds of a comparison (tune's settling, bench, the sweep): one run of each call a round


def interleaved_ms(calls: dict[str, Callable[[], object]], warmup: int = 1, reps: int | None = None,
                   max_seconds: float = 20.0,
                   hide_launch: bool = False, timer: Callable | None = None) -> dict[str, Timed]:
    """The calls timed alike, the way a comparison must be on a power-capped card: each warmed up, then
    one run of each in turn, `reps` rounds (fewer, at least 3, once the rounds pass max_seconds), so
    that every call sees the same clocks; per call its median and spread. The time of one run is
    event_ms (the host's work inside, or the GPU's alone with hide_launch); `timer(fn)` replaces it.
    reps: default COMPARE_REPS."""
    timer, reps = timer or (lambda fn: event_ms(fn, hide_launch)), reps or COMPARE_REPS
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for n in range(reps):
        for name, fn in calls.items():
            times[name].append(timer(fn))
        if n >= 2 and sum(map(sum, times.values())) > 1000 * max_seconds:
            break
    return {name: Timed(statistics.median(t), spread(t)) for name, t in times.items()}


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def visible_pairs(ks: torch.Tensor, ke: torch.Tensor) -> int:
    return int((ke - ks).clamp(min=0).sum())


def scoring_tflops(pairs: int, heads: int, ms: float) -> float:
    """Scoring rate over visible pairs: 2 * heads * 128 FLOPs each."""
    return 2 * heads * 128 * pairs / (ms * 1e-3) / 1e12


def scoring_floor_ms(pairs: int, heads: int, tflops: float) -> float:
    """The time scoring `pairs` visible pairs takes at `tflops` (scoring_tflops' inverse): the fp8 floor."""
    return 2 * heads * 128 * pairs / (tflops * 1e12) * 1e3


def scaled_mm_op(n: int = 8192):
    """One fp8 torch._scaled_mm of n^3 on random data, as a closure (and its FLOPs)."""
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).T
    one = torch.ones((), device="cuda")
    return (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), 2 * n**3


def scaled_mm_tflops(n: int = 8192, seconds: float = 0.0) -> float:
    """torch._scaled_mm's fp8 rate at n^3: the median of a burst of 20 products, or with `seconds`, of
    products run back to back for that long. The two differ on a power-capped card: an H200 holds its
    700 W cap under sustained load, and there this rate fell from about 1,450 (burst) to 1,230 TFLOP/s
    at 1,410 MHz, while a 70 ms fused launch held 1,725 MHz (tools/clocks.py; experiment log,
    "2026-12-01: power cap"). A launch timed over seconds is held to the sustained floor."""
    op, flops = scaled_mm_op(n)
    ms = median_ms(op, warmup=3, reps=1 << 30, max_seconds=seconds) if seconds else median_ms(op, warmup=3, reps=20)
    return flops / (ms * 1e-3) / 1e12
