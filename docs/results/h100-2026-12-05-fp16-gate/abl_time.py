import json, sys
from dataclasses import replace
sys.path.insert(0, ".")
import torch
from runtime.variant import Variant
from runtime.loader import KernelLibrary, load
from runtime.gate16 import gate_inputs
from generator.workloads import make_workload
from generator.timing import interleaved_ms
name = sys.argv[1]
b = Variant.from_name(name); a = replace(b, gate_bits=32)
libs = {k: KernelLibrary(b, f".run9/abl/{name}/{k}.so") for k in ("counted", "scan16_only")}
for keys in (131072, 262144, 524288):
    wl = make_workload("random", 16384, keys, 64, b.top_k, seed=3, device="cuda")
    wl = replace(wl, weights=wl.weights.abs())
    g = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    out = torch.empty(16384, b.top_k, dtype=torch.int32, device="cuda")
    la = load(a)
    wsa = torch.zeros(la.workspace_bytes(16384), dtype=torch.uint8, device="cuda")
    ws = {k: torch.zeros(l.workspace_bytes(16384), dtype=torch.uint8, device="cuda") for k, l in libs.items()}
    s = torch.cuda.current_stream().cuda_stream
    args = lambda w: (wl.q.data_ptr(), wl.k_fp8.data_ptr(), wl.k_scale.data_ptr(), wl.weights.data_ptr(), wl.ks.data_ptr(), wl.ke.data_ptr(), out.data_ptr(), w.data_ptr(), 16384, keys)
    calls = {"fp32": lambda: la.launch(*args(wsa), s)}
    for k, l in libs.items():
        calls[k] = (lambda l=l, k=k: l.launch_gate16(*args(ws[k]), *(x.data_ptr() for x in g), s))
    t = interleaved_ms(calls, warmup=1, reps=7)
    row = {"keys": keys, **{k: round(v.ms, 3) for k, v in t.items()}}
    for k in libs:
        c = ws[k][:32].view(torch.int32).tolist()
        row[k + "_union_per_item"] = c[4] / max(c[5], 1); row[k + "_items"] = c[5]; row[k + "_rescan"] = c[1]
    row["avg_visible"] = float((wl.ke - wl.ks).float().mean())
    print(json.dumps(row), flush=True)
