#!/usr/bin/env bash
# The paged kernel's appends change (one shared atomic a warp) and its sampled gate (gate_tiles) against
# main's build, in one GPU call
# (carry .ablate: `tools/ablate.py build VARIANT --as base` at main (5f486d7), `--as appends` here, for the
# ungated defaults and the points the --build labels name): the paged GPU tests on this checkout's
# kernels, then tools/compare_paged_builds.py over a few steps a next_n, graph-replayed, every answer
# checked; the defaults gate at next_n 2 to 4, so `base:gate_tiles=0` and `appends:gate_tiles=0` name
# the ungated builds. Everything goes to one tarball, $OUT/paged-ab.tgz (the device tool brings back a
# few files only), as text and JSON lines.
set -u
export PYTHONPATH=.
out=$(mktemp -d)/paged-ab
mkdir -p "$out"
# The tests' kernels first, in parallel (the tests would build them one at a time): the decode
# defaults and dense builds, and the gated points the tests run
python3 -m generator build -j "$(nproc)" $(python3 - <<'PY'
import sys
from dataclasses import replace

sys.path.insert(0, "tests")
from generator.paged_bench import decode_variants
from runtime.paged_variant import default_paged_variant
from test_gpu_paged import GATED

gated = [replace(default_paged_variant(h, k, n, 64), gate_tiles=t).name for h, k, n, t in GATED]
print(" ".join(decode_variants(top_ks=(512, 1024, 2048)) + gated))
PY
) > "$out/build.txt" 2>&1
timeout 300 python3 -m pytest -q -x tests/test_gpu_paged.py > "$out/tests.txt" 2>&1
echo "exit status $?" >> "$out/tests.txt"
steps="--shape 64x131072 --shape 256x32768 --shape 16x131072 --shape 4x131072 --shape 1x131072 --shape 4x524288"
compare() {  # NAME ARGS...: one compare_paged_builds run, its lines and its log
    local name=$1
    shift
    timeout 120 python3 tools/compare_paged_builds.py $steps "$@" --log "$out/$name.jsonl" > "$out/$name.txt" 2>&1
    echo "exit status $?" >> "$out/$name.txt"
}
compare h64-n4 --heads 64 --top-k 2048 --next-n 4 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=8 \
  --build appends:gate_tiles=12 --build appends:gate_tiles=16 --build appends:gate_tiles=20 --build appends:gate_tiles=23 \
  --build appends:q_stages=1,buffer=4096,gate_tiles=16 --build appends:q_stages=1,buffer=4096,gate_tiles=24 \
  --build appends:q_stages=1,buffer=4096,gate_tiles=31 --build appends:stages=2,gate_tiles=16 --build appends:columns=128,gate_tiles=16
compare h64-n2 --heads 64 --top-k 2048 --next-n 2 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=4 \
  --build appends:gate_tiles=8 --build appends:gate_tiles=12 --build appends:gate_tiles=15 \
  --build appends:q_stages=1,buffer=6144,gate_tiles=8 --build appends:q_stages=1,buffer=6144,gate_tiles=16 \
  --build appends:q_stages=1,buffer=6144,gate_tiles=23 --build appends:stages=2,gate_tiles=12
compare h64-n1 --rounds 5 --heads 64 --top-k 2048 --next-n 1 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=8 \
  --build appends:gate_tiles=16 --build appends:gate_tiles=24
compare h64-n3 --heads 64 --top-k 2048 --next-n 3 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=16
compare h32-n4 --heads 32 --top-k 512 --next-n 4 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=2 \
  --build appends:gate_tiles=4 --build appends:gate_tiles=6
compare h32-n2 --heads 32 --top-k 512 --next-n 2 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=2 --build appends:gate_tiles=4
compare h32-n1 --heads 32 --top-k 512 --next-n 1 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=2 --build appends:gate_tiles=4
compare h64k512-n4 --heads 64 --top-k 512 --next-n 4 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=4
compare h64k512-n2 --heads 64 --top-k 512 --next-n 2 --build base:gate_tiles=0 --build appends:gate_tiles=0 --build appends:gate_tiles=4
mkdir -p "${OUT:-/tmp}"
tar czf "${OUT:-/tmp}/paged-ab.tgz" -C "$(dirname "$out")" paged-ab
tail -n 2 "$out"/*.txt
