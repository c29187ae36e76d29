#!/usr/bin/env bash
# One device call: the tuning run resumed (if buckets are left), then check --shipped resumed with what is
# left of the call (CALL_S, default 560 s). carry [".run15/call.sh", ".run15/tune.sh", ".run15/check.sh",
# ".run15/tune-cache.txz", ".whl", ".run15/T", ".run15/check.jsonl"]; bring back $OUT/T.tgz and $OUT/check.jsonl.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CALL_S=${CALL_S:-560}
export DEADLINE=$(( $(date +%s) + CALL_S - 30 ))
if [ "${SKIP_TUNE:-0}" != 1 ]; then MINUTES=${MINUTES:-8} bash .run15/tune.sh; fi
left=$((CALL_S - SECONDS - 20))
if [ $left -gt 40 ] && grep -q "buckets tuned\|resuming: 120 of 120" $OUT/tune-*.log 2>/dev/null; then
  n=$(python3 -c "import json,glob; print(len(json.load(open(glob.glob('.run15/T/H*.json')[0]))['entries']))" 2>/dev/null)
  echo "table entries: $n; checking for $left s"
  if [ "$n" = 120 ]; then MINUTES=$(python3 -c "print(round($left/60, 2))") bash .run15/check.sh; fi
fi
echo "call done at $SECONDS s"
