"""What a kernel change costs: two builds of the variants a chunk runs, timed in one call (GPU).

For each chunk (a causal ROWSxKEYS at each --heads and --top-k): the variant the shipped table's
entry for that bucket names (its fused variant where the entry says fused, else the dense path's
kernels, which also serve every chunk of fewer rows than any bucket), built twice as
.ablate/<variant>/<BUILD>.so (`tools/ablate.py build VARIANT --as BUILD`: at the commit before the
change and after it). Each build is timed on the GPU alone (timing.event_ms, the host's launch
hidden) in rounds that alternate the builds (a single pair can be off by 1-3%), the median of each
build's rounds kept; the last build's answer is verified strictly (README.md, "Same answer every
time"), the others by the two-sided rule. A line per chunk, and JSON lines to --log.

    python3 tools/compare_builds.py --shape 16384x131072 --shape 1x8192 --heads 32 --heads 64 \
        --top-k 512 --top-k 2048 --build prev --build new [--rounds 3] [--log cost.jsonl] [--variant NAME]

--variant times the named variant (of the chunk's heads and top-k) instead of the table's; chunks of
other heads or top-k are skipped then.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def table_variant(heads: int, top_k: int, rows: int, keys: int):
    """The variant the shipped table runs for this causal chunk: its bucket's fused variant where
    that entry says fused (None where the table has no entry of these rows and keys), else the dense
    path's (a DenseVariant)."""
    from runtime.dense_variant import SHORT_ROW_KEYS, default_dense_variant
    from runtime.table import SHIPPED_TABLE_DIR, table_path
    from runtime.variant import Variant

    entries = json.loads(table_path("H200-132SM", SHIPPED_TABLE_DIR).read_text())["entries"]
    for e in entries:
        if (e["heads"], e["top_k"], e["rows"], e["keys"], e.get("requests", 1)) == (heads, top_k, rows, keys, 1):
            if e["use"] == "fused":
                return Variant.from_name(e["variant"])
    return default_dense_variant(heads, top_k, short_rows=keys <= SHORT_ROW_KEYS)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", default=[], metavar="ROWSxKEYS", required=True)
    p.add_argument("--heads", type=int, action="append", default=[])
    p.add_argument("--top-k", type=int, action="append", default=[])
    p.add_argument("--build", action="append", default=[], required=True, help="builds to compare (the last is verified strictly)")
    p.add_argument("--out", default=".ablate", help="where the builds are (default .ablate)")
    p.add_argument("--rounds", type=int, default=3, help="rounds alternating the builds (default 3)")
    p.add_argument("--log", help="JSON lines, one a chunk")
    p.add_argument("--variant", action="append", default=[],
                   help="time this variant instead of the table's where its heads and top-k are the chunk's")
    args = p.parse_args()

    import torch

    from generator.timing import median_ms
    from generator.verify import verify_topk
    from generator.workloads import make_workload
    from runtime.dense import DEFAULT_LOGITS_BUDGET, _dense_kernels
    from runtime.dense_variant import DenseVariant
    from runtime.fused import launch_variant
    from runtime.build import spec_from_name
    from runtime.loader import DenseLibrary, KernelLibrary

    log = open(args.log, "a") if args.log else None
    print(f"{torch.cuda.get_device_name()}; GPU ms, median over {args.rounds} rounds alternating "
          f"{' / '.join(args.build)}", flush=True)
    bad = 0
    for heads in args.heads or [32]:
        for top_k in args.top_k or [2048]:
            for spec in args.shape:
                rows, keys = (int(x) for x in spec.split("x"))
                forced = [v for v in map(spec_from_name, args.variant) if (v.heads, v.top_k) == (heads, top_k)]
                if args.variant and not forced:
                    continue
                variant = forced[0] if forced else table_variant(heads, top_k, rows, keys)
                wl = make_workload("random", rows, keys, heads, top_k, seed=rows + keys, device="cuda")
                out = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
                dense = isinstance(variant, DenseVariant)
                calls = {}
                for build in args.build:
                    path = str(Path(args.out) / variant.name / f"{build}.so")
                    if dense:
                        lib = DenseLibrary(variant, path)
                        calls[build] = (lambda lib=lib: _dense_kernels(lib, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks,
                                                                       wl.ke, top_k, DEFAULT_LOGITS_BUDGET, keys, out))
                    else:
                        lib = KernelLibrary(variant, path)
                        calls[build] = (lambda lib=lib: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights,
                                                                       wl.ks, wl.ke, top_k, out=out, lib=lib))
                times: dict[str, list[float]] = {b: [] for b in args.build}
                for _ in range(args.rounds):
                    for build, call in calls.items():
                        times[build].append(median_ms(call, warmup=2, reps=7, max_seconds=1.5, hide_launch=True))
                ok = {}
                for build, call in calls.items():
                    out.fill_(-7)
                    call()
                    ok[build] = verify_topk(out, *wl.args(), rows=range(0, rows, max(1, rows // 48)),
                                            strict=build == args.build[-1]).ok
                bad += not all(ok.values())
                ms = {b: statistics.median(t) for b, t in times.items()}
                base = ms[args.build[0]]
                line = f"h{heads} k{top_k} {rows:>6} x {keys:>8} {variant.name}: " + "  ".join(
                    f"{b} {m:.4f}{'' if ok[b] else ' BAD'}" for b, m in ms.items())
                line += "  " + "  ".join(f"{b}/{args.build[0]} {m / base:.4f} ({m - base:+.4f} ms)"
                                         for b, m in ms.items() if b != args.build[0])
                print(line, flush=True)
                if log:
                    log.write(json.dumps({"heads": heads, "top_k": top_k, "rows": rows, "keys": keys,
                                          "variant": variant.name, "ms": ms, "rounds": times, "ok": ok}) + "\n")
                    log.flush()
                calls.clear()  # (the next chunk's tensors replace this one's)
                torch.cuda.empty_cache()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
