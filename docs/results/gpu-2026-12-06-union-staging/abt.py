"""GPU: the staging build's ablations (.run13/abl/VARIANT/*.so: no rescan launched) beside the product builds
(new, the previous gathered build, the fp32 twin); flushes and flushed keys from `full`'s counters."""
import json, sys, glob
from dataclasses import replace
sys.path.insert(0, ".")
import torch
from runtime.variant import Variant
from runtime.loader import KernelLibrary, load
from runtime.gate16 import gate_inputs_on_device
from generator.distributions import chunk_workload
from generator.timing import interleaved_ms
name = sys.argv[1]
keys_list = [int(k) for k in sys.argv[2].split(",")]
b = Variant.from_name(name); a = replace(b, gate_bits=32)
libs = {"fp32": load(a), "old": KernelLibrary(b, glob.glob(f".run10/cache/{name}/{name}-*.so")[0]), "new": load(b)}
for k in ("counted", "tile_check"):
    libs[k] = KernelLibrary(b, f".run13/abl/{name}/{k}.so")
s = torch.cuda.current_stream().cuda_stream
rows = 16384
for keys in keys_list:
    for data in ("positive", "signed", "indexer"):
        wl = chunk_workload(data, rows, keys, 64, b.top_k, seed=3, device="cuda")
        gi = gate_inputs_on_device(libs["new"], wl.q, wl.weights, wl.k_fp8, s)
        out = torch.empty((rows, b.top_k), dtype=torch.int32, device="cuda")
        ws = {k: torch.zeros(l.workspace_bytes(rows), dtype=torch.uint8, device="cuda") for k, l in libs.items()}
        def call(k):
            args = (wl.q.data_ptr(), wl.k_fp8.data_ptr(), wl.k_scale.data_ptr(), wl.weights.data_ptr(), wl.ks.data_ptr(),
                    wl.ke.data_ptr(), out.data_ptr(), ws[k].data_ptr(), rows, keys)
            if k == "fp32":
                return lambda: libs[k].launch(*args, s)
            return lambda: libs[k].launch_gate16(*args, *(x.data_ptr() for x in gi), s)
        runs = {k: call(k) for k in libs}
        ws["counted"].zero_(); runs["counted"](); torch.cuda.synchronize()
        c = ws["counted"][:64].view(torch.int32).tolist()
        blocks = rows // 2
        visible = float((wl.ke - wl.ks).float().view(-1, 2).max(1).values.sum())
        ws["tile_check"].zero_(); runs["tile_check"](); torch.cuda.synchronize()
        tile_overflows = ws["tile_check"][:64].view(torch.int32).tolist()[10]
        row = {"tile_overflows": tile_overflows, "keys": keys, "data": data, "warp_flushes": c[8], "flushed_keys": c[9], "fill": round(c[9] / max(c[8], 1) / 16, 3),
               "union_share": round(c[9] / visible, 4)}
        outs = {}
        for k in ("fp32", "old", "new"):
            out.fill_(-7); ws[k].zero_(); runs[k](); torch.cuda.synchronize()
            outs[k] = out.clone(); row["rescan_" + k] = ws[k][:16].view(torch.int32).tolist()[1]
        row["new_same"] = bool(torch.equal(outs["new"], outs["fp32"])); row["old_same"] = bool(torch.equal(outs["old"], outs["fp32"]))
        del outs
        t = interleaved_ms(runs, warmup=1, reps=7)
        row.update({k: round(v.ms, 3) for k, v in t.items()})
        row["new/fp32"] = round(t["fp32"].ms / t["new"].ms, 3); row["old/fp32"] = round(t["fp32"].ms / t["old"].ms, 3)
        print(json.dumps(row), flush=True)
        del wl, gi, out, ws
        torch.cuda.empty_cache()
