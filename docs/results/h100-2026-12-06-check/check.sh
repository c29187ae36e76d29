#!/usr/bin/env bash
# check --shipped for the current kernel code, as far as the budget goes (--log, resumed by a later call).
set -u
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run14/devcache
mkdir -p $FUSED_MQA_TOPK_CACHE
[ -f $FUSED_MQA_TOPK_CACHE/manifest.json ] || tar -xJf .run14/shipped-cache.txz -C $FUSED_MQA_TOPK_CACHE
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpu.txt
[ -f .run14/check.jsonl ] && cp .run14/check.jsonl $OUT/check.jsonl
echo "start checks at $SECONDS s"
python3 -m generator check --shipped --log $OUT/check.jsonl --resume --time-budget ${MINUTES:-2} > $OUT/check.log 2>&1
echo "check rc=$? at $SECONDS s"; tail -4 $OUT/check.log
