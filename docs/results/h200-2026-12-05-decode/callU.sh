#!/usr/bin/env bash
# Call U (the H200): the decode table re-timed in alternating rounds (81624d8), the side-by-side grid at
# this code (300 steps), then signed and indexer-like data (75 each) as time allows. $OUT/u.tgz after each step.
O=$OUT/u; mkdir -p $O/side $O/tables
start=$(date +%s); t(){ echo "$(( $(date +%s)-start )) s: $1" >> $O/call-timeline.txt; tar czf $OUT/u.tgz -C $OUT u; }
left(){ echo $(( ${LIMIT:-400} - ($(date +%s)-start) )); }
python3 -c "import tarfile; tarfile.open('.run6/builds.txz').extractall('.')"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
(nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)") > $O/gpu.txt 2>&1
t extracted
timeout 150 python3 -m generator decode --tune --table $O/tables/H200-132SM.json > $O/decode-tune.log 2>&1; echo "exit status $?" >> $O/decode-tune.log
t tune
L=$(left); timeout $((L > 200 ? 200 : L)) python3 .serving-ref/side_by_side.py --out $O/side > $O/side/side.log 2>&1; echo "exit status $?" >> $O/side/side.log
t side
for d in signed indexer; do
  L=$(left); [ $L -gt 40 ] || break
  timeout $((L > 50 ? 50 : L)) python3 .serving-ref/side_by_side.py --out $O/side --heads 64 --top-k 2048 --distribution $d --tag=-$d > $O/side/side-$d.log 2>&1; echo "exit status $?" >> $O/side/side-$d.log
  t "side $d"
done
