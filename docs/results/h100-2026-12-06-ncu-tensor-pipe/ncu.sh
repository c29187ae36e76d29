#!/usr/bin/env bash
# Tensor-pipe activity of the shipped _g16 and its fp32 twin (one launch each, 4,096 x 128K keys, positive weights).
O=$OUT/p; mkdir -p $O
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache  # (the two variants built into it first)
B=mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7
nvidia-smi -L | tee $O/gpu.txt
ncu --query-metrics 2>/dev/null | grep -iE "gmma|pipe_tensor" > $O/metric-names.txt; wc -l $O/metric-names.txt
python3 docs/results/h100-2026-12-05-gate16-bound/one_launch.py $B && python3 docs/results/h100-2026-12-05-gate16-bound/one_launch.py ${B}_g16 && echo "warm ok"
M1=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum
M2=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp16.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum
for V in ${B}_g16 $B; do
  for M in $M1 $M2; do
    echo "== $V $M" | tee -a $O/metrics.txt
    timeout 90 ncu --clock-control none --metrics $M -k regex:gate_kernel -c 1 python3 docs/results/h100-2026-12-05-gate16-bound/one_launch.py $V 2>&1 | grep -vE "^==PROF==|^$" | tail -12 | tee -a $O/metrics.txt
  done
done
