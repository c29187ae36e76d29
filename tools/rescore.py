"""What rescoring a candidate exactly costs beside a (row, key) of today's scan (GPU): the measurement the
fp16-gate plan's estimate assumed (docs/fp16-gate.md, step 5).

    python tools/rescore.py [--heads 32 --heads 64] [--rows 4096] [--candidates 8192] [--keys 131072]
                            [--fused VARIANT ...] [--out results.jsonl]

tools/rescore_probe.cu scores each row's candidate keys (a list a row, as a gated scan would leave them)
a row at a time on the tensor core: the row's query in shared memory, its candidates' keys gathered 64
at a time beside the products, the exact fp32 epilogue; either each 64 in turn (`in turn`), or the next
64's products on the tensor core while these are reduced (`overlapped`), or that without the epilogue
(`products only`: no scores, what the rest costs), or in turn 256 at a time, four products a barrier
(`4 a barrier`); and at H = 64 the operands the other way round (`wide`, tools/rescore_wide_probe.cu:
the query as A, 256 candidates as B, one m64n256k32 product a chunk, the head sum across lanes and
warps). And a row block's candidates scored as today's scan scores its keys (`union`, `union, 2 a
barrier`: tools/rescore_union_probe.cu): a block of 128 / H rows, its whole query tile, one list of keys
a block (the union of its rows' candidates, in an fp16-gated scan), every row's score of every key of
it; its lists are drawn a block at a time, so its "candidate" is a (row, key) pair of a block's list,
and its cost in scan pairs says what a key of the union costs beside a key of the scan, per row.
Each configuration is first verified against
float64 scores over the tensor core's own dot products (generator.tensor_core; outputs poisoned with NaN
before the run; the check is shown to reject a wrong list), then timed (median of 20 after warm-up).
Candidate lists: `sorted` (random keys, ascending: what a scan appends), `contiguous` (consecutive
keys), `repeated` (the same 64 keys over and over: every gather hits L2). Rates are in scoring TFLOP/s
(2 x heads x 128 FLOPs a candidate), beside `_scaled_mm`'s sustained rate of the same run (the fp8 floor),
and with --fused beside a shipped fused variant's rate over a 16,384-row causal chunk of --keys keys
(top-2048, random data), timed in the same run: a candidate's cost in (row, key) pairs of that scan.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from tools.accumulation import compile_probe  # noqa: E402

TILE_KEYS = 64  # candidates a product (the probe's kTileKeys); a row's list is whole fours of them


def wgmma_header(n: int) -> str:
    """-DWGMMA_HEADER naming templates/common/wgmma.cuh.j2 rendered for N = n into a fresh file."""
    from runtime.render import wgmma_source

    header = Path(tempfile.mkdtemp()) / f"wgmma_n{n}.cuh"
    header.write_text(wgmma_source(n))
    return f'-DWGMMA_HEADER="{header}"'


def rescore_library(heads: int) -> ctypes.CDLL:
    """tools/rescore_probe.cu, compiled for sm_90a and `heads`, over wgmma.cuh.j2 rendered for N = heads."""
    lib = compile_probe("rescore_probe.cu", ("90a",), (f"-DHEADS={heads}", wgmma_header(heads)))
    lib.rescore.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
    assert lib.rescore_heads() == heads
    return lib


def union_library(heads: int) -> ctypes.CDLL:
    """tools/rescore_union_probe.cu (a block of 128 / heads rows, the scan's tile), compiled for sm_90a
    and `heads`, over wgmma.cuh.j2 rendered for N = 128."""
    lib = compile_probe("rescore_union_probe.cu", ("90a",), (f"-DHEADS={heads}", wgmma_header(128)))
    lib.rescore_union.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
    assert lib.rescore_union_rows() == 128 // heads
    return lib


def wide_library() -> ctypes.CDLL:
    """tools/rescore_wide_probe.cu (H = 64: the query as the A operand, 256 candidates as B), for sm_90a."""
    lib = compile_probe("rescore_wide_probe.cu", ("90a",), (wgmma_header(256),))
    lib.rescore_wide.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
    return lib


def candidate_lists(rows: int, per_row: int, keys: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """int32 [rows, per_row] key indices below `keys`: `sorted` random ones ascending, `contiguous` runs
    from a random start (wrapping), or `repeated`: keys 0-63 over and over (every gather an L2 hit)."""
    if kind == "sorted":
        return torch.randint(0, keys, (rows, per_row), generator=gen, device="cuda").sort(dim=1).values.int()
    if kind == "contiguous":
        start = torch.randint(0, keys, (rows, 1), generator=gen, device="cuda")
        return ((start + torch.arange(per_row, device="cuda")) % keys).int()
    if kind == "repeated":
        return torch.arange(TILE_KEYS, device="cuda", dtype=torch.int32).repeat(rows, per_row // TILE_KEYS)
    raise ValueError(f"candidate lists {kind!r}: expected sorted, contiguous or repeated")


def exact_scores(q, k_fp8, k_scale, weights, lists, dots=None):
    """float64 scores k_scale[c] sum_h w_h relu(q_h . k_c) of each row's candidates, and the magnitude
    k_scale[c] sum_h |w_h| sum_d |q_hd k_cd| that bounds their rounding. `dots(q [1, H, 128], k [C, 128])`
    gives the dot products ([1, H, C]): exact by default; generator.tensor_core.wgmma_dots gives the
    tensor core's own (its 13-bit alignment of each k-step: up to about 2^-11 of the magnitude)."""
    k = k_fp8[lists.long()]  # [r, C, 128]
    if dots is None:
        d = torch.einsum("rhd,rcd->rhc", q.double(), k.double())
    else:
        d = torch.cat([dots(q[r:r + 1], k[r]) for r in range(q.shape[0])])
    mags = torch.einsum("rhd,rcd->rhc", q.double().abs(), k.double().abs())
    w = weights.double()[:, :, None]
    scale = k_scale.double()[lists.long()]
    return scale * (w * d.clamp(min=0)).sum(1), scale.abs() * (w.abs() * mags).sum(1)


def worst_error(out, exact, magnitude) -> float:
    """The largest |out - exact| over the magnitude, in units of 2^-24 (fp32's half ulp): against the
    tensor core's own dot products (exact_scores' `dots`) only the fp32 head sum and scale differ, a
    few heads' worth; a wrong key or head is far out."""
    return float(((out.double() - exact).abs() / (magnitude * 2.0**-24).clamp(min=1e-300)).max())


# The probe's kernels: rescore_probe.cu's `mode` 0-3, rescore_wide_probe.cu's (H = 64 only), then
# rescore_union_probe.cu's (a chunk, or two, a barrier).
MODES = ("in turn", "overlapped", "products only", "4 a barrier", "wide", "union", "union, 2 a barrier")
UNION_SUB = {"union": 1, "union, 2 a barrier": 2}


def run_probe(libs: dict, q, k_fp8, k_scale, weights, lists, ctas: int, mode: int, block_lists=None,
              out=None) -> torch.Tensor:
    """One launch of kernel MODES[mode] (libs: "rows", rescore_library's; "wide", wide_library's;
    "union", union_library's, which reads `block_lists`, a list a block, where every row of a block has
    its block's list in `lists`) into `out`, or, where none is given, a NaN-poisoned new one (the timed
    launches reuse one: poisoning 128 MB a launch would be timed with the kernel)."""
    if out is None:
        out = torch.full(lists.shape, float("nan"), device="cuda")
    union = MODES[mode] in UNION_SUB
    given = block_lists if union else lists
    ptrs = (q.data_ptr(), k_fp8.data_ptr(), k_scale.data_ptr(), weights.data_ptr(), given.data_ptr(), out.data_ptr(),
            lists.shape[0], lists.shape[1], ctas)
    stream = torch.cuda.current_stream().cuda_stream
    err = (libs["wide"].rescore_wide(*ptrs, stream) if MODES[mode] == "wide" else
           libs["union"].rescore_union(*ptrs, UNION_SUB[MODES[mode]], stream) if union else
           libs["rows"].rescore(*ptrs, mode, stream))
    assert err == 0, f"launch: {err}"
    return out


def fused_rate(variant: str, keys: int, heads: int) -> dict:
    """A shipped fused variant over a 16,384-row causal chunk of `keys` keys, top-2048, random data:
    its median time and scoring rate over the chunk's visible pairs."""
    import runtime
    from generator.timing import median_ms, scoring_tflops
    from generator.workloads import make_workload

    w = make_workload("random", 16384, keys, heads, 2048, seed=1, device="cuda")
    pairs = int((w.ke.long() - w.ks.long()).clamp(min=0).sum())
    call = lambda: runtime.fused_mqa_topk(w.q, (w.k_fp8, w.k_scale), w.weights, w.ks, w.ke, 2048,  # noqa: E731
                                          variant=variant, validate=False)
    ms = median_ms(call, warmup=2, reps=10)
    return {"variant": variant, "ms": ms, "pairs": pairs, "tflops": scoring_tflops(pairs, heads, ms)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, action="append", choices=(32, 64))
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--candidates", type=int, default=8192, help="a row's candidates (a multiple of 256)")
    ap.add_argument("--keys", type=int, default=131072)
    ap.add_argument("--ctas-per-sm", type=int, action="append", help="CTAs a launch, per SM (default 4 and 8)")
    ap.add_argument("--lists", action="append", choices=("sorted", "contiguous", "repeated"),
                    help="candidate lists (default sorted and repeated)")
    ap.add_argument("--fused", action="append", default=[], metavar="VARIANT",
                    help="also time this fused variant (its heads') over a 16,384-row chunk of --keys keys")
    ap.add_argument("--sustain", type=float, default=3.0, help="seconds of _scaled_mm for the floor")
    ap.add_argument("--out", help="append JSON lines here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("tools/rescore.py times a kernel on a GPU; none here.", file=sys.stderr)
        return 2
    if args.candidates % (4 * TILE_KEYS):
        raise SystemExit(f"--candidates {args.candidates}: must be a multiple of {4 * TILE_KEYS}")
    if args.rows % 4:
        raise SystemExit(f"--rows {args.rows}: must be a multiple of 4 (the union kernels' blocks)")
    from generator.tensor_core import wgmma_dots
    from generator.timing import median_ms, scaled_mm_tflops, scoring_tflops
    from runtime.variant import Variant

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    floor = scaled_mm_tflops(seconds=args.sustain)
    print(f"{torch.cuda.get_device_name()}: _scaled_mm sustained {floor:.0f} TFLOP/s over {args.sustain:.0f} s", flush=True)
    fused = {}
    for name in args.fused:
        r = fused_rate(name, args.keys, Variant.from_name(name).heads)
        fused[Variant.from_name(name).heads] = r
        print(f"fused {name}: {r['ms']:.3f} ms, {r['tflops']:.0f} TFLOP/s, {r['tflops'] / floor:.2f} of the floor",
              flush=True)
    rows_out = []
    for heads in args.heads or [32, 64]:
        libs = {"rows": rescore_library(heads), "union": union_library(heads),
                **({"wide": wide_library()} if heads == 64 else {})}
        modes = [m for m in range(len(MODES)) if MODES[m] != "wide" or heads == 64]
        gen = torch.Generator(device="cuda")
        gen.manual_seed(heads)
        q = (torch.randn(args.rows, heads, 128, generator=gen, device="cuda")).to(torch.float8_e4m3fn)
        k_fp8 = torch.randn(args.keys, 128, generator=gen, device="cuda").to(torch.float8_e4m3fn)
        k_scale = 0.75 + 0.5 * torch.rand(args.keys, generator=gen, device="cuda")
        weights = torch.randn(args.rows, heads, generator=gen, device="cuda")
        block_rows = 128 // heads
        for kind in args.lists or ["sorted", "repeated"]:
            row_lists = candidate_lists(args.rows, args.candidates, args.keys, kind, gen)
            block_lists = candidate_lists(args.rows // block_rows, args.candidates, args.keys, kind, gen)
            shared_lists = block_lists.repeat_interleave(block_rows, dim=0)  # (each row its block's list)
            for per_sm, mode in itertools.product(args.ctas_per_sm or [4, 8], modes):
                ctas = per_sm * sms
                lists = shared_lists if MODES[mode] in UNION_SUB else row_lists
                out = run_probe(libs, q, k_fp8, k_scale, weights, lists, ctas, mode, block_lists)
                torch.cuda.synchronize()
                ok, error, exact_error = bool(torch.isfinite(out).all()), None, None
                if MODES[mode] != "products only":  # (its outputs are one dot product a key: nothing to verify)
                    check = slice(0, 8)  # rows verified (float64: 8 x candidates x heads x 128)
                    args_of = lambda lst: (q[check], k_fp8, k_scale, weights[check], lst)  # noqa: E731
                    error = worst_error(out[check], *exact_scores(*args_of(lists[check]), dots=wgmma_dots))
                    exact_error = worst_error(out[check], *exact_scores(*args_of(lists[check])))
                    # The check rejects a wrong answer: the same scores against the next key of each list.
                    wrong = exact_scores(*args_of((lists[check] + 1) % args.keys), dots=wgmma_dots)
                    assert worst_error(out[check], *wrong) > 1e4, "the check passed scores of other keys"
                    ok = ok and error <= 2 * (heads + 2)
                ms = median_ms(lambda: run_probe(libs, q, k_fp8, k_scale, weights, lists, ctas, mode, block_lists, out),
                               warmup=3, reps=20)
                tflops = scoring_tflops(args.rows * args.candidates, heads, ms)
                row = {"heads": heads, "lists": kind, "rows": args.rows, "candidates": args.candidates,
                       "keys": args.keys, "ctas": ctas, "kernel": MODES[mode], "ms": ms, "tflops": tflops,
                       "floor_tflops": floor, "share_of_floor": tflops / floor,
                       "error_vs_wgmma_model_half_ulps": error, "error_vs_exact_half_ulps": exact_error,
                       "verified": ok}
                if heads in fused:
                    row["fused"] = fused[heads]
                    row["candidate_cost_in_scan_pairs"] = fused[heads]["tflops"] / tflops
                rows_out.append(row)
                what = "a (row, key) pair of a block's list" if MODES[mode] in UNION_SUB else "a candidate"
                extra = (f", {what} = {row['candidate_cost_in_scan_pairs']:.2f} pairs of {fused[heads]['variant']}"
                         if heads in fused else "")
                checked = ("" if error is None else
                           f", error {error:.1f} half-ulps of the wgmma model ({exact_error:.0f} of exact)")
                print(f"H={heads} {kind:10s} {ctas:4d} CTAs {MODES[mode]:13s}: {ms:.3f} ms, {tflops:.0f} TFLOP/s, "
                      f"{tflops / floor:.2f} of the floor{checked}, {'ok' if ok else 'WRONG'}{extra}", flush=True)
    if args.out:
        with open(args.out, "a") as f:
            for row in rows_out:
                f.write(json.dumps(row) + "\n")
    # (a kernel that fails its check is said so on its line and in the exit status; the others still run:
    # a GPU call is scarce)
    return 0 if all(row["verified"] for row in rows_out) else 1


if __name__ == "__main__":
    sys.exit(main())
