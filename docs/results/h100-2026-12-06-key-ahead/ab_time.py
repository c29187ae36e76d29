"""GPU: the exact pass reading its keys two chunks ahead (counted), and with the rank mu + 3 sqrt(mu) + 2 (ranked), against the previous build (both union-counted, no rescan), union counted (patched builds, no rescan),
three data distributions, 16,384-row causal chunks; and the gate's inputs by torch against the CUDA kernels."""
import json, sys
from dataclasses import replace
sys.path.insert(0, "."); sys.path.insert(0, ".run10")
import torch
from runtime.variant import Variant
from runtime.loader import KernelLibrary, load
from runtime.gate16 import gate_inputs, gate_inputs_on_device
from generator.distributions import chunk_workload
from generator.timing import interleaved_ms, median_ms
name = sys.argv[1]
b = Variant.from_name(name); a = replace(b, gate_bits=32)
libs = {k: KernelLibrary(b, f".run10/abl/{name}/{k}.so") for k in ("prev_counted", "counted", "ranked")}
s = torch.cuda.current_stream().cuda_stream
for keys in (131072, 262144, 524288):
    for data in ("positive", "signed", "indexer"):
        wl = chunk_workload(data, 16384, keys, 64, b.top_k, seed=3, device="cuda")
        new = gate_inputs(wl.q, wl.weights, wl.k_fp8)
        out = torch.empty(16384, b.top_k, dtype=torch.int32, device="cuda")
        la = load(a)
        wsa = torch.zeros(la.workspace_bytes(16384), dtype=torch.uint8, device="cuda")
        ws = {k: torch.zeros(l.workspace_bytes(16384), dtype=torch.uint8, device="cuda") for k, l in libs.items()}
        args = lambda w_: (wl.q.data_ptr(), wl.k_fp8.data_ptr(), wl.k_scale.data_ptr(), wl.weights.data_ptr(), wl.ks.data_ptr(), wl.ke.data_ptr(), out.data_ptr(), w_.data_ptr(), 16384, keys)
        runs = {"fp32": lambda: la.launch(*args(wsa), s),
                "prev": lambda: libs["prev_counted"].launch_gate16(*args(ws["prev_counted"]), *(x.data_ptr() for x in new), s),
                "new": lambda: libs["counted"].launch_gate16(*args(ws["counted"]), *(x.data_ptr() for x in new), s),
                "ranked": lambda: libs["ranked"].launch_gate16(*args(ws["ranked"]), *(x.data_ptr() for x in new), s)}
        row = {"keys": keys, "data": data}
        for k, f in runs.items():  # union counts: one run each from zeroed counters
            if k == "fp32": continue
            wk = ws[{"prev": "prev_counted", "new": "counted", "ranked": "ranked"}[k]]; wk.zero_(); f(); torch.cuda.synchronize()
            c = wk[:32].view(torch.int32).tolist()
            row[k + "_union_share"] = c[4] / max(c[5], 1) / float((wl.ke - wl.ks).float().mean()); row[k + "_rescan"] = c[1]
        t = interleaved_ms(runs, warmup=1, reps=7)
        row.update({k: round(v.ms, 3) for k, v in t.items()})
        print(json.dumps(row), flush=True)
        del wl, new, out, wsa, ws
        torch.cuda.empty_cache()
