#!/usr/bin/env bash
# Call Z2 (warm, after Z): the whole side-by-side grid (300 steps) with the decode table now in
# tuned_configs/ (Z's, extended to 256M tokens a step), then check --shipped --decode. $OUT/z2.tgz after each.
O=$OUT/z2; mkdir -p $O/side $O/checks
start=$(date +%s); t(){ echo "$(( $(date +%s)-start )) s: $1" >> $O/call-timeline.txt; tar czf $OUT/z2.tgz -C $OUT z2; }
left(){ echo $(( ${LIMIT:-570} - ($(date +%s)-start) )); }
[ -f .kernel-cache/manifest.json ] || python3 -c "import tarfile; tarfile.open('.run6/builds.txz').extractall('.')"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
nvidia-smi -L > $O/gpu.txt 2>&1
t extracted
timeout 300 python3 .serving-ref/side_by_side.py --out $O/side > $O/side/side.log 2>&1; echo "exit status $?" >> $O/side/side.log
t side
L=$(left); [ $L -gt 60 ] && timeout $L python3 -m generator check --shipped --decode --log $O/checks/check-decode.jsonl > $O/checks/check-decode.txt 2>&1; echo "exit status $?" >> $O/checks/check-decode.txt
t check
