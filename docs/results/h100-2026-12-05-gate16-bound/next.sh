#!/usr/bin/env bash
# Next GPU call (carry [".run10"]): exactness of the tightened bound and the CUDA gate inputs, then the A/B.
# Here first: FUSED_MQA_TOPK_CACHE=.run10/cache python -m generator build V V32 && python .run10/ab_build.py V
O=$OUT/g; mkdir -p $O
nvidia-smi -L > $O/gpu.txt 2>&1; cat $O/gpu.txt
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run10/cache
V=mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16
start=$(date +%s)
timeout 180 python3 -m pytest -q tests/test_gpu.py -k "fp16" > $O/pytest.txt 2>&1; echo "exit $?" >> $O/pytest.txt; tail -3 $O/pytest.txt
echo "$(( $(date +%s)-start )) s pytest"
timeout 280 python3 .run10/ab_time.py $V > $O/ab.txt 2>&1; echo "exit $?" >> $O/ab.txt; cut -c1-300 $O/ab.txt
echo "$(( $(date +%s)-start )) s all"
timeout 120 python3 .run10/g16.py $O/g16.jsonl check > $O/g16log.txt 2>&1; echo "exit $?" >> $O/g16log.txt
grep -c '"same": true' $O/g16.jsonl; grep '"same": false\|error' $O/g16.jsonl | head -5
echo "$(( $(date +%s)-start )) s with checks"
