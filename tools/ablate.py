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
NO_HEAD_SUMS = ([(r"sm90::row_sums<kRows, kHeads>\((acc\[s\]|a), w, v\);",
                  r"for (int m = 0; m < Lane::kCount; ++m) v[m] = \1[m];")],
                "the relu / weight / head-sum epilogue")


def _halved(match: re.Match) -> str:
    """match.group(0) with its first number halved (N / 2 fp32 accumulators -> N / 4 half2 registers)."""
    return match.group(0).replace(match.group(1), str(int(match.group(1)) // 2), 1)


# Products accumulated in fp16 (wgmma .f16.e4m3.e4m3): every accumulator array N / 4 registers of packed
# half2 pairs, the pairs a half2 epilogue reads; the products take the fp16 overload of the wgmma
# wrapper (the fp16 gate's: common/wgmma.cuh.j2).
F16_PRODUCTS = [
    (r"float \(&acc\)\[(?:kSlices\]\[)?(\d+)\]", lambda m: "uint32_t" + _halved(m)[len("float"):]),
    (r"float acc\[((?:kSlices\]\[)?)kN / 2\];", r"uint32_t acc[\1kN / 4];"),
    (r"const float \(&a\)\[kN / 2\]", "const uint32_t (&a)[kN / 4]"),  # the gated kernel's append_scores
    (r"#include <cstdint>\n", "#include <cstdint>\n#include <cuda_fp16.h>\n"),
]
# The head sums in packed fp16 on those pairs: HMNMX2 (relu) and HFMA2 (w relu(x) added), one
# instruction an element, each lane's two heads of a pair in the two halves, each total in two half2
# chains, i.e. four chains of heads (with one half2 chain the H = 64 pick read 1.15x, with two 1.17x:
# experiment log, "2026-12-04: an fp16 gate's ceiling, measured").
HALF_HEAD_SUMS = [(r"(?s)    float sum\[L::kLaneRows\]\[2\]\[kSplit\] = \{\};\n#pragma unroll\n    for \(int j = 0; j < (\d+); \+\+j\) \{\n"
                   r".*?\n        \}\n    \}\n",
                   lambda m: f"""    float sum[L::kLaneRows][2][kSplit] = {{}};
    __half2 half_sum[L::kLaneRows][2][2];
#pragma unroll
    for (int i = 0; i < L::kLaneRows; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) half_sum[i][k >> 1][k & 1] = __float2half2_rn(0.f);
#pragma unroll
    for (int j = 0; j < {m.group(1)}; ++j) {{
        const int i = j % L::kLaneRows, chain = (j / L::kLaneRows) & 1;
        const __half2 w2 = reinterpret_cast<const __half2&>(w[j][0]);
#pragma unroll
        for (int k = 0; k < 2; ++k)  // register 2j + k: key g + 8k, heads e = 0, 1
            half_sum[i][k][chain] = __hfma2(w2, __hmax2(reinterpret_cast<const __half2&>(acc[2 * j + k]), __float2half2_rn(0.f)),
                                            half_sum[i][k][chain]);
    }}
#pragma unroll
    for (int i = 0; i < L::kLaneRows; ++i)
#pragma unroll
        for (int k = 0; k < 2; ++k) {{
            const float2 f = __half22float2(half_sum[i][k][0]), g = __half22float2(half_sum[i][k][1]);
            sum[i][k][0] = f.x + g.x;
            sum[i][k][kSplit - 1] += f.y + g.y;
        }}
"""),
                  # the weights packed once a row block, where they are loaded: (w[j][0], w[j][1]) as a half2 in w[j][0]
                  (r"(        w\[j\]\[1\] = live \? weights\[size_t\(row0 \+ r\) \* kHeads \+ h \+ 1\] : 0\.f;\n)",
                   r"\1        { const __half2 h2 = __floats2half2_rn(w[j][0], w[j][1]); w[j][0] = reinterpret_cast<const float&>(h2); }\n")]
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
    "f16_products_only": (F16_PRODUCTS + [(NO_HEAD_SUMS[0][0][0], r"for (int m = 0; m < Lane::kCount; ++m) v[m] = __uint_as_float(\1[m]);")]
                          + NO_SCAN_APPENDS[0],
                          "the epilogue and the appends, products accumulated in fp16 (their rate alone)"),
    # What a gate on fp16 sums costs ("Past the epilogue"; docs/fp16-gate.md): its scores are approximate
    # and no bound is added (a few instructions a (row, key) more), so the gate passes about what the
    # exact scores do; scoring the candidates again is not timed.
    "half_epilogue": (F16_PRODUCTS + HALF_HEAD_SUMS,
                      "the fp32 products and head sums (fp16 accumulators, HMNMX2 + HFMA2 head sums: approximate scores)"),
    # relu(x) = (x + |x|) / 2 with the linear half on the tensor core: one HFMA2 with |x| a pair of elements
    # (the extra product columns of the linear half are not added: their cost is the N they add).
    "half_abs_epilogue": (F16_PRODUCTS + [(HALF_HEAD_SUMS[0][0], lambda m: HALF_HEAD_SUMS[0][1](m).replace(
                              "__hmax2(reinterpret_cast<const __half2&>(acc[2 * j + k]), __float2half2_rn(0.f))",
                              "__habs2(reinterpret_cast<const __half2&>(acc[2 * j + k]))")), HALF_HEAD_SUMS[1]],
                          "the fp32 products and head sums (fp16 accumulators, one HFMA2 with |x| a pair: wrong scores)"),
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


# The ablations whose products accumulate in fp16: they retype every accumulator of the source, the
# rescan kernel's included (tests/test_build.py allows them that line).
RETYPE_ACCUMULATORS = {name for name, (patches, _) in GATED_ABLATIONS.items() if patches[0] is F16_PRODUCTS[0]}


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
    if args.only and not args.as_name:
        todo = {name: text for name, text in todo.items() if name in args.only}
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
    p.add_argument("--only", action="append", help="build or time only these (baseline, an ablation's or an --as name)")
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
