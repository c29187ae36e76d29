#!/usr/bin/env bash
# One device call (H100): the H100's own table finished (tune --resume --reclaim-after 0: the one bucket
# settled short, its three trials left RUNNING by the killed run of the machine before), then
# check --shipped with that table in tuned_configs/ (resumed on the 2026-12-06 H100 log), then the
# public entries' host costs on short chunks, then the GPU test of the dense path's out=.
# carry [".run16", ".run15/tune-cache.txz", ".whl", ".run17/new-libs.txz", ".run17/whl", ".run17/call.sh"]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CALL_S=${CALL_S:-520}
{
echo "start $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl .run17/whl/*.whl 2>&1 | tail -2
python3 -c "import tarfile,time; t=time.time(); tarfile.open('.run15/tune-cache.txz').extractall('.run15'); tarfile.open('.run17/new-libs.txz').extractall('.run17/pre'); print(f'caches unpacked in {time.time()-t:.0f} s')"
gunzip -f .run16/H100/T/tune-journal.log.gz
export PYTHONPATH=/tmp/site:. FUSED_MQA_TOPK_CACHE=$PWD/.run15/cache FUSED_MQA_TOPK_PREBUILT=$PWD/.run17/pre
python3 -c "import torch, optuna, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, optuna.__version__)"
ts=$SECONDS
FUSED_MQA_TOPK_TABLES=$PWD/.run16/H100/T timeout 200 python3 -m generator tune --resume --no-decode --reclaim-after 0 \
  --storage "journal:$PWD/.run16/H100/T/tune-journal.log" 2>&1 | grep -v "^\["
echo "tune exit ${PIPESTATUS[0]} after $((SECONDS - ts)) s"
gzip -1 .run16/H100/T/tune-journal.log
tar -czf "$OUT/H100T.tgz" -C .run16/H100 T
} 2>&1 | tee $OUT/tune.log
cp .run16/H100/T/H100-SXM-132SM.json tuned_configs/
zcat docs/results/h100-2026-12-06-sweep/check.jsonl.gz > $OUT/check.jsonl
left=$((CALL_S - SECONDS - 100))
echo "check: $left s" | tee -a $OUT/tune.log
python3 -m generator check --shipped --log $OUT/check.jsonl --resume --time-budget $(python3 -c "print(round($left/60, 2))") > $OUT/check.log 2>&1
echo "check rc=$? at $SECONDS s"; tail -3 $OUT/check.log
gzip $OUT/check.jsonl $OUT/check.log
left=$((CALL_S - SECONDS - 10))
if [ $left -gt 30 ]; then
  timeout $((left * 2 / 3)) python3 tools/overhead.py --entry --heads 64 --top-k 2048 --shape 64x8192 --shape 512x32768 > $OUT/overhead.log 2>&1
  echo "overhead rc=$? at $SECONDS s"
  timeout $((CALL_S - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k dense_path_on_the_gpu > $OUT/test_gpu.log 2>&1
  echo "test_gpu rc=$? at $SECONDS s"; tail -2 $OUT/test_gpu.log
fi
echo "call done at $SECONDS s"
