"""Where does a gated kernel's time go, phase by phase? Clock marks from inside its launches.

Ablations (tools/ablate.py) place time by difference and ncu by warp samples; this reads the SM
clock at the phase boundaries of every work item of every CTA (templates/common/timeline.cuh: the
variant's source compiled with -DFUSED_MQA_TOPK_TIMELINE, otherwise unchanged) and sums them:

    math warps, per item:  wait (Q tile, free slab) | sample scan | the gate: counts (a barrier),
                           select (the sample's codes loaded, its radix select), max (its largest),
                           reload (ranges, weights, slab pointers) | scan | hand-over (counts; with
                           select_warps=0 the selection)
    selector warps:        busy (one item's answers) | idle (waiting for a slab)
    the launch:            how far the CTAs' ends spread (the tail)

    python tools/timeline.py build VARIANT... --out .ablate                   # here: nvcc
    python tools/timeline.py run VARIANT... --out .ablate --shape 16384x32768 [--launches 5]  # on the GPU

Shares are of the CTAs' summed time on the math warps' clock (first mark to last); each figure is the
median over the launches, and so is the launch's time by CUDA events (one launch's reading varies by
a few percent: compare builds by these medians, alternated). The marks are a global store by one
thread a phase: a few hundred cycles an item, well under 1% of an item at 32K keys.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.build import nvcc_flags, spec_from_name  # noqa: E402
from runtime.render import render  # noqa: E402
from runtime.toolchain import nvcc_path  # noqa: E402
from tools.cli import variant_tool_parser  # noqa: E402

DEFINE = "-DFUSED_MQA_TOPK_TIMELINE"
CTAS, EVENTS, MARKS = 256, 128, 24  # timeline::kCtas, kEvents, kMarks
# The math warps' marks 0..8 bound these phases in order; an item without a sample has no marks 2..5
# (its gate is all "reload"). The selector warps' marks: 12 (waits for a slab), 13 (has it), 14 (done).
MATH_PHASES = ("wait", "sample", "counts", "select", "max", "reload", "scan", "hand-over")
SELECTOR, GLOBAL_START, GLOBAL_END = 12, 22, 23


def library_path(out: str, name: str) -> Path:
    return Path(out) / name / "timeline.so"


def cmd_build(args) -> int:
    ok = True
    for name in args.variant:
        variant = spec_from_name(name)
        if not (getattr(variant, "gated", False) or name.startswith("paged_topk_")
                or (name.startswith("mqa_dense_") and variant.page_block_size)):
            raise SystemExit(f"{name}: the timeline marks are in the gated and paged kernels and the dense paged "
                             "builds' cluster top-k only")
        lib = library_path(args.out, variant.name)
        lib.parent.mkdir(parents=True, exist_ok=True)
        src = lib.with_suffix(".cu")
        src.write_text(render(variant))
        done = subprocess.run([nvcc_path(), *nvcc_flags(variant), DEFINE, "-o", str(lib), str(src)],
                              capture_output=True, text=True)
        lib.with_suffix(".log").write_text(done.stdout + done.stderr)
        if done.returncode:
            print(f"{name}: nvcc failed, see {lib.with_suffix('.log')}")
            ok = False
        else:
            print(f"built {lib}")
    return 0 if ok else 1


class Marks:
    """The timeline marks of a library built by `build`: cleared before a launch, read after it."""

    def __init__(self, path: Path):
        self._lib = ctypes.CDLL(str(path))
        self._lib.mqa_topk_timeline_bytes.restype = ctypes.c_size_t
        self._lib.mqa_topk_timeline_read.argtypes = [ctypes.c_void_p]
        assert self._lib.mqa_topk_timeline_bytes() == CTAS * EVENTS * MARKS * 8, "timeline.cuh's sizes changed"

    def clear(self) -> None:
        if self._lib.mqa_topk_timeline_clear():
            raise SystemExit("mqa_topk_timeline_clear failed")

    def read(self):
        """[CTAS, EVENTS, MARKS] uint64 (numpy)."""
        import numpy as np

        marks = np.zeros((CTAS, EVENTS, MARKS), dtype=np.uint64)
        if self._lib.mqa_topk_timeline_read(marks.ctypes.data):
            raise SystemExit("mqa_topk_timeline_read failed")
        return marks


def launch_phases(marks) -> dict | None:
    """One launch's sums from its marks ([CTAS, EVENTS, MARKS] uint64, numpy): cycles per math phase and
    of the selector warps' busy and idle spans, over every CTA; None where nothing was marked."""
    import numpy as np

    math = marks[:, :, 0:len(MATH_PHASES) + 1].astype(np.int64)
    selector = marks[:, :, SELECTOR:SELECTOR + 3].astype(np.int64)
    starts, ends = marks[:, 0, GLOBAL_START].astype(np.int64), marks[:, 0, GLOBAL_END].astype(np.int64)
    ctas = np.nonzero(starts)[0]
    out = dict.fromkeys(MATH_PHASES, 0) | {"busy": 0, "idle": 0, "items": 0, "span": 0, "ctas": len(ctas)}
    rates = []
    for c in ctas:
        done = np.nonzero(math[c, :, -1])[0]  # items the math warps finished
        if len(done) == 0:
            continue
        first = math[c, 0, 0]
        last_event = done[-1] + 1  # the end-of-work event follows the last item
        cta_end = math[c, last_event, 1] if last_event < EVENTS and math[c, last_event, 1] else math[c, done[-1], -1]
        for e in done:
            m = math[c, e].copy()
            if m[2] == 0:  # no sample: marks 2..5 at mark 1
                m[2:6] = m[1]
            for i, name in enumerate(MATH_PHASES):
                out[name] += m[i + 1] - m[i]
        out["items"] += len(done)
        out["span"] += cta_end - first
        for e in np.nonzero(selector[c, :, 2])[0]:
            out["busy"] += selector[c, e, 2] - selector[c, e, 1]
            out["idle"] += selector[c, e, 1] - selector[c, e, 0]
        if ends[c] > starts[c]:  # cycles per ns: the CTA's clock span against its global-timer span
            clocks = marks[c][:, [m for m in range(MARKS) if m not in (GLOBAL_START, GLOBAL_END)]].astype(np.int64)
            rates.append((clocks.max() - first) / (ends[c] - starts[c]))
    if not out["items"]:
        return None
    out["ghz"] = float(np.median(rates)) if rates else float("nan")
    live = ctas[ends[ctas] > 0]
    out["end_spread_ns"] = int(ends[live].max() - ends[live].min()) if len(live) else 0
    out["launch_ns"] = int(ends[live].max() - starts[ctas].min()) if len(live) else 0
    return out


