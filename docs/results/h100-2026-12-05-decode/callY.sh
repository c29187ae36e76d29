#!/usr/bin/env bash
# Call Y (warm): the whole side-by-side grid, then the split sweep of the _m defaults against one merging CTA.
O=$OUT/y; mkdir -p $O/side
start=$(date +%s); t(){ echo "$(( $(date +%s)-start )) s: $1" >> $O/call-timeline.txt; tar czf $OUT/y.tgz -C $OUT y; }
left(){ echo $(( 580 - ($(date +%s)-start) )); }
[ -f .kernel-cache/manifest.json ] && [ -d .ab9 ] || python3 -c "import tarfile; tarfile.open('.run6/builds.txz').extractall('.')"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
nvidia-smi -L > $O/gpu.txt 2>&1
t extracted
timeout 280 python3 .serving-ref/side_by_side.py --out $O/side > $O/side/side.log 2>&1; echo "exit status $?" >> $O/side/side.log
t side
S="--shape 1x8192 --shape 1x131072 --shape 1x1048576 --shape 4x524288 --shape 16x32768"
for cfg in "64 2048 4" "64 2048 2" "32 512 4"; do set -- $cfg
  L=$(left); [ $L -gt 30 ] || break
  timeout $(( L < 100 ? L : 100 )) python3 tools/compare_paged_builds.py --out .ab9 $S --heads $1 --top-k $2 --next-n $3 --parts 2 --parts 4 --parts 8 --parts 15 --parts 24 --parts 32 --parts 48 --parts 64 --build flag:merge_ctas=1 --build flag --rounds 2 --log $O/parts-h$1k$2-n$3.jsonl > $O/parts-h$1k$2-n$3.txt 2>&1
  t "parts h$1 k$2 n$3"
done
