#!/usr/bin/env bash
# Next device call, whichever card comes. H200: the H200 table's ten short buckets (call.sh: tune --resume on
# .run16/T's journal, then check --shipped with that table). H100: the H100's own table resumed (48 of 120
# settled on 2026-12-06) with --time-budget, on .run16/H100/T's journal.
# carry [".run16", ".run15/tune-cache.txz", ".whl"]; bring back $OUT/T.tgz (H200) or $OUT/H100T.tgz.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in
  *H200*) CALL_S=${CALL_S:-560} bash .run16/call.sh ;;
  *H100*)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
    [ -d .run15/cache ] || python3 -c "import tarfile; tarfile.open('.run15/tune-cache.txz').extractall('.run15')"
    [ -f .run16/H100/T/tune-journal.log ] || gunzip .run16/H100/T/tune-journal.log.gz
    export PYTHONPATH=/tmp/site:. FUSED_MQA_TOPK_CACHE=$PWD/.run15/cache FUSED_MQA_TOPK_TABLES=$PWD/.run16/H100/T
    ts=$SECONDS
    timeout $(( ${CALL_S:-560} - 40 - SECONDS )) python3 -m generator tune --resume --no-decode --time-budget ${MINUTES:-7} \
      --storage "journal:$PWD/.run16/H100/T/tune-journal.log" 2>&1 | grep -v "^\[" | tee $OUT/tune-h100.log
    echo "tune exit ${PIPESTATUS[0]} after $((SECONDS - ts)) s" | tee -a $OUT/tune-h100.log
    tar -czf $OUT/H100T.tgz -C .run16/H100 T ;;
  *) echo "neither an H200 nor an H100: $gpu" ;;
esac
