#!/usr/bin/env bash
# Call W (an H100): the decode table's grid timed on this GPU (decode --tune), then the H = 64 top-2048
# side-by-side against the serving path. $OUT/w.tgz rewritten after each step.
O=$OUT/w; mkdir -p $O/tables $O/side
start=$(date +%s); t(){ echo "$(( $(date +%s)-start )) s: $1" >> $O/call-timeline.txt; tar czf $OUT/w.tgz -C $OUT w; }
left(){ echo $(( 575 - ($(date +%s)-start) )); }
python3 -c "import tarfile; tarfile.open('.run6/builds.txz').extractall('.')"
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
(nvidia-smi; nvidia-smi -q | grep -i -A3 "power limit\|clocks" | head -40; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count)") > $O/gpu.txt 2>&1
t extracted
timeout 330 python3 -m generator decode --tune --table $O/tables/decode.json > $O/decode-tune.log 2>&1; echo "exit status $?" >> $O/decode-tune.log
t tune
L=$(left); [ $L -gt 40 ] && { timeout $((L-10)) python3 .serving-ref/side_by_side.py --out $O/side --heads 64 --top-k 2048 > $O/side/side.log 2>&1; echo "exit status $?" >> $O/side/side.log; }
t side
