"""How the fp8 tensor cores accumulate, and how far the kernels' scores stray from exact (GPU).

    python tools/accumulation.py [--trials 32768] [--rows 32 --keys 8192] [--out results.json]
    python tools/accumulation.py --f16-steps 1 --f16-steps 4     # the fp16-accumulating mma.sync alone
    python tools/accumulation.py --wgmma-f16-steps 1 --wgmma-f16-steps 4 --wgmma-rate   # and wgmma's

1. The instructions. Random e4m3 values over the whole range (subnormals and zeros included) go
   through mma.sync m16n8k32 (tools/mma_probe.cu, the portable kernels' instruction, chained four
   times from a random fp32 C) and through the dense wgmma logits kernel (head 0 weighted 1, the
   others 0, unit key scales: each logit is relu of one dot product as every wgmma kernel
   accumulates it). Each result is compared bit for bit with generator.tensor_core's wgmma model and
   with the exact value rounded to fp32, and its error measured against the sum of the terms'
   magnitudes.
2. The kernels' scores. The dense wgmma logits of every workload family against exact scores (over
   B) and against the wgmma model's scores (over the bound generator.verify allows them: <= 1).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from generator.tensor_core import emulate_wgmma_dots, random_e4m3  # noqa: E402


def fit(observed: torch.Tensor, q: torch.Tensor, k: torch.Tensor, acc0: torch.Tensor | None = None,
        relu: bool = False) -> dict:
    """observed [r, H, n]: the hardware's dot products of q [r, H, 128] and k [n, 128] (plus acc0).
    Share reproduced bit for bit by generator.tensor_core's wgmma model and by fp32 rounding of the exact
    value, and the largest deviation from exact over the sum of the terms' magnitudes."""
    exact = torch.einsum("rhd,nd->rhn", q.double(), k.double())
    magnitude = torch.einsum("rhd,nd->rhn", q.double().abs(), k.double().abs())
    model = emulate_wgmma_dots(q, k)
    if acc0 is not None:  # (the wgmma model starts from 0: only compared where acc0 is 0)
        exact = exact + acc0
        magnitude = magnitude + acc0.abs()
    if relu:
        exact, model = exact.clamp(min=0), model.clamp(min=0)
    fp32 = exact.float().double()
    zero_start = torch.ones_like(observed, dtype=torch.bool) if acc0 is None else acc0 == 0
    obs = observed.double()
    return {"trials": observed.numel(),
            "wgmma model (generator.tensor_core), share": float((obs == model)[zero_start].float().mean()),
            "exact rounded to fp32, share": float((obs == fp32).float().mean()),
            "largest |obs - exact| / sum |terms|": float(((obs - exact).abs() / magnitude.clamp(min=1e-300)).max())}


