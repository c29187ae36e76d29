"""One _g16 launch on 4,096 rows x 128K keys (positive weights), for ncu."""
import sys
from dataclasses import replace
sys.path.insert(0, ".")
import torch
from runtime.variant import Variant
from runtime.fused import launch_variant
from generator.workloads import make_workload
v = Variant.from_name(sys.argv[1])
wl = make_workload("random", 4096, 131072, 64, v.top_k, seed=3, device="cuda")
wl = replace(wl, weights=wl.weights.abs())
for _ in range(2):
    launch_variant(v, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k)
torch.cuda.synchronize()
