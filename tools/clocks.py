"""What clock does the GPU hold while each side of a comparison runs? nvidia-smi sampled per phase.

The fp8 floor divides the scoring FLOPs by torch._scaled_mm's rate. Read in a burst of about 20 ms,
that rate overstates what a launch timed over seconds is held to where the card lowers its clock
under sustained load (power or heat): `bench` therefore reports the floor both ways (--sustain).
This tool shows why: it runs each phase for the same wall time while `nvidia-smi -lms` samples the
SM clock, power and the clock-event reasons, and reports each phase's rate beside the clock it ran at:

    idle | _scaled_mm 8192^3 fp8 | the fused variant on the chunk | our dense logits kernel alone

    python3 tools/clocks.py VARIANT --shape 16384x524288 [--seconds 4]     # on the GPU

With the variant's `.so` from the kernel cache ($FUSED_MQA_TOPK_CACHE), or `--lib PATH`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIELDS = ("clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")


@dataclass
class Sample:
    t: float  # time.monotonic() when the line was read
    sm_mhz: float
    watts: float
    celsius: float
    reasons: int  # nvidia-smi's clock-event reasons bit mask (0x4: power cap, 0x20/0x40: thermal)


def parse_line(t: float, line: str) -> Sample | None:
    """One `--format=csv,noheader,nounits` line of FIELDS, or None where a value is missing."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS):
        return None
    try:
        return Sample(t, float(parts[0]), float(parts[1]), float(parts[2]), int(parts[3], 16))
    except ValueError:
        return None


@dataclass
class PhaseSummary:
    samples: int
    sm_mhz: float  # medians over the phase's samples
    watts: float
    celsius_max: float
    reasons: int  # OR over the samples

    def __str__(self) -> str:
        if not self.samples:
            return "no clock samples"
        return (f"SM {self.sm_mhz:5.0f} MHz, {self.watts:4.0f} W, up to {self.celsius_max:3.0f} C, "
                f"reasons {self.reasons:#06x} ({self.samples} samples)")


def summarize(samples: list[Sample], t0: float, t1: float) -> PhaseSummary:
    """The samples read in [t0, t1], skipping the first quarter (the clock settles after a change of load)."""
    inside = [s for s in samples if t0 + (t1 - t0) / 4 <= s.t <= t1]
    if not inside:
        return PhaseSummary(0, 0.0, 0.0, 0.0, 0)
    reasons = 0
    for s in inside:
        reasons |= s.reasons
    return PhaseSummary(len(inside), statistics.median(s.sm_mhz for s in inside),
                        statistics.median(s.watts for s in inside), max(s.celsius for s in inside), reasons)


@dataclass
class Sampler:
    """nvidia-smi in the background, one line every `period_ms`, timestamped as read."""
    period_ms: int = 50
    samples: list[Sample] = field(default_factory=list)

    def __enter__(self) -> Sampler:
        cmd = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-i", "0",
               f"-lms={self.period_ms}"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            s = parse_line(time.monotonic(), line)
            if s is not None:
                self.samples.append(s)

    def __exit__(self, *exc) -> None:
        self._proc.terminate()
        self._proc.wait()


def run_for(fn, seconds: float) -> tuple[float, float, float]:
    """Calls fn back to back for `seconds`; returns (median ms a call by CUDA events, t0, t1)."""
    import torch

    from generator.timing import event_ms

    fn()
    torch.cuda.synchronize()
    times, t0 = [], time.monotonic()
    while time.monotonic() - t0 < seconds:
        times.append(event_ms(fn))
    return statistics.median(times), t0, time.monotonic()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant")
    p.add_argument("--shape", default="16384x524288", metavar="MxN")
    p.add_argument("--seconds", type=float, default=4.0, help="wall time of each phase")
    p.add_argument("--lib", help="the variant's .so (default: the kernel cache's)")
    args = p.parse_args()

    import torch

    from generator.bench import logits_only_ms
    from generator.timing import scaled_mm_op, scoring_tflops, visible_pairs
    from generator.workloads import make_workload
    from runtime.build import spec_from_name
    from runtime.fused import launch_variant
    from runtime.loader import KernelLibrary

    variant = spec_from_name(args.variant)
    rows, keys = (int(x) for x in args.shape.split("x"))
    wl = make_workload("random", rows, keys, variant.heads, variant.top_k, seed=1, device="cuda")
    pairs = visible_pairs(wl.ks, wl.ke)
    lib = KernelLibrary(variant, args.lib) if args.lib else None
    scaled_mm, scaled_mm_flops = scaled_mm_op()
    phases = {
        "idle": lambda: time.sleep(0.05),
        "_scaled_mm": scaled_mm,
        "fused": lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k,
                                        lib=lib),
    }
    print(f"{torch.cuda.get_device_name()}, {variant.name}, {rows}x{keys}, {args.seconds:.1f} s a phase")
    rates = {}
    with Sampler() as sampler:
        time.sleep(0.5)  # the sampler's first lines
        for name, fn in phases.items():
            ms, t0, t1 = run_for(fn, args.seconds)
            rate = (scaled_mm_flops if name == "_scaled_mm" else 2 * pairs * variant.heads * 128) / (ms * 1e-3) / 1e12
            rates[name] = rate
            shown = "" if name == "idle" else f"{ms:8.2f} ms, {rate:5.0f} TFLOP/s; "
            print(f"{name:>11}: {shown}{summarize(sampler.samples, t0, t1)}", flush=True)
        t0 = time.monotonic()
        ms = logits_only_ms(wl, 512 << 20)  # (its own warm-up and median; about as long as the fused phase)
        print(f"{'dense logits':>11}: {ms:8.2f} ms, {scoring_tflops(pairs, variant.heads, ms):5.0f} TFLOP/s; "
              f"{summarize(sampler.samples, t0, time.monotonic())}", flush=True)
    print(f"fused / fp8 floor at the sustained _scaled_mm rate: {rates['fused'] / rates['_scaled_mm']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
