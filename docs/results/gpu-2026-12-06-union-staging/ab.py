"""GPU: the K-ring staging build of _g16 (this tree) against the previous _g16 build (.run10/cache, the
gathered exact pass) and the fp32 twin, 16,384-row causal chunks, three distributions: answers equal to
the twin's byte for byte, rescans counted, medians of interleaved rounds."""
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
la, lb = load(a), load(b)
old_path = glob.glob(f".run10/cache/{name}/{name}-*.so")[0]
lo = KernelLibrary(b, old_path)
s = torch.cuda.current_stream().cuda_stream
rows = 16384
for keys in keys_list:
    for data in ("positive", "signed", "indexer"):
        wl = chunk_workload(data, rows, keys, 64, b.top_k, seed=3, device="cuda")
        gi = gate_inputs_on_device(lb, wl.q, wl.weights, wl.k_fp8, s)
        outs = {k: torch.full((rows, b.top_k), -7, dtype=torch.int32, device="cuda") for k in ("fp32", "old", "new")}
        libs = {"fp32": la, "old": lo, "new": lb}
        ws = {k: torch.zeros(l.workspace_bytes(rows), dtype=torch.uint8, device="cuda") for k, l in libs.items()}
        args = lambda k: (wl.q.data_ptr(), wl.k_fp8.data_ptr(), wl.k_scale.data_ptr(), wl.weights.data_ptr(), wl.ks.data_ptr(),
                          wl.ke.data_ptr(), outs[k].data_ptr(), ws[k].data_ptr(), rows, keys)
        runs = {"fp32": lambda: la.launch(*args("fp32"), s),
                "old": lambda: lo.launch_gate16(*args("old"), *(x.data_ptr() for x in gi), s),
                "new": lambda: lb.launch_gate16(*args("new"), *(x.data_ptr() for x in gi), s)}
        row = {"keys": keys, "data": data}
        for k, f in runs.items():
            f(); torch.cuda.synchronize()
            row["rescan_" + k] = ws[k][:16].view(torch.int32).tolist()[1]
        row["old_same"] = bool(torch.equal(outs["old"], outs["fp32"]))
        row["new_same"] = bool(torch.equal(outs["new"], outs["fp32"]))
        row["new_differ_rows"] = int((outs["new"] != outs["fp32"]).any(1).sum())
        t = interleaved_ms(runs, warmup=1, reps=7)
        row.update({k: round(v.ms, 3) for k, v in t.items()})
        row["new/fp32"] = round(t["fp32"].ms / t["new"].ms, 3); row["old/fp32"] = round(t["fp32"].ms / t["old"].ms, 3)
        print(json.dumps(row), flush=True)
        del wl, gi, outs, ws
        torch.cuda.empty_cache()
