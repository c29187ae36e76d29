#!/usr/bin/env bash
# Call X (warm, any sm_90 card): sanitize of the _m4 default, then check --shipped --decode. $OUT/x.tgz after each step.
O=$OUT/x; mkdir -p $O
start=$(date +%s); t(){ echo "$(( $(date +%s)-start )) s: $1" >> $O/call-timeline.txt; tar czf $OUT/x.tgz -C $OUT x; }
left(){ echo $(( 580 - ($(date +%s)-start) )); }
[ -f .kernel-cache/manifest.json ] && [ -d .ab9 ] || python3 -c "import tarfile; tarfile.open('.run6/builds.txz').extractall('.')"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
nvidia-smi -L > $O/gpu.txt 2>&1
t extracted
for tool in memcheck racecheck synccheck; do
  timeout 55 python3 tools/sanitize.py --case "merged by four" --tool $tool --timeout 50 --out $O/sanitize-$tool.txt > $O/sanitize-$tool.log 2>&1; echo "exit status $?" >> $O/sanitize-$tool.log
  t "sanitize $tool"
done
L=$(left); timeout $((L-10)) python3 -m generator check --shipped --decode --log $O/check-decode.jsonl --time-budget $(python3 -c "print(round(($L-60)/60,1))") > $O/check-decode.txt 2>&1; echo "exit status $?" >> $O/check-decode.txt
t check
