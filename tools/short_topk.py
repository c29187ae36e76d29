"""The dense path's two top-k kernels on the same logits: which serves short rows faster (GPU).

For each chunk (a causal one of ROWS x KEYS, or --requests Q packed requests of KEYS / Q keys) and
each dense variant: the chunk's logits made once, in windows of its longest row (as the dense path
lays them out), then each top-k kernel timed alone over them (the short-row one, a row in registers,
where the window is at most the variant's short_row_keys, and the histogram one), and the whole
dense call. Every answer verified on sampled rows with the two-sided verifier.

    python3 tools/short_topk.py --shape 8192x8192 --shape 16384x32768 --requests 8 \
        [--variant mqa_dense_...] [--heads 32] [--top-k 2048] [--build prev --build new] [--floor]

--floor also times the logits kernel alone over the same chunk and takes the fp8 floor (2 x heads x
128 FLOPs a visible pair at `_scaled_mm`'s rate sustained over 3 s, measured first): each kernel's
share of it, the whole call's, and the most the call could reach with its top-k as it is and a
logits kernel at the floor. That is where a short chunk's time goes, and its limit on this design.

Each kernel is timed on the GPU alone (the host's launch hidden: timing.event_ms); the whole call
both as a caller waits for it (the host's work inside) and on the GPU alone.

--build NAME also times the top-k kernels of another build of each variant on the same logits:
.ablate/<variant>/<NAME>.so, as `tools/ablate.py build VARIANT --as NAME` makes it (at the commit
before a change, and after it). That is how a top-k change is measured against the one before it in
one call (experiment log, "2026-12-01: the long chunks against the floor").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", default=[], metavar="ROWSxKEYS")
    p.add_argument("--requests", type=int, action="append", default=[], help="requests a chunk packs (default 1)")
    p.add_argument("--variant", action="append", default=[], help="dense variants (default: the shipped one)")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--top-k", type=int, default=2048)
    p.add_argument("--build", action="append", default=[], metavar="NAME",
                   help="also time this build of each variant (.ablate/<variant>/<NAME>.so; repeatable)")
    p.add_argument("--out", default=".ablate", help="where --build's libraries are (default .ablate)")
    p.add_argument("--floor", action="store_true",
                   help="also the logits kernel alone, and every time against the sustained fp8 floor")
    args = p.parse_args()

    import torch

    from generator.bench import chunk_logits, logits_launch
    from generator.sweep import Shape, chunk
    from generator.timing import (
        median_ms,
        scaled_mm_tflops,
        scoring_floor_ms,
        visible_pairs,
    )
    from generator.verify import verify_topk
    from runtime.dense import run_dense
    from runtime.dense_variant import DenseVariant, default_dense_variant
    from runtime.loader import DenseLibrary, load

    variants = [DenseVariant.from_name(n) for n in args.variant] or [
        default_dense_variant(args.heads, args.top_k, short_rows=True)]
    # Each variant's builds, opened once: the shipped one (named by its top-k kernel's parameters), then --build's.
    builds = {v.name: [(v.name.split("_t")[-1], load(v))] + [
        (build, DenseLibrary(v, str(Path(args.out) / v.name / f"{build}.so"))) for build in args.build]
        for v in variants}
    rate = scaled_mm_tflops(seconds=3.0) if args.floor else None
    print(f"{torch.cuda.get_device_name()}; ms, median of event-timed calls"
          + (f"; _scaled_mm sustained {rate:.0f} TFLOP/s over 3 s" if rate else ""), flush=True)
    bad = 0
    for spec in args.shape or ["8192x8192"]:
        rows, keys = (int(x) for x in spec.split("x"))
        for requests in args.requests or [1]:
            shape = Shape(requests, rows, keys, variants[0].heads, variants[0].top_k)
            wl = chunk(shape, seed=rows + keys + requests)
            longest = wl.longest_row()
            stream = torch.cuda.current_stream().cuda_stream
            line = f"q{requests} {rows:>6} x {keys:>7} (longest row {longest:>6}):"
            floor_ms = scoring_floor_ms(visible_pairs(wl.ks, wl.ke), wl.heads, rate) if rate else None
            if floor_ms:
                line += f"  floor {floor_ms:.4f}"
            for v in variants:
                shipped = builds[v.name][0][1]
                logits, window = chunk_logits(shipped, wl)
                served = None  # the top-k the whole call runs: the short-row one where the window fits it
                if floor_ms:
                    logits_ms = median_ms(logits_launch(shipped, wl, logits, window), warmup=3, reps=15, max_seconds=2.0,
                                          hide_launch=True)
                    line += f"  logits {logits_ms:.3f} ({floor_ms / logits_ms:.2f} of the floor)"
                out = torch.empty((rows, wl.top_k), dtype=torch.int32, device="cuda")
                for name, build_lib in builds[v.name]:
                    for kernel, short_rows in (("short", True), ("histogram", False)):
                        def topk():
                            build_lib.topk(logits.data_ptr(), window, wl.ks.data_ptr(), wl.ke.data_ptr(), 0, rows, keys,
                                           out.data_ptr(), stream, short_rows=short_rows)
                        ms = median_ms(topk, warmup=3, reps=15, max_seconds=2.0, hide_launch=True)
                        out.fill_(-7)
                        topk()
                        ok = verify_topk(out, *wl.args(), rows=range(0, rows, max(1, rows // 32))).ok
                        bad += not ok
                        line += f"  {name} {kernel} top-k {ms:.3f}{'' if ok else ' BAD'}"
                        if build_lib is shipped and short_rows == (window <= shipped.short_row_keys):
                            served = ms
                def call():
                    run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, longest, variant=v)
                call_ms = median_ms(call, warmup=3, reps=15, max_seconds=2.0)
                gpu_ms = median_ms(call, warmup=3, reps=15, max_seconds=2.0, hide_launch=True)
                line += f"  (whole call {call_ms:.3f}, its GPU time {gpu_ms:.3f}"
                if floor_ms:
                    line += (f"; {floor_ms / call_ms:.2f} of the floor, the GPU time {floor_ms / gpu_ms:.2f}; a logits "
                             f"kernel at the floor and this top-k: {floor_ms / (floor_ms + served):.2f}")
                line += ")"
                del logits
            print(line, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
