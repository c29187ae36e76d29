#!/usr/bin/env bash
# check --shipped for the current kernel code (the shipped tables, plus the fresh table if .run15/T holds one),
# resumed from .run15/check.jsonl; carry [".run15/check.sh", ".run15/tune-cache.txz", ".run15/check.jsonl", ".run15/T"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run15/cache
[ -d .run15/cache ] || python3 -c "import tarfile; tarfile.open('.run15/tune-cache.txz').extractall('.run15')"
cp .run15/T/H*.json tuned_configs/ 2>/dev/null; ls tuned_configs
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpu.txt
cp .run15/check.jsonl $OUT/check.jsonl
echo "start checks at $SECONDS s"
python3 -m generator check --shipped --log $OUT/check.jsonl --resume --time-budget ${MINUTES:-2} > $OUT/check.log 2>&1
echo "check rc=$? at $SECONDS s"; tail -4 $OUT/check.log
