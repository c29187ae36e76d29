#!/usr/bin/env bash
# Call Z: this GPU's decode grid timed to 256M tokens a step (past the shipped table's 16M cap), then the
# side-by-side on the steps past 16M with the table dispatch reads today (shipped, or borrowed), then with
# the new one. $OUT/z.tgz after each step.
O=$OUT/z; mkdir -p $O/side $O/tables/decode $O/none
start=$(date +%s); t(){ echo "$(( $(date +%s)-start )) s: $1" >> $O/call-timeline.txt; tar czf $OUT/z.tgz -C $OUT z; }
left(){ echo $(( ${LIMIT:-570} - ($(date +%s)-start) )); }
[ -f .kernel-cache/manifest.json ] || python3 -c "import tarfile; tarfile.open('.run6/builds.txz').extractall('.')"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
(nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)") > $O/gpu.txt 2>&1
t extracted
FUSED_MQA_TOPK_TABLES=$O/tables timeout 330 python3 -m generator decode --tune --max-tokens 268435456 > $O/decode-tune.log 2>&1; echo "exit status $?" >> $O/decode-tune.log
t tune
S="--shape 64x524288 --shape 256x131072 --shape 64x1048576 --shape 256x524288 --shape 256x1048576"
L=$(left); FUSED_MQA_TOPK_TABLES=$O/none timeout $(( L/2 > 20 ? L/2 : 20 )) python3 .serving-ref/side_by_side.py --out $O/side $S --tag=-before > $O/side/side-before.log 2>&1; echo "exit status $?" >> $O/side/side-before.log
t "side before"
L=$(left); [ $L -gt 20 ] && FUSED_MQA_TOPK_TABLES=$O/tables timeout $L python3 .serving-ref/side_by_side.py --out $O/side $S --tag=-extended > $O/side/side-extended.log 2>&1; echo "exit status $?" >> $O/side/side-extended.log
t "side extended"
