"""The fp16 gate against its fp32 twin: the same answers byte for byte on every family, then times."""
import json, sys, time
from dataclasses import replace
sys.path.insert(0, ".")
import torch
from runtime.variant import Variant
from generator.check import run_poisoned
from generator.workloads import make_workload, FAMILIES
from generator.verify import verify_topk
from generator.timing import interleaved_ms, scaled_mm_tflops, scoring_floor_ms, visible_pairs
from runtime.fused import launch_variant
from tools.half_gate import to_full_range

out = open(sys.argv[1], "a") if len(sys.argv) > 1 else sys.stdout
def emit(d):
    print(json.dumps(d), file=out, flush=True); print(json.dumps(d), flush=True)

BASES = ["mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7", "mqa_topk_wgmma_sm90a_h64_k512_r2_t256_w8_s3_b16384_m32_sw7"]
mode = sys.argv[2] if len(sys.argv) > 2 else "all"
t0 = time.time()
if mode in ("all", "check"):
    for base in BASES:
        a = Variant.from_name(base); b = replace(a, gate_bits=16)
        for fam in list(FAMILIES) + ["full_range_random", "full_range_signed", "positive"]:
            for rows, keys, seed in ((256, 110000, 1), (300, 40000, 2)):
                f = {"full_range_random": "random", "full_range_signed": "signed_weights", "positive": "random"}.get(fam, fam)
                wl = make_workload(f, rows, keys, 64, a.top_k, seed=seed, device="cuda")
                if fam.startswith("full_range"): wl = to_full_range(wl)
                if fam == "positive": wl = replace(wl, weights=wl.weights.abs())
                sa, sb = {}, {}
                try:
                    oa = run_poisoned(a, wl, sa); ob = run_poisoned(b, wl, sb)
                    rep = verify_topk(ob, *wl.args(), strict=True)
                    emit({"check": b.name, "family": fam, "rows": rows, "keys": keys, "same": bool(torch.equal(oa, ob)),
                          "differ_rows": int((oa != ob).any(1).sum()), "verify": rep.summary(), "rescan32": sa.get("rescan_blocks"),
                          "rescan16": sb.get("rescan_blocks"), "blocks": -(-rows // 2)})
                except Exception as e:
                    emit({"check": b.name, "family": fam, "error": repr(e)[:400]}); torch.cuda.synchronize()
    emit({"checks_s": time.time() - t0})
if mode in ("all", "time"):
    rate = scaled_mm_tflops(seconds=3.0)
    emit({"scaled_mm_tflops": rate})
    for base, key_counts in ((BASES[0], (32768, 131072, 262144, 65536)), (BASES[1], (32768, 131072))):
        a = Variant.from_name(base); b = replace(a, gate_bits=16)
        for keys in key_counts:
            for data in ("positive", "signed", "full_range"):
                wl = make_workload("random", 16384, keys, 64, a.top_k, seed=3, device="cuda")
                if data == "positive": wl = replace(wl, weights=wl.weights.abs())
                if data == "full_range": wl = to_full_range(replace(wl, weights=wl.weights.abs()))
                calls = {v.name: (lambda v=v: launch_variant(v, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k)) for v in (a, b)}
                sa, sb = {}, {}
                launch_variant(a, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, stats=sa)
                launch_variant(b, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, stats=sb)
                t = interleaved_ms(calls, warmup=1, reps=7, max_seconds=30)
                floor = scoring_floor_ms(visible_pairs(wl.ks, wl.ke), 64, rate)
                emit({"time": b.name, "keys": keys, "data": data, "ms32": t[a.name].ms, "ms16": t[b.name].ms,
                      "speedup": t[a.name].ms / t[b.name].ms, "floor32": floor / t[a.name].ms, "floor16": floor / t[b.name].ms,
                      "rescan32": sa.get("rescan_blocks"), "rescan16": sb.get("rescan_blocks")})
                del wl, calls
                torch.cuda.empty_cache()
    emit({"total_s": time.time() - t0})
