#!/usr/bin/env bash
# One call of the default tuning run on the lent GPU, resumed until every bucket is tuned:
# carry [".run15/tune.sh", ".run15/tune-cache.txz", ".whl", ".run15/T"]; unpack $OUT/T.tgz over .run15/T after.
# The table is written where the runtime reads (FUSED_MQA_TOPK_TABLES), as a user's default run does.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MINUTES=${MINUTES:-8}
t0=$(date +%s.%N)
log="$OUT/tune-$(date +%H%M%S).log"
{
echo "start $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
if [ ! -d .run15/cache ]; then
  python3 -c "import tarfile,time; t=time.time(); tarfile.open('.run15/tune-cache.txz').extractall('.run15'); print(f'cache unpacked in {time.time()-t:.0f} s')"
else echo "cache kept from the last call: $(ls .run15/cache | wc -l) entries"; fi
touch .run15/cache-mark
export PYTHONPATH=/tmp/site:. FUSED_MQA_TOPK_CACHE=$PWD/.run15/cache FUSED_MQA_TOPK_TABLES=$PWD/.run15/T
python3 -c "import torch, optuna, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, optuna.__version__)"
echo "setup $(python3 -c "import time; print(f'{time.time()-$t0:.0f}')") s"
ts=$(date +%s.%N)
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
timeout $((DEADLINE - $(date +%s))) python3 -m generator tune --resume --no-decode --time-budget "$MINUTES" \
  --storage "journal:$PWD/.run15/T/tune-journal.log"
echo "tune exit $? after $(python3 -c "import time; print(f'{time.time()-$ts:.0f}')") s"
echo "libraries compiled here this call: $(find .run15/cache -name '*.so' -newer .run15/cache-mark | wc -l)"
} 2>&1 | tee "$log"
tar -czf "$OUT/T.tgz" -C .run15 T
echo "end $(date -u +%FT%TZ)" >> "$log"
