#!/usr/bin/env bash
# Where the shipped _g16 (1007827's read ahead) waits now: ncu warp-state samples by loop and instruction.
O=$OUT/n; mkdir -p $O
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run10/cache
V=mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16
nvidia-smi -L > $O/gpu.txt 2>&1; cat $O/gpu.txt
start=$(date +%s)
timeout 300 ncu --clock-control none --set full --import-source yes -k regex:gate_kernel -c 1 -o /tmp/g16 python3 docs/results/h100-2026-12-05-gate16-bound/one_launch.py $V > $O/ncu.txt 2>&1
echo "exit $? after $(( $(date +%s)-start )) s" >> $O/ncu.txt; tail -3 $O/ncu.txt
ncu -i /tmp/g16.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2>&1
ncu -i /tmp/g16.ncu-rep --page details --csv > $O/ncu-details.csv 2>&1
python3 tools/ncu_loops.py /tmp/src.csv > $O/ncu-loops.txt 2>&1; cat $O/ncu-loops.txt
