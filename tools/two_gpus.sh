#!/usr/bin/env bash
# One study on two GPUs against the same buckets on one ("Two GPUs, one study"; BENCHMARKS.md): on a
# machine with two GPUs, carry [".whl"] (optuna's wheels: CONTRIBUTING.md) and run
#   bash tools/two_gpus.sh [tune's bucket options...]      (default: four H = 32 top-512 buckets)
# 1. a first one-GPU run compiles what the searches ask for (its wall time is mostly nvcc);
# 2. then, on that warm cache and each with a study of its own, `tune --gpus 2` and `tune --gpus 1`,
#    their wall times measured alike; each bucket's settle line names the trials each worker measured.
# Everything lands in one tarball, $OUT/two-gpus.tgz (a GPU call returns at most 8 files), with
# summary.txt: the wall times and each run's picks.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=$(mktemp -d)
python -m pip install -q --no-index --find-links .whl optuna 2>&1 | grep -v WARNING | tail -1
python -c "import optuna; print('optuna', optuna.__version__)" > "$W/summary.txt"
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader >> "$W/summary.txt"
git log --oneline -1 >> "$W/summary.txt" 2>/dev/null
export PYTHONPATH=$PWD FUSED_MQA_TOPK_CACHE=$W/cache
buckets=("$@")
[ ${#buckets[@]} -eq 0 ] && buckets=(--heads 32 --top-k 512 --shape 512x8192 --shape 512x32768 --shape 4096x32768
                                       --shape 16384x32768)
run() {  # name, gpus: one tune run into $W/name (its table, journal and log), its wall time in summary.txt
    local start end
    start=$(date +%s.%N)
    timeout 240 python -m generator tune "${buckets[@]}" --no-decode --gpus "$2" --out-dir "$W/$1" > "$W/$1.log" 2>&1
    local rc=$?
    end=$(date +%s.%N)
    echo "$1: --gpus $2, exit $rc, $(python -c "print(f'{$end - $start:.1f}')") s" | tee -a "$W/summary.txt"
}
run cold-1gpu 1
run warm-2gpus 2
run warm-1gpu 1
for name in warm-2gpus warm-1gpu; do
    echo "$name picks:" >> "$W/summary.txt"
    python - "$W/$name" >> "$W/summary.txt" <<'EOF'
import json, pathlib, sys
for table in pathlib.Path(sys.argv[1]).glob("*.json"):
    for e in json.loads(table.read_text()).get("entries", []):
        print(f"  {e['heads']}x{e['top_k']} {e['rows']}x{e['keys']}: {e['variant']} fused {e['fused_ms']} ms, dense "
              f"{e['dense_ms']} ms, {e.get('trials')} trials {e.get('trial_sources')}")
EOF
    grep -h "measured by" "$W/$name.log" | sed 's/^/  /' >> "$W/summary.txt"
done
cat "$W/summary.txt"
tar -czf "$OUT/two-gpus.tgz" -C "$W" --exclude=cache .