def report(launches: list, label: str) -> str:
    """Medians over launches (launch_phases' dicts; a "ms" entry, where timed, is the launch's time by
    CUDA events): each phase's share of the CTAs' time and its mean per item."""
    import statistics

    if not launches or any(x is None for x in launches):
        return f"{label}: no marks (was the library built by `timeline.py build`?)"

    def med(f):
        return statistics.median(f(x) for x in launches)

    def us(key):
        return med(lambda x: x[key] / x["ghz"] / 1e3 / x["items"])

    first = launches[0]
    lines = [f"{label}: {first['ctas']} CTAs, {first['items']} items ({first['items'] / first['ctas']:.1f} a CTA), "
             f"SM clock {med(lambda x: x['ghz']):.2f} GHz; medians of {len(launches)} launch(es)"]
    lines.append("  math warps, share of the CTAs' time and mean us an item:")
    for name in MATH_PHASES:
        lines.append(f"    {name:>10}: {med(lambda x: x[name] / x['span']):6.1%}  {us(name):8.2f} us")
    lines.append(f"    {'other':>10}: {med(lambda x: 1 - sum(x[n] for n in MATH_PHASES) / x['span']):6.1%}")
    if first["busy"] or first["idle"]:
        lines.append(f"  selector warps: busy {med(lambda x: x['busy'] / x['span']):.1%}, "
                     f"idle {med(lambda x: x['idle'] / x['span']):.1%} ({us('busy'):.2f} / {us('idle'):.2f} us an item)")
    if first["launch_ns"]:
        lines.append(f"  launch {med(lambda x: x['launch_ns']) / 1e3:.1f} us by the global timer; the CTAs' ends spread "
                     f"over the last {med(lambda x: x['end_spread_ns']) / 1e3:.1f} us")
    if "ms" in first:
        times = sorted(x["ms"] for x in launches)
        lines.append(f"  launch {med(lambda x: x['ms']):.3f} ms by CUDA events (min {times[0]:.3f}, max {times[-1]:.3f})")
    return "\n".join(lines)


def cmd_run(args) -> int:
    import torch

    from generator.timing import event_ms
    from generator.workloads import make_workload
    from runtime.fused import launch_variant
    from runtime.loader import KernelLibrary

    for name in args.variant:
        variant = spec_from_name(name)
        path = library_path(args.out, variant.name)
        lib = KernelLibrary(variant, str(path))
        timeline = Marks(path)
        for spec in args.shape:
            rows, keys = (int(x) for x in spec.split("x"))
            wl = make_workload(args.family, rows, keys, variant.heads, variant.top_k, seed=1, device="cuda")
            run = lambda stats=None: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks,  # noqa: E731
                                                    wl.ke, wl.top_k, lib=lib, stats=stats)
            stats: dict = {}
            run(stats)  # warm-up (and the module load); the counters' read synchronises, so not in a timed launch
            launches = []
            for _ in range(args.launches):
                torch.cuda.synchronize()
                timeline.clear()
                ms = event_ms(run)
                phases = launch_phases(timeline.read())
                if phases is not None:
                    phases["ms"] = ms
                launches.append(phases)
            label = (f"{variant.name} {rows}x{keys} {args.family} ({stats.get('rescan_blocks')} blocks rescanned, "
                     f"{stats.get('split_blocks')} split)")
            print(report(launches, label), flush=True)
    return 0


def main() -> int:
    p = variant_tool_parser(__doc__, ("build", "run"))
    p.add_argument("--family", default="random", help="workload family (runtime/workloads.py)")
    p.add_argument("--launches", type=int, default=5, help="launches marked, reported as medians")
    args = p.parse_args()
    return cmd_build(args) if args.what == "build" else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
