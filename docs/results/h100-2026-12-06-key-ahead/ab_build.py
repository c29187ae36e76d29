"""Patched builds of a _g16 variant into .run10/abl/VARIANT/ (here, after `generator build` of the variant and its
fp32 twin into .run10/cache): `counted` (each block's union size added to workspace counters 4 and 5, no rescan
launched: times without the rescan, rescan counts reported), `counted_hits48` (the same with kSampleHits 48)."""
import subprocess, sys
from pathlib import Path
sys.path.insert(0, ".")
from runtime.build import nvcc_flags, spec_from_name
from runtime.render import render
from runtime.toolchain import nvcc_path
name = sys.argv[1]
v = spec_from_name(name)
base = render(v)
count = ("            if (!fits) return false;\n",
         "            if (!fits) return false;\n            if (threadIdx.x == 0) { atomicAdd(p.rescan_count + 3, first_chunk[kMathWarps] * kGatherKeys); atomicAdd(p.rescan_count + 4, 1); }\n")
norescan = ("    return rescan::launch(", "    if (rows > 0) return cudaGetLastError();\n    return rescan::launch(")
hits = ("constexpr int kSampleHits = 24;", "constexpr int kSampleHits = 48;")
for a, _ in (count, norescan, hits):
    assert a in base, a
c = base.replace(*count).replace(*norescan)
srcs = {"counted": c, "counted_hits48": c.replace(*hits)}
folder = Path(".run10/abl") / name; folder.mkdir(parents=True, exist_ok=True)
procs = []
for k, text in srcs.items():
    (folder / f"{k}.cu").write_text(text)
    procs.append((k, subprocess.Popen([nvcc_path(), *nvcc_flags(v), "-o", str(folder / f"{k}.so"), str(folder / f"{k}.cu")])))
for k, p in procs:
    print(k, p.wait())
