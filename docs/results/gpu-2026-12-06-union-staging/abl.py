"""Ablations of the K-ring staging build (patched rendered sources, not answers except `full`):
full (flushes and flushed keys counted in counters 8, 9), copy_barrier (no scoring), barrier_only,
copy_only (no barrier, no scoring), scan_only (fp16 scan alone)."""
import subprocess, sys
from pathlib import Path
sys.path.insert(0, ".")
from runtime.build import nvcc_flags, spec_from_name
from runtime.render import render
from runtime.toolchain import nvcc_path
name = sys.argv[1]
v = spec_from_name(name)
base = render(v)
count = ("                    score_staged(oldest);\n",
         "                    if (lane == 0) { atomicAdd(p.rescan_count + 7, 1); atomicAdd(p.rescan_count + 8, min(staged, 16)); }\n                    score_staged(oldest);\n")
noscore = ("                    score_staged(oldest);\n", "\n")
nocopy = ("                if (((votes >> (lane & ~1)) & 1) != 0) {\n", "                if (false) {\n")
nobar = ("                if (sm90::named_barrier_or(3 + wg, 128, staged >= threshold)) {\n", "                if (false) {\n")
norescan = ("    return rescan::launch(", "    if (rows > 0) return cudaGetLastError();\n    return rescan::launch(")
for a, _ in (count, noscore, nocopy, nobar, norescan):
    assert a in base, a
srcs = {"full": base.replace(*count), "copy_barrier": base.replace(*noscore), "barrier_only": base.replace(*noscore).replace(*nocopy),
        "copy_only": base.replace(*nobar), "scan_only": base.replace(*nobar).replace(*nocopy)}
folder = Path(".run13/abl") / name; folder.mkdir(parents=True, exist_ok=True)
procs = []
for k, text in srcs.items():
    text = text.replace(*norescan)
    (folder / f"{k}.cu").write_text(text)
    procs.append((k, subprocess.Popen([nvcc_path(), *nvcc_flags(v), "-o", str(folder / f"{k}.so"), str(folder / f"{k}.cu")])))
for k, p in procs:
    print(k, p.wait())
