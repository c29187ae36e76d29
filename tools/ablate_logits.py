"""Where does the dense logits kernel's time go? Time copies of one variant that each leave a stage out.

The device has no hardware counters on every runtime, so this places time by difference (the method
the device notes recommend): each ablation is the variant's rendered source with one textual patch,
compiled with the same flags, and timed with the same harness as `bench` on the same chunk. The
results are not correct logits, only times; the patches must still apply, or the tool says which
one went stale.

    python tools/ablate_logits.py build VARIANT --out .ablate      # here: render, patch, compile
    python tools/ablate_logits.py time VARIANT --out .ablate --shape 16384x131072   # on the GPU
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generator.build import nvcc_flags, nvcc_path  # noqa: E402
from generator.dense_variant import DenseVariant  # noqa: E402
from generator.render import render  # noqa: E402

# name -> (regex, replacement, what it shows)
ABLATIONS = {
    "no_head_sums": (r"sm90::head_sums<kRows, kHeads>\(acc\[s\], w, v\);",
                     "for (int m = 0; m < sm90::owned_totals(kRows); ++m) v[m] = acc[s][m];",
                     "the relu / weight / head-sum epilogue"),
    "no_stores": (r"out_row\[m\]\[key\] = v\[m\] \* scale;",
                  "if (key == -7) out_row[m][key] = v[m] * scale;",
                  "the fp32 logits stores"),
    "no_mma": (r"wgmma_m64n(\d+)k32_e4m3\(acc, keys_desc \+ 2 \* k, queries_desc \+ 2 \* k, k\);",
               r"if (k == 7) wgmma_m64n\1k32_e4m3(acc, keys_desc + 2 * k, queries_desc + 2 * k, k);",
               "the tensor-core products"),
    "one_key_tile": (r"smem \+ kScaleRingOffset \+ s \* kScaleTileBytes, &k_map, &scale_map, tile, kKeyTile\);",
                     "smem + kScaleRingOffset + s * kScaleTileBytes, &k_map, &scale_map, range.lo, kKeyTile);",
                     "streaming K from L2 / HBM (every tile of a unit reloads its first)"),
}


def sources(variant: DenseVariant) -> dict[str, str]:
    base = render(variant)
    out = {"baseline": base}
    for name, (pattern, repl, _) in ABLATIONS.items():
        text, n = re.subn(pattern, repl, base)
        if n == 0:
            raise SystemExit(f"ablation {name}: its patch no longer matches the template")
        out[name] = text
    return out


def cmd_build(args) -> int:
    variant = DenseVariant.from_name(args.variant)
    folder = Path(args.out) / variant.name
    folder.mkdir(parents=True, exist_ok=True)
    procs = []
    for name, text in sources(variant).items():
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

    from generator.bench import logits_only_ms, scaled_mm_tflops
    from generator.timing import scoring_tflops, visible_pairs
    from runtime.loader import DenseLibrary
    from runtime.workloads import make_workload

    variant = DenseVariant.from_name(args.variant)
    folder = Path(args.out) / variant.name
    print(f"torch._scaled_mm fp8: {scaled_mm_tflops():.0f} TFLOP/s on {torch.cuda.get_device_name()}")
    for spec in args.shape:
        rows, keys = (int(x) for x in spec.split("x"))
        wl = make_workload("random", rows, keys, variant.heads, variant.top_k, seed=1, device="cuda")
        pairs = visible_pairs(wl.ks, wl.ke)
        base = None
        for name in args.only or ["baseline", *ABLATIONS]:
            lib = DenseLibrary(variant, str(folder / f"{name}.so"))
            ms = logits_only_ms(wl, 512 << 20, variant, lib=lib)
            base = base if base is not None else ms  # the first timed build is the reference
            what = ABLATIONS[name][2] if name in ABLATIONS else ""
            print(f"{variant.name} {rows}x{keys} {name:>13}: {ms:7.2f} ms ({scoring_tflops(pairs, variant.heads, ms):4.0f} "
                  f"TFLOP/s) {ms - base:+7.2f} ms vs baseline  {('without ' + what) if what else ''}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("build", "time"))
    p.add_argument("variant", nargs="+")
    p.add_argument("--out", default=".ablate")
    p.add_argument("--shape", action="append", default=[], metavar="MxN")
    p.add_argument("--only", action="append", help="time only these builds (baseline or an ablation's name)")
    args = p.parse_args()
    rc = 0
    for name in args.variant:
        one = argparse.Namespace(**{**vars(args), "variant": name})
        rc |= cmd_build(one) if args.what == "build" else cmd_time(one)
    return rc


if __name__ == "__main__":
    sys.exit(main())