def compile_probe(source: str, archs: tuple[str, ...], flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """tools/<source>, compiled here for the given archs (e.g. "89", "90a"), with nvcc `flags` besides."""
    from runtime.toolchain import nvcc_path

    lib_path = Path(tempfile.mkdtemp()) / Path(source).with_suffix(".so").name
    gencodes = [x for arch in archs for x in ("-gencode", f"arch=compute_{arch},code=sm_{arch}")]
    subprocess.run([nvcc_path(), "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", *gencodes, *flags, "-o",
                    str(lib_path), str(Path(__file__).with_name(source))], check=True)
    return ctypes.CDLL(str(lib_path))


def probe_library() -> ctypes.CDLL:
    """tools/mma_probe.cu, compiled here for sm_89 and sm_90a."""
    lib = compile_probe("mma_probe.cu", ("89", "90a"))
    lib.mma_probe.argtypes = lib.mma_probe_f16.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return lib


def wgmma_library() -> ctypes.CDLL:
    """tools/wgmma_probe.cu, compiled here for sm_90a."""
    lib = compile_probe("wgmma_probe.cu", ("90a",))
    lib.wgmma_probe_f16.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.wgmma_rate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def f16_accumulation(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, observed: torch.Tensor, steps: int) -> dict:
    """observed [g, m, n] fp16: the hardware's C + A B^T over `steps` chained k32 instructions (A [g, m, >= 32
    steps], B [g, n, ...] e4m3, C fp16). Shares of the results reproduced by the exact sum rounded to fp16
    once an instruction (each instruction's 32 products and C exactly, then one rounding) and once at the
    end, and the largest |result - exact| over (|C| + sum |products|), in units of u = 2^-11: what a
    rigorous bound for an fp16-accumulated dot product may assume."""
    k = 32 * steps
    a64, b64, obs = a[..., :k].double(), b[..., :k].double(), observed.double()
    per_instruction = c.double()
    for s in range(steps):
        part = torch.einsum("gik,gjk->gij", a64[:, :, 32 * s:32 * s + 32], b64[:, :, 32 * s:32 * s + 32])
        per_instruction = (per_instruction + part).half().double()
    exact = c.double() + torch.einsum("gik,gjk->gij", a64, b64)
    magnitude = c.double().abs() + torch.einsum("gik,gjk->gij", a64.abs(), b64.abs())
    return {"trials": obs.numel(), "steps": steps,
            "rounded once an instruction, share": float((obs == per_instruction).float().mean()),
            "rounded once at the end, share": float((obs == exact.half().double()).float().mean()),
            "largest |obs - exact| / (|C| + sum |terms|), in u": float(((obs - exact).abs() / magnitude).max()) / 2.0 ** -11}


def f16_operands(groups: int, m: int, n: int, k: int, gen) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normal e4m3 A [groups, m, k] and B [groups, n, k] (products and sums well inside fp16's range) and a
    random fp16 C [groups, m, n], its first quarter of columns 0."""
    a = torch.randn(groups, m, k, generator=gen, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(groups, n, k, generator=gen, device="cuda").to(torch.float8_e4m3fn)
    c = (torch.randn(groups, m, n, generator=gen, device="cuda") * 8).half()
    c[:, :, :n // 4] = 0
    return a, b, c


def run_f16_probe(probe, instruction: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, steps: int) -> dict:
    """One launch of an fp16-accumulating probe kernel over f16_operands' a, b, c: f16_accumulation's
    shares and largest error, named by the instruction."""
    d = torch.empty_like(c)
    err = probe(a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), a.shape[0], steps,
                torch.cuda.current_stream().cuda_stream)
    assert err == 0, err
    torch.cuda.synchronize()
    return {"instruction": instruction, **f16_accumulation(a, b, c, d, steps)}


def probe_mma_sync_f16(trials: int, gen, steps: int) -> dict:
    """tools/mma_probe.cu's fp16-accumulating mma.sync (16 x 8 tiles), `steps` chained instructions of 32
    products each from a random fp16 C."""
    return run_f16_probe(probe_library().mma_probe_f16, "mma.sync m16n8k32 f16",
                         *f16_operands(max(1, trials // 128), 16, 8, 32 * steps, gen), steps)


def probe_wgmma_f16(trials: int, gen, steps: int) -> dict:
    """tools/wgmma_probe.cu's fp16-accumulating wgmma (64 x 8 tiles, steps <= 4 chained k32 instructions
    from a random fp16 C)."""
    if not 1 <= steps <= 4:
        raise SystemExit(f"--wgmma-f16-steps must be 1..4 (one 128-byte row), got {steps}")
    return run_f16_probe(wgmma_library().wgmma_probe_f16, "wgmma m64n8k32 f16",
                         *f16_operands(max(1, trials // 512), 64, 8, 128, gen), steps)


def wgmma_rates(iters: int = 4096) -> dict:
    """TFLOP/s of back-to-back m64n128k32 fp8 products with fp32 and with fp16 accumulators (two
    warpgroups a CTA, two CTAs an SM), beside torch._scaled_mm's sustained rate: whether the fp16
    accumulators cost product rate."""
    from generator.timing import median_ms, scaled_mm_tflops

    lib = wgmma_library()
    ctas = 2 * torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.zeros(ctas, device="cuda")
    flops = ctas * 2 * 4 * iters * 2 * 64 * 128 * 32
    rates = {}
    for name, f16 in (("fp32 accumulators", 0), ("fp16 accumulators", 1), ("fp32 accumulators again", 0)):
        ms = median_ms(lambda: lib.wgmma_rate(f16, ctas, iters, out.data_ptr(), torch.cuda.current_stream().cuda_stream),
                       warmup=3, reps=15)
        rates[f"wgmma m64n128k32, {name}, TFLOP/s"] = flops / (ms * 1e-3) / 1e12
    rates["torch._scaled_mm sustained, TFLOP/s"] = scaled_mm_tflops()
    return rates


def probe_mma_sync(trials: int, gen) -> dict:
    """Every warp of tools/mma_probe.cu: 16 rows of A against 8 of B over 128 dims, from C (half the
    trials from 0): a trial is one (row, column) result."""
    lib = probe_library()
    groups = max(1, trials // 128)
    a = random_e4m3((groups, 16, 128), gen, "cuda")
    b = random_e4m3((groups, 8, 128), gen, "cuda")
    c = torch.randn(groups, 16, 8, generator=gen, device="cuda") * torch.exp2(
        torch.randint(-4, 12, (groups, 16, 8), generator=gen, device="cuda").float())
    c[:, :, :4] = 0
    d = torch.empty_like(c)
    err = lib.mma_probe(a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), groups, 4,
                        torch.cuda.current_stream().cuda_stream)
    assert err == 0, err
    torch.cuda.synchronize()
    # group g as r = g, H = 16 query vectors, n = 8 keys: fit's layout is [r, H, n]
    per_group = [fit(d[g][None], a[g][None], b[g], c[g][None].double()) for g in range(groups)]
    return {key: (sum(x[key] for x in per_group) if key == "trials" else
                  max(x[key] for x in per_group) if key.startswith("largest") else
                  sum(x[key] for x in per_group) / groups) for key in per_group[0]}


def dense_logits(variant, q, k_fp8, k_scale, weights, ks, ke) -> torch.Tensor:
    """The dense wgmma kernel's fp32 logits [rows, keys] (NaN where a row sees nothing, and on rows
    that see no more than the variant's top-k keys: those need none)."""
    from runtime.loader import load
    from runtime.scoring import logits_window

    lib = load(variant)
    rows, keys = q.shape[0], k_fp8.shape[0]
    window = logits_window(None, keys)
    raw = torch.full((rows, window), float("nan"), device=q.device)  # row r's key ks[r] + j at column j
    lib.logits(q.data_ptr(), k_fp8.data_ptr(), k_scale.data_ptr(), weights.data_ptr(), ks.data_ptr(), ke.data_ptr(),
               raw.data_ptr(), window, 0, rows, rows, keys, torch.cuda.current_stream().cuda_stream)
    cols = ks.long().clamp(min=0)[:, None] + torch.arange(window, device=q.device)[None, :]
    r, j = (cols < ke.long().clamp(max=keys)[:, None]).nonzero(as_tuple=True)
    logits = torch.full((rows, keys), float("nan"), device=q.device)
    logits[r, cols[r, j]] = raw[r, j]
    torch.cuda.synchronize()
    return logits


def probe_wgmma(trials: int, gen, heads: int = 32) -> dict:
    """The dense wgmma logits kernel with head 0 weighted 1 and the others 0, unit key scales: each
    logit is relu of one dot product as the wgmma kernels accumulate it."""
    from runtime.dense_variant import default_dense_variant

    rows, keys = 64, max(1024, trials // 64)  # (rows see more than top-512 keys: the kernel scores them)
    q = random_e4m3((rows, heads, 128), gen, "cuda")
    k = random_e4m3((keys, 128), gen, "cuda")
    weights = torch.zeros(rows, heads, device="cuda")
    weights[:, 0] = 1
    ks = torch.zeros(rows, dtype=torch.int32, device="cuda")
    ke = torch.full((rows,), keys, dtype=torch.int32, device="cuda")
    logits = dense_logits(default_dense_variant(heads, 512), q, k, torch.ones(keys, device="cuda"), weights, ks, ke)
    return fit(logits[:, None, :], q[:, :1], k, relu=True)


def deviation(families, heads_list, rows: int, keys: int) -> list[dict]:
    """Per family: how far the dense wgmma kernel's logits are from exact scores (over B, the sum of
    the terms' magnitudes) and from the scores of generator.tensor_core's wgmma model (over the bound
    generator.verify allows them: the fp32 head sum and scale; must stay <= 1)."""
    from generator.verify import (
        exact_scores,
        magnitude_bound,
        wgmma_bound,
        wgmma_scores,
    )
    from generator.workloads import make_workload
    from runtime.dense_variant import default_dense_variant

    out = []
    for heads in heads_list:
        for i, family in enumerate(families):
            wl = make_workload(family, rows, keys, heads, 2048, seed=300 + i, device="cuda")
            logits = dense_logits(default_dense_variant(heads, 512), wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks,
                                  wl.ke).double()
            every = torch.arange(rows, device="cuda")
            sub = (wl.q, wl.k_fp8, wl.k_scale, wl.weights, every, 0, wl.keys)
            exact, magnitude = exact_scores(*sub), magnitude_bound(*sub)
            model, bound = wgmma_scores(*sub), wgmma_bound(magnitude, heads)
            key = torch.arange(wl.keys, device="cuda")
            visible = (key >= wl.ks[:, None]) & (key < wl.ke[:, None])
            visible &= (wl.ke - wl.ks > 512)[:, None]  # (the kernel scores only rows that see more than top-k)

            def largest(x):
                return float(torch.where(visible, x, 0).max())

            out.append({"family": family, "heads": heads,
                        "max |logit - exact| / B": largest((logits - exact).abs() / magnitude.clamp(min=1e-300)),
                        "max |logit - model| / bound": largest((logits - model).abs() / bound.clamp(min=1e-300)),
                        "share of logits equal to the model's": float((logits == model.float().double())[visible]
                                                                    .float().mean()),
                        "nonfinite": int((~torch.isfinite(logits) & visible).sum())})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1 << 15)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--keys", type=int, default=12_288)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--f16-steps", type=int, action="append", default=[],
                    help="instead: the fp16-accumulating mma.sync over this many chained instructions (repeatable)")
    ap.add_argument("--wgmma-f16-steps", type=int, action="append", default=[],
                    help="instead: the fp16-accumulating wgmma over this many (1-4) chained instructions (repeatable)")
    ap.add_argument("--wgmma-rate", action="store_true",
                    help="instead: the wgmma product rate with fp32 and with fp16 accumulators")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU with fp8 tensor cores")
        return 2
    if args.f16_steps or args.wgmma_f16_steps or args.wgmma_rate:
        gen = torch.Generator(device="cuda").manual_seed(1)
        for steps in args.f16_steps:
            print(json.dumps(probe_mma_sync_f16(args.trials, gen, steps)), flush=True)
        for steps in args.wgmma_f16_steps:
            print(json.dumps(probe_wgmma_f16(args.trials, gen, steps)), flush=True)
        if args.wgmma_rate:
            print(json.dumps(wgmma_rates()), flush=True)
        return 0
    from generator.workloads import FAMILIES

    gen = torch.Generator(device="cuda").manual_seed(1)
    results = {"gpu": torch.cuda.get_device_name(), "mma_sync": probe_mma_sync(args.trials, gen),
               "wgmma": probe_wgmma(args.trials, gen)}
    for kind in ("mma_sync", "wgmma"):
        print(f"\n{kind}: share of {args.trials} trials reproduced bit for bit")
        for name, share in sorted(results[kind].items(), key=lambda x: -x[1])[:8]:
            print(f"  {share:8.4f}  {name}")
    results["deviation"] = deviation(list(FAMILIES), (32, 64), args.rows, args.keys)
    SAME = "share of logits equal to the model's"  # noqa: N806
    print("\nfamily            H   max |logit-exact|/B   max |logit-model|/bound   logits == model")
    for r in results["deviation"]:
        print(f"{r['family']:16s} {r['heads']:3d}   {r['max |logit - exact| / B']:19.3e}   "
              f"{r['max |logit - model| / bound']:23.4f}   {r[SAME]:.4f}"
              + (f"  {r['nonfinite']} non-finite" if r["nonfinite"] else ""))
    worst = max(r["max |logit - model| / bound"] for r in results["deviation"])
    exact_mma = results["mma_sync"]["largest |obs - exact| / sum |terms|"]
    print(f"\nwgmma logits: largest share of the verifier's bound used {worst:.4f} "
          f"({'within' if worst <= 1 else 'OVER'}); mma.sync: largest |error| / sum |terms| {exact_mma:.3g} "
          f"(the verifier's exact arithmetic allows 2^-16 = {2**-16:.3g} of B, less the epilogue's share)")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0 if worst <= 1 and exact_mma <= 2**-17 and not math.isnan(worst) else 1


if __name__ == "__main__":
    raise SystemExit(main())
