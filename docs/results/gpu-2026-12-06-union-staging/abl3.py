"""Builds of the staging kernel for timing (patched rendered sources, no rescan launched): counted
(flushes and flushed keys in counters 8, 9), tile_check (the flush decision once a tile; a warp's keys
past 32 staged overwrite older ones, counted in counter 10: wrong answers there)."""
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
norescan = ("    return rescan::launch(", "    if (rows > 0) return cudaGetLastError();\n    return rescan::launch(")
ret = ("""                    oldest ^= 1;
                }
            };""", """                    oldest ^= 1;
                    return true;
                }
                return false;
            };""")
tile = ("""                score_full(16);
            };""", """                if (s == kSlices - 1) while (score_full(16)) {}
            };""")
over = ("""                staged += count;
""", """                staged += count;
                if (lane == 0 && staged > 32) atomicAdd(p.rescan_count + 9, 1);
""")
for a, _ in (count, norescan, ret, tile, over):
    assert base.count(a) == 1, a
srcs = {"counted": base.replace(*count).replace(*norescan),
        "tile_check": base.replace(*ret).replace(*tile).replace(*over).replace(*norescan)}
folder = Path(".run13/abl") / name; folder.mkdir(parents=True, exist_ok=True)
procs = []
for k, text in srcs.items():
    (folder / f"{k}.cu").write_text(text)
    procs.append((k, subprocess.Popen([nvcc_path(), *nvcc_flags(v), "-o", str(folder / f"{k}.so"), str(folder / f"{k}.cu")])))
for k, p in procs:
    print(k, p.wait())
