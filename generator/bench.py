"""`python -m generator bench`: the dense path's parts and the fused kernel, timed in one run.

Prints, for the GPU it runs on:
  * torch._scaled_mm fp8 throughput at 8192^3 (the ceiling every rate below is compared with), in a
    burst and sustained for --sustain seconds (a power-capped GPU clocks lower under sustained load);
  * per causal chunk shape (and data distribution: --distribution, generator/distributions.py): the
    logits kernel alone (all pieces; TFLOP/s over visible pairs), the whole dense path (logits + our
    top-k), and any fused variants named, each verified on sampled rows,
    then the dense path and the fused variants timed in turn (timing.interleaved_ms, as tune's settling
    and the sweep time theirs: medians with their spreads);
  * our top-k kernel against torch.topk on the same [rows, keys] fp32 logits, timed in turn, checked exact.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch

from runtime.defaults import default_variant
from runtime.dense import dense_mqa_topk, dense_variant_for
from runtime.dense_variant import DenseVariant
from runtime.fused import launch_variant
from runtime.gpu import device_identity
from runtime.loader import aligned16 as _aligned
from runtime.loader import load
from runtime.scoring import logits_window, window_pieces
from runtime.table import load_table, nearest, table_for
from runtime.variant import Variant

from .distributions import add_distribution_option, chunk_workload
from .timing import (
    interleaved_ms,
    median_ms,
    scaled_mm_tflops,
    scoring_floor_ms,
    scoring_tflops,
    visible_pairs,
)
from .verify import verify_topk
from .workloads import make_workload


def fused_variant(name: str, heads: int, top_k: int, rows: int, keys: int) -> Variant:
    """`name`, or 'default' (the untuned default), or 'table' (what the runtime dispatches this shape to
    on this GPU: the nearest bucket's variant of its tuned table, the default where there is none)."""
    if name == "table":
        entry = nearest(load_table(table_for(device_identity(torch.cuda.current_device())).path) or [], heads, top_k, rows, keys)
        return Variant.from_name(entry.variant) if entry else default_variant(heads, top_k)
    return default_variant(heads, top_k) if name == "default" else Variant.from_name(name)


def logits_only_ms(wl, budget: int, variant: DenseVariant | None = None, lib=None) -> float:
    """The logits kernel over every piece of the dense path, without the top-k, on the GPU alone
    (`lib`: an already opened DenseLibrary, e.g. a patched build, instead of the variant's)."""
    lib = lib or load(variant or dense_variant_for(wl.q.device, wl.heads, wl.top_k))
    q, k, s = _aligned(wl.q), _aligned(wl.k_fp8), _aligned(wl.k_scale)
    window, per = window_pieces(wl.rows, wl.keys, wl.longest_row(), budget)  # as the dense path plans them
    logits = torch.empty(per * window, dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream

    def run():
        for r0 in range(0, wl.rows, per):
            lib.logits(q.data_ptr(), k.data_ptr(), s.data_ptr(), wl.weights.data_ptr(), wl.ks.data_ptr(),
                       wl.ke.data_ptr(), logits.data_ptr(), window, r0, min(per, wl.rows - r0), wl.rows, wl.keys, stream)

    return median_ms(run, warmup=2, reps=10, hide_launch=True)


def chunk_logits(lib, wl) -> tuple[torch.Tensor, int]:
    """The whole chunk's logits by `lib`'s logits kernel, as one piece in windows of its longest row
    (the dense path's layout), and the window."""
    window = logits_window(wl.longest_row(), wl.keys)
    logits = torch.empty(wl.rows * window, dtype=torch.float32, device="cuda")
    logits_launch(lib, wl, logits, window)()
    return logits, window


def logits_launch(lib, wl, logits: torch.Tensor, window: int):
    """chunk_logits' launch into `logits` as a closure, with nothing read back (to time the kernel alone)."""
    q, k, s = _aligned(wl.q), _aligned(wl.k_fp8), _aligned(wl.k_scale)
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: lib.logits(q.data_ptr(), k.data_ptr(), s.data_ptr(), wl.weights.data_ptr(), wl.ks.data_ptr(),
                              wl.ke.data_ptr(), logits.data_ptr(), window, 0, wl.rows, wl.rows, wl.keys, stream)


def topk_alone_ms(wl) -> float:
    """Our top-k kernel over the whole chunk's real logits, materialised once as one piece."""
    lib = load(dense_variant_for(wl.q.device, wl.heads, wl.top_k))
    logits, window = chunk_logits(lib, wl)
    out = torch.empty((wl.rows, wl.top_k), dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    return median_ms(lambda: lib.topk(logits.data_ptr(), window, wl.ks.data_ptr(), wl.ke.data_ptr(), 0, wl.rows,
                                      wl.keys, out.data_ptr(), stream), warmup=2, reps=10)


def topk_versus_torch(rows: int, keys: int, top_k: int, heads: int = 32, variant: DenseVariant | None = None) -> dict:
    """Our top-k kernel (the default dense variant's, or `variant`'s) and torch.topk on the same fp32
    logits [rows, keys] (every row sees every key)."""
    variant = variant or dense_variant_for(torch.device("cuda"), heads, top_k)
    lib = load(variant)
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(rows, keys, generator=g, device="cuda").relu_().mul_(3.0)  # relu-like: many exact zeros
    ks = torch.zeros(rows, dtype=torch.int32, device="cuda")
    ke = torch.full((rows,), keys, dtype=torch.int32, device="cuda")
    out = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream

    def ours():
        lib.topk(logits.data_ptr(), keys, ks.data_ptr(), ke.data_ptr(), 0, rows, keys, out.data_ptr(), stream,
                 short_rows=False)

    timed = interleaved_ms({"ours": ours, "torch": lambda: torch.topk(logits, top_k, dim=1)}, warmup=2)
    ours_ms, torch_ms = timed["ours"].ms, timed["torch"].ms
    ours()
    kth = torch.topk(logits, top_k, dim=1).values[:, -1:]
    chosen = logits.gather(1, out.long())
    exact = bool((chosen >= kth).all()) and all(out[i].unique().numel() == top_k for i in range(0, rows, max(1, rows // 64)))
    return {"variant": variant.name, "rows": rows, "keys": keys, "top_k": top_k, "ours_ms": ours_ms, "torch_ms": torch_ms,
            "speedup": torch_ms / ours_ms, "exact": exact}


def main(args) -> int:
    if not torch.cuda.is_available():
        print("bench needs a CUDA GPU.")
        return 2
    if args.sweep:
        from .serving_path import InstalledServing, ServingUnavailable, read_serving
        from .sweep import run

        if args.serving == "installed":
            try:
                serving = InstalledServing.find()
            except ServingUnavailable as e:
                print(f"bench --sweep --serving installed: {e}. Install vLLM (with DeepGEMM) in this environment, or "
                      "pass --serving FILE with the serving path's times (CONTRIBUTING.md).")
                return 2
        else:
            serving = read_serving(Path(args.serving)) if args.serving else {}
        return run(args.heads or [32, 64], args.top_k or [512, 2048], serving,
                   Path(args.log) if args.log else None, sustain_s=args.sustain or 3.0)
    gpu = torch.cuda.get_device_name()
    log = open(args.log, "a") if args.log else None

    def emit(kind: str, row: dict, text: str):
        print(text, flush=True)
        if log:
            log.write(json.dumps({"kind": kind, "gpu": gpu, **row}) + "\n")

    peak = scaled_mm_tflops()
    sustained = scaled_mm_tflops(seconds=args.sustain) if args.sustain else peak
    emit("scaled_mm", {"tflops": peak, "sustained_tflops": sustained},
         f"torch._scaled_mm fp8 8192^3: {peak:.0f} TFLOP/s on {gpu} (a burst of 20)"
         + (f"; {sustained:.0f} sustained over {args.sustain:g} s" if args.sustain else ""))
    ok = True
    for spec in args.shape:
        rows, keys = (int(x) for x in spec.split("x"))
        for heads in args.heads:
            for top_k, distribution in itertools.product(args.top_k, args.distribution or [None]):
                wl = (chunk_workload(distribution, rows, keys, heads, top_k, seed=1, device="cuda") if distribution
                      else make_workload("random", rows, keys, heads, top_k, seed=1, device="cuda"))
                pairs = visible_pairs(wl.ks, wl.ke)
                floor_ms = scoring_floor_ms(pairs, heads, peak)
                sustained_floor_ms = floor_ms * peak / sustained
                lg = logits_only_ms(wl, args.budget)
                for name in args.dense:
                    dv = DenseVariant.from_name(name)
                    if (dv.heads, dv.top_k) == (heads, top_k):
                        ms = logits_only_ms(wl, args.budget, dv)
                        out = dense_mqa_topk(*wl.args(), validate=False, logits_budget_bytes=args.budget, variant=dv)
                        vrep = verify_topk(out, *wl.args(), rows=range(0, rows, max(1, rows // 48)))
                        ok &= vrep.ok
                        emit("logits", {"variant": name, "rows": rows, "keys": keys, "logits_ms": ms,
                                        "logits_tflops": scoring_tflops(pairs, heads, ms), "verified": vrep.ok},
                             f"  logits {name}: {ms:.2f} ms ({scoring_tflops(pairs, heads, ms):.0f} TFLOP/s) "
                             f"[{vrep.summary()}]")
                tk = topk_alone_ms(wl) if args.topk_alone else None
                dense_out = dense_mqa_topk(*wl.args(), validate=False, logits_budget_bytes=args.budget)
                rep = verify_topk(dense_out, *wl.args(), rows=range(0, rows, max(1, rows // 48)))
                ok &= rep.ok
                fused = []  # (variant, its verification, rescan stats): verified first, then timed with dense
                for name in args.fused:
                    v = fused_variant(name, heads, top_k, rows, keys)
                    if (v.heads, v.top_k) != (heads, top_k):
                        continue
                    stats: dict = {}
                    fused_out = launch_variant(v, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, top_k, stats=stats)
                    frep = verify_topk(fused_out, *wl.args(), rows=range(0, rows, max(1, rows // 48)))
                    ok &= frep.ok
                    fused.append((v, frep, stats))
                calls = {"dense": lambda: dense_mqa_topk(*wl.args(), validate=False, logits_budget_bytes=args.budget)}
                for v, _, _ in fused:
                    calls[v.name] = (lambda v=v: launch_variant(v, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke,
                                                                top_k))
                timed = interleaved_ms(calls, max_seconds=20.0 * len(calls))  # (tune's and the sweep's method)
                dense_ms = timed["dense"].ms
                row = {"rows": rows, "keys": keys, "heads": heads, "top_k": top_k, "distribution": wl.family,
                       "logits_ms": lg, "topk_ms": tk,
                       "logits_tflops": scoring_tflops(pairs, heads, lg), "logits_vs_scaled_mm": scoring_tflops(pairs, heads, lg) / peak,
                       "dense_ms": dense_ms, "dense_spread": timed["dense"].spread, "dense_verified": rep.ok,
                       "floor_ms": floor_ms, "sustained_floor_ms": sustained_floor_ms}
                emit("dense", row, f"M={rows} N={keys} H={heads} k={top_k} {wl.family}: logits {lg:.2f} ms "
                     f"({row['logits_tflops']:.0f} TFLOP/s, {row['logits_vs_scaled_mm']:.2f} of _scaled_mm), dense total "
                     f"{dense_ms:.2f} ms (+-{timed['dense'].spread:.1%}) [{rep.summary()}], fp8 floor {floor_ms:.2f} ms "
                     f"({sustained_floor_ms:.2f} sustained)" + (f", top-k alone {tk:.2f} ms" if tk is not None else ""))
                for v, frep, stats in fused:
                    fms = timed[v.name].ms
                    rescans = (f", rescanned {stats['rescan_blocks']}/{-(-rows // v.rows)} blocks, {stats['split_blocks']} split"
                               if stats else "")
                    emit("fused", {"variant": v.name, "rows": rows, "keys": keys, "heads": heads, "top_k": top_k,
                                   "distribution": wl.family,
                                   "rescan_blocks": stats.get("rescan_blocks"), "split_blocks": stats.get("split_blocks"),
                                   "fused_ms": fms, "fused_spread": timed[v.name].spread, "dense_ms": dense_ms,
                                   "speedup": dense_ms / fms, "floor_fraction": floor_ms / fms,
                                   "sustained_floor_fraction": sustained_floor_ms / fms, "verified": frep.ok},
                         f"  fused {v.name}: {fms:.2f} ms (+-{timed[v.name].spread:.1%}) = {dense_ms / fms:.2f}x dense, "
                         f"{floor_ms / fms:.2f} of the fp8 floor ({sustained_floor_ms / fms:.2f} of the sustained one) "
                         f"[{frep.summary()}{rescans}]")
    for spec in args.topk:
        rows, keys = (int(x) for x in spec.split("x"))
        for top_k in args.top_k:
            others = [DenseVariant.from_name(n) for n in args.dense]
            for variant in [None] + [v for v in others if v.top_k == top_k]:
                r = topk_versus_torch(rows, keys, top_k, variant=variant)
                ok &= r["exact"]
                emit("topk", r, f"top-k [{rows} x {keys}] k={top_k} ({r['variant']}): ours {r['ours_ms']:.3f} ms, "
                     f"torch.topk {r['torch_ms']:.3f} ms -> {r['speedup']:.2f}x, exact={r['exact']}")
    return 0 if ok else 1


def add_arguments(p) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="MxN", help="causal chunk rows x keys")
    p.add_argument("--heads", type=int, action="append", help="heads (repeatable; default 32)")
    p.add_argument("--top-k", dest="top_k", type=int, action="append", help="top-k (repeatable; default 2048)")
    p.add_argument("--fused", action="append", default=[], metavar="VARIANT",
                   help="also time this fused variant ('default': the default variant of each heads/top-k; "
                        "'table': the tuned table's variant for the shape, as the runtime picks it)")
    p.add_argument("--topk", action="append", default=[], metavar="RxN", help="our top-k vs torch.topk on [R, N] logits")
    add_distribution_option(p, "the chunks' data (repeatable; default: the `random` workload family, normal weights)")
    p.add_argument("--sustain", type=float, default=3.0, metavar="SECONDS",
                   help="also time _scaled_mm back to back for this long: the floor under sustained load (0: skip)")
    p.add_argument("--budget", type=int, default=512 << 20, help="dense logits budget in bytes (default 512 MiB)")
    p.add_argument("--dense", action="append", default=[], metavar="VARIANT", help="also time this dense variant's logits")
    p.add_argument("--topk-alone", action="store_true", help="time our top-k over the whole chunk's logits (needs rows x keys x 4 bytes)")
    p.add_argument("--log", help="append JSON lines here")
    p.add_argument("--sweep", action="store_true",
                   help="the chunks a server sends (generator/sweep.py): rows 1-16K x keys 8K-512K x 1 or 8 requests, "
                        "AUTO vs our dense path, floor share, verified (default heads 32 and 64, top-k 512 and 2048)")
    p.add_argument("--serving", metavar="JSONL|installed",
                   help="with --sweep: the serving path to compare with: a file of its ms per shape, or 'installed': "
                        "vLLM's and DeepGEMM's own ops on this machine, timed in the same run")
