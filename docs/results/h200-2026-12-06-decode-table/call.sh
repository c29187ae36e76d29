#!/usr/bin/env bash
# (1) bench --distribution on the GPU: _g16 and its fp32 twin against the dense path, three distributions;
# (2) on an H200: its decode table tuned (.run12/dbuilds.txz).
O=$OUT/e; D=$OUT/d; mkdir -p $O $D/tables
start=$(date +%s); el(){ echo "$(( $(date +%s)-start )) s: $1" | tee -a $O/timeline.txt; }
(nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)") > $O/gpu.txt 2>&1; nvidia-smi -L
export PYTHONPATH=.
V=mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7
FUSED_MQA_TOPK_CACHE=$PWD/.run10/cache timeout 170 python3 -m generator bench --shape 4096x131072 --heads 64 --top-k 2048 --distribution positive --distribution signed --distribution indexer --fused ${V}_g16 --fused $V --sustain 0 --log $O/bench.jsonl > $O/bench.txt 2>&1; echo "exit $?" >> $O/bench.txt; cat $O/bench.txt | cut -c1-300
el bench
if grep -q H200 $O/gpu.txt; then
  python3 -c "import tarfile; tarfile.open('.run12/dbuilds.txz').extractall('.run12')"
  FUSED_MQA_TOPK_CACHE=$PWD/.run12/cache FUSED_MQA_TOPK_TABLES=$D/tables timeout 150 python3 -m generator decode --tune > $D/decode-tune.log 2>&1; echo "exit status $?" >> $D/decode-tune.log
  tail -3 $D/decode-tune.log; cp $D/tables/decode/*.json $O/ 2>/dev/null; el "decode tune"
fi
