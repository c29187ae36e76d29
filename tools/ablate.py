"""Where does a kernel's time go? Time copies of one variant that each leave a stage out.

The device has no hardware counters on every runtime, so this places time by difference (the method
the device notes recommend): each ablation is the variant's rendered source with one textual patch,
compiled with the same flags, and timed with the same harness as `bench` on the same chunk. The
results are not correct outputs, only times; the patches must still apply (CI checks), or the tool
says which one went stale. Dense variants (mqa_dense_...) time the logits kernel alone; gated fused
variants (..._m<n>) time the whole launch and report how many blocks took the rescan, which an
ablation must not change.

    python tools/ablate.py build VARIANT... --out .ablate        # here: render, patch, compile
    python tools/ablate.py time VARIANT... --out .ablate --shape 16384x131072 [--requests 8]   # on the GPU

To time a change against the commit before it, build the unpatched source of each as a named build
(`build VARIANT --as prev` at the old commit, `--as new` after the change), then `time VARIANT
--only prev --only new --only prev --only new ...` (alternate: a single pair can be off by 1-3%).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.build import nvcc_flags, spec_from_name  # noqa: E402
from runtime.toolchain import nvcc_path  # noqa: E402
from runtime.dense_variant import DenseVariant  # noqa: E402
from runtime.render import render  # noqa: E402
from tools.cli import variant_tool_parser  # noqa: E402

# name -> ([(regex, replacement), ...], what it leaves out), per kind of kernel
# The head sums with w |x| for w relu(x): one FFMA an element instead of FMNMX + FFMA, i.e. what the
# fmax costs (10-12% on an H200; buying it back with more product columns did not pay: BENCHMARKS.md,
# experiment log, "2026-11-29: epilogue experiments").
NO_RELU = ([(r"s = fmaf\(w\[j\]\[c & 1\], fmaxf\(acc\[4 \* j \+ c\], 0\.f\), s\);",
             "s = fmaf(w[j][c & 1], fabsf(acc[4 * j + c]), s);")],
           "the relu's fmax (w |x| summed instead: wrong scores, the time of one FFMA an element)")
# No epilogue arithmetic at all: each lane's totals are raw dot products (in the gated kernel the
# gate, taken from the same raw values, still passes about as many keys): the scoring pipeline alone.
NO_HEAD_SUMS = ([(r"sm90::row_sums<kRows, kHeads>\(acc\[s\], w, v\);",
                  "for (int m = 0; m < Lane::kCount; ++m) v[m] = acc[s][m];")],
                "the relu / weight / head-sum epilogue")
DENSE_ABLATIONS = {
    "no_head_sums": NO_HEAD_SUMS,
    "no_stores": ([(r"(out_row\[Lane::row_slot\(m\)\]\[key\[Lane::key_slot\(m\)\]\] = )", r"if (key[0] == -7) \1")],
                  "the fp32 logits stores"),
    "no_mma": ([(r"(wgmma_m64n\d+k32_e4m3\(acc, kKmajorSw128High \| \(keys_start \+ 2 \* k\), kKmajorSw128High \| \(queries_start \+ 2 \* k\), k\);)",
                 r"if (k == 7) \1")],
               "the tensor-core products"),
    "no_relu": NO_RELU,
    "one_key_tile": ([(r"smem \+ Layout::kScaleRingOffset \+ s \* kScaleTileBytes, &k_map, &scale_map, tile, kKeyTile\);",
                       "smem + Layout::kScaleRingOffset + s * kScaleTileBytes, &k_map, &scale_map, range.lo, kKeyTile);")],
                     "streaming K from L2 / HBM (every tile of a unit reloads its first)"),
}
NO_SCAN_APPENDS = ([(r"!\(score\[m\] < own_gate\[i\]\);", "!(score[m] < own_gate[i]) && own_gate[i] != own_gate[i];"),  # NaN: no gate yet (the sample)
                    (r"served &= theta\[r\] == 0 \|\| count\[r\] >= kTopK", "served &= true")],
                   "the scan's slab appends (so the selection has nothing to select)")
GATED_ABLATIONS = {
    "no_relu": NO_RELU,
    "no_head_sums": NO_HEAD_SUMS,
    "no_select": ([(r"(sel::write_top_k_rows_binned<kGroupThreads, kRows, kGather, kRadixFallback>\()", r"(row0 >= 0) || \1")],
                  "the per-block selection from the slabs (no answers written)"),
    "no_scan_appends": NO_SCAN_APPENDS,
    # The scan loop's tensor-core pipeline alone (TMA ring, products, waits): no epilogue, no appends.
    "products_only": (NO_HEAD_SUMS[0] + NO_SCAN_APPENDS[0], "the epilogue and the appends (the scan's products alone)"),
    "no_range_checks": ([(r"pass\[m\] = key\[k\] >= own_ks\[i\] && key\[k\] < own_ke\[i\] && ", "pass[m] = ")],
                        "the scan's visible-range test (keys past a row's end appended too)"),
    "select_histogram_only": ([(r"(\n    // 2\. Write what is above the boundary bin)", r"\n    return true;  // ablated\1")],
                              "the selection's write pass and rank step (its histogram and boundary search only)"),
    "select_no_rank": ([(r"(\n    // 3\. The boundary bin's best)", r"\n    return true;  // ablated\1")],
                       "the selection's rank step (the boundary bin's answers)"),
    # (one tile's scores repeated do not suit the gate: no block may take the rescan, or it is timed too)
    "one_key_tile": ([(r"load_tile\(sample_tile\(range\.x, tiles, samples, i\)\);", "load_tile(range.x);"),
                      (r"tile \+= kKeyTile\) load_tile\(tile\);", "tile += kKeyTile) load_tile(range.x);"),
                      (r"served &= filled\[r \* kMathWarps \+ w\] <= kSegment;", "served &= true;"),
                      (r"served &= theta\[r\] == 0 \|\| count\[r\] >= kTopK", "served &= true")],
                     "streaming K from L2 / HBM (every tile of a block, sample included, reloads its first)"),
}


def ablations(variant) -> dict:
    if isinstance(variant, DenseVariant):
        return DENSE_ABLATIONS
    if variant.gated:
        return GATED_ABLATIONS
    raise SystemExit(f"{variant.name}: ablations exist for dense and gated variants only")


def sources(variant) -> dict[str, str]:
    base = render(variant)
    out = {"baseline": base}
    for name, (patches, _) in ablations(variant).items():
        text = base
        for pattern, repl in patches:
            text, n = re.subn(pattern, repl, text)
            if n == 0:
                raise SystemExit(f"ablation {name}: its patch {pattern!r} no longer matches the template")
        out[name] = text
    return out


def cmd_build(args) -> int:
    variant = spec_from_name(args.variant)
    folder = Path(args.out) / variant.name
    folder.mkdir(parents=True, exist_ok=True)
    procs = []
    todo = {args.as_name: render(variant)} if args.as_name else sources(variant)
    for name, text in todo.items():
        src = folder / f"{name}.cu"
        src.write_text(text)
        cmd = [nvcc_path(), *nvcc_flags(variant), "-o", str(folder / f"{name}.so"), str(src)]
        procs.append((name, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    ok = True
    for name, p in procs:
        log = p.communicate()[0]
        (folder / f"{name}.log").write_text(log)
        if p.returncode:
            print(f"{name}: nvcc failed, see {folder / (name + '.log')}")
            ok = False
    print(f"built {len(procs)} libraries into {folder}")
    return 0 if ok else 1


def cmd_time(args) -> int:
    import torch

    from generator.bench import logits_only_ms
    from generator.timing import (
        median_ms,
        scaled_mm_tflops,
        scoring_tflops,
        visible_pairs,
    )
    from generator.workloads import packed_workload
    from runtime.fused import launch_variant
    from runtime.loader import DenseLibrary, KernelLibrary

    variant = spec_from_name(args.variant)
    dense = isinstance(variant, DenseVariant)
    folder = Path(args.out) / variant.name
    table = ablations(variant)
    print(f"torch._scaled_mm fp8: {scaled_mm_tflops():.0f} TFLOP/s on {torch.cuda.get_device_name()}")
    for spec, requests in ((spec, requests) for spec in args.shape for requests in args.requests or [1]):
        rows, keys = (int(x) for x in spec.split("x"))
        wl = packed_workload(rows, keys, variant.heads, variant.top_k, requests, seed=1, device="cuda")
        pairs = visible_pairs(wl.ks, wl.ke)
        base = None
        for name in args.only or ["baseline", *table]:
            path = str(folder / f"{name}.so")
            note = ""
            if dense:
                ms = logits_only_ms(wl, 512 << 20, variant, lib=DenseLibrary(variant, path))
            else:
                lib = KernelLibrary(variant, path)
                run = lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke,  # noqa: E731
                                             wl.top_k, lib=lib)
                stats: dict = {}
                launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, lib=lib,
                               stats=stats)
                # (with 5 runs, repeated readings of one build varied by 2-5%: experiment log,
                # "2026-11-30: loose sample select")
                ms = median_ms(run, warmup=2, reps=15, max_seconds=3.0, hide_launch=True)
                note = f", {stats['rescan_blocks']} blocks rescanned, {stats['split_blocks']} split"
            base = base if base is not None else ms  # the first timed build is the reference
            what = table[name][1] if name in table else ""
            print(f"{variant.name} {requests} x {rows // requests}x{keys // requests} {name:>15}: {ms:7.2f} ms ({scoring_tflops(pairs, variant.heads, ms):4.0f} "
                  f"TFLOP/s{note}) {ms - base:+7.2f} ms vs baseline  {('without ' + what) if what else ''}", flush=True)
    return 0


def main() -> int:
    p = variant_tool_parser(__doc__, ("build", "time"))
    p.add_argument("--only", action="append", help="time only these builds (baseline, an ablation's or an --as name)")
    p.add_argument("--requests", type=int, action="append", default=[],
                   help="time: each shape also as this many packed requests (rows and keys split evenly)")
    p.add_argument("--as", dest="as_name", help="build: only the unpatched source, as <AS>.so (e.g. prev, new)")
    args = p.parse_args()
    rc = 0
    for name in args.variant:
        one = argparse.Namespace(**{**vars(args), "variant": name})
        rc |= cmd_build(one) if args.what == "build" else cmd_time(one)
    return rc


if __name__ == "__main__":
    sys.exit(main())
