#!/usr/bin/env bash
# Where the _g16 exact pass waits (carry [".run10"]): warp-state samples a SASS instruction.
O=$OUT/g; mkdir -p $O
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run10/cache
V=mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16
nvidia-smi -L > $O/gpu.txt 2>&1
timeout 420 ncu --clock-control none --set full --import-source yes -k regex:gate_kernel -c 1 -o /tmp/g16 python3 docs/results/h100-2026-12-05-gate16-bound/one_launch.py $V > $O/ncu.txt 2>&1
echo "exit $?" >> $O/ncu.txt; tail -3 $O/ncu.txt
ncu -i /tmp/g16.ncu-rep --page source --csv --print-source sass > $O/src.csv 2>&1
ncu -i /tmp/g16.ncu-rep --page details --csv > $O/details.csv 2>&1
ls -la $O; head -c 600 $O/src.csv
