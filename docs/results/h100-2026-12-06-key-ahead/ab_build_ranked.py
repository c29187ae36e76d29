"""ranked.so: the union-counting build counted.cu (made by docs/results/h100-2026-12-05-gate16-bound/ab_build.py
into .run10/abl/VARIANT/) with the fp16 gate's rank mu + 3 sqrt(mu) + 2 in place of 1.2 mu + 3 sqrt(mu) + 4."""
import subprocess, sys
from pathlib import Path
sys.path.insert(0, ".")
from runtime.build import nvcc_flags, spec_from_name
from runtime.toolchain import nvcc_path
name = sys.argv[1]
folder = Path(".run10/abl") / name
counted = (folder / "counted.cu").read_text()
rank = ("int(ceilf(1.2f * mu + 3.f * sqrtf(mu) + 4.f))", "int(ceilf(mu + 3.f * sqrtf(mu) + 2.f))")
assert rank[0] in counted, rank[0]
(folder / "ranked.cu").write_text(counted.replace(*rank))
print(subprocess.run([nvcc_path(), *nvcc_flags(spec_from_name(name)), "-o", str(folder / "ranked.so"), str(folder / "ranked.cu")]).returncode)
