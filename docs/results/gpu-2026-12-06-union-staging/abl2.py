"""More builds of the staging kernel (patched rendered sources, no rescan launched): tile_check (the
warpgroup's flush decision once a tile, not once a slice; a warp's keys past its 32 rows dropped and
counted in counter 10: wrong answers there)."""
import subprocess, sys
from pathlib import Path
sys.path.insert(0, ".")
from runtime.build import nvcc_flags, spec_from_name
from runtime.render import render
from runtime.toolchain import nvcc_path
name = sys.argv[1]
v = spec_from_name(name)
base = render(v)
P = {
 "ret": ("""            const auto score_full = [&](int threshold) {
                if (sm90::named_barrier_or(3 + wg, 128, staged >= threshold)) {
                    score_staged(oldest);
                    staged = max(staged - 16, 0);
                    oldest ^= 1;
                }
            };""", """            const auto score_full = [&](int threshold) {
                if (sm90::named_barrier_or(3 + wg, 128, staged >= threshold)) {
                    score_staged(oldest);
                    staged = max(staged - 16, 0);
                    oldest ^= 1;
                    return true;
                }
                return false;
            };"""),
 "tile": ("""                score_full(16);
            };""", """                if (s == kSlices - 1) while (score_full(16)) {}
            };"""),
 "guard": ("""                if (((votes >> (lane & ~1)) & 1) != 0) {""", """                if (lane == 0 && staged > 32) atomicAdd(p.rescan_count + 9, 1);
                if (((votes >> (lane & ~1)) & 1) != 0 && pos < 32) {"""),
 "norescan": ("    return rescan::launch(", "    if (rows > 0) return cudaGetLastError();\n    return rescan::launch("),
}
for a, _ in P.values():
    assert base.count(a) == 1, a
srcs = {"tile_check": base}
for k in P:
    srcs["tile_check"] = srcs["tile_check"].replace(*P[k])
folder = Path(".run13/abl") / name; folder.mkdir(parents=True, exist_ok=True)
procs = []
for k, text in srcs.items():
    (folder / f"{k}.cu").write_text(text)
    procs.append((k, subprocess.Popen([nvcc_path(), *nvcc_flags(v), "-o", str(folder / f"{k}.so"), str(folder / f"{k}.cu")])))
for k, p in procs:
    print(k, p.wait())
