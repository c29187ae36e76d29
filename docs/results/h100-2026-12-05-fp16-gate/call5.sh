#!/usr/bin/env bash
O=$OUT/g; mkdir -p $O
nvidia-smi -L > $O/gpu.txt 2>&1; cat $O/gpu.txt
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run9/cache
start=$(date +%s)
timeout 60 python3 .run9/abl_time.py mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16 > $O/abl.txt 2>&1; echo "exit $?" >> $O/abl.txt
cat $O/abl.txt | tail -4; echo "$(( $(date +%s)-start )) s abl"
timeout 60 python3 -m pytest -q -x tests/test_gpu.py -k fp16 > $O/pytest.txt 2>&1; echo "exit $?" >> $O/pytest.txt; tail -2 $O/pytest.txt
timeout 80 python3 .run9/g16.py $O/g16.jsonl check > $O/log.txt 2>&1; echo "exit $?" >> $O/log.txt
grep -c '"same": true' $O/g16.jsonl; grep '"same": false\|error' $O/g16.jsonl | head -5
echo "$(( $(date +%s)-start )) s all"
