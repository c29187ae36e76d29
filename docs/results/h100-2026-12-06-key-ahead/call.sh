#!/usr/bin/env bash
# One call: (1) the key-ahead and rank A/B (ab3_time.py), (2) the 88 family checks of the key-ahead build,
# (3) on an H200: its decode table tuned (.run12 builds), (4) tests/test_gpu.py -k fp16 with the time left.
O=$OUT/g; D=$OUT/d; mkdir -p $O $D/tables/decode
start=$(date +%s); el(){ echo "$(( $(date +%s)-start )) s: $1" | tee -a $O/timeline.txt; }
(nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)") > $O/gpu.txt 2>&1; nvidia-smi -L
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run10/cache
V=mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16
timeout 230 python3 .run10/ab3_time.py $V > $O/ab3.txt 2>&1; echo "exit $?" >> $O/ab3.txt; cut -c1-700 $O/ab3.txt
el ab3
timeout 100 python3 .run10/g16.py $O/g16-3.jsonl check > $O/g16log3.txt 2>&1; echo "exit $?" >> $O/g16log3.txt
grep -c '"same": true' $O/g16-3.jsonl; grep '"same": false\|error' $O/g16-3.jsonl | head -5
el checks
timeout $(( ${LIMIT:-470} - ($(date +%s)-start) )) python3 -m pytest -q tests/test_gpu.py -k "fp16" > $O/pytest3.txt 2>&1; echo "exit $?" >> $O/pytest3.txt; tail -3 $O/pytest3.txt
el pytest
