"""Patched builds of a _g16 variant into .run9/abl/VARIANT/: `counted` (each block's union size added to the
workspace counters 4 and 5, no rescan launched) and `scan16_only` (the same without the exact pass: not answers)."""
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
assert count[0] in base
norescan = ("    return rescan::launch(", "    if (rows > 0) return cudaGetLastError();\n    return rescan::launch(")
assert norescan[0] in base
c = base.replace(*count).replace(*norescan)
srcs = {"counted": c,
        "scan16_only": c.replace("            if (steps > 0) {\n", "            return true;\n            if (steps > 0) {\n")}
assert len(set(srcs.values())) == len(srcs)
folder = Path(".run9/abl") / name; folder.mkdir(parents=True, exist_ok=True)
procs = []
for k, text in srcs.items():
    (folder / f"{k}.cu").write_text(text)
    procs.append((k, subprocess.Popen([nvcc_path(), *nvcc_flags(v), "-o", str(folder / f"{k}.so"), str(folder / f"{k}.cu")])))
for k, p in procs:
    print(k, p.wait())
