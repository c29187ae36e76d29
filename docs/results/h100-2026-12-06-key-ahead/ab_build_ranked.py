"""The key-ahead build with the fp16 gate's rank mu + 3 sqrt(mu) + 2 (was 1.2 mu + 3 sqrt(mu) + 4), union-counted,
no rescan: .run10/abl/VARIANT/ranked.so (beside counted.so, the key-ahead build, and prev_counted.so, main's)."""
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
rank = ("int(ceilf(1.2f * mu + 3.f * sqrtf(mu) + 4.f))", "int(ceilf(mu + 3.f * sqrtf(mu) + 2.f))")
for a, _ in (count, norescan, rank):
    assert a in base, a
folder = Path(".run10/abl") / name
c = base.replace(*count).replace(*norescan)
assert c == (folder / "counted.cu").read_text(), "counted.cu is not this tree's build"
(folder / "ranked.cu").write_text(c.replace(*rank))
print(subprocess.run([nvcc_path(), *nvcc_flags(v), "-o", str(folder / "ranked.so"), str(folder / "ranked.cu")]).returncode)
