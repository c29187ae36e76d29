#!/usr/bin/env bash
# Issue "Past the epilogue"'s long-chunk table: 16,384-row causal chunks, 32K-1M keys, top-512/1024/2048, three
# data distributions, the serving path (.serving-ref/prefill: DeepGEMM's sm90 MQA logits + vLLM's
# top_k_per_row_prefill) and ours (bench --fused table: the shipped table's variant, our dense path, the
# sustained fp8 floor) timed one after the other in this call.
# Arguments: HEADS:DISTRIBUTION pairs, e.g. 64:positive 64:signed. SELFTEST=1: the serving path's self-test first.
set -u
TAG=$(date +%H%M%S); O=$OUT/long-$TAG; mkdir -p $O
export PYTHONPATH=. FUSED_MQA_TOPK_CACHE=$PWD/.run14/devcache
mkdir -p $FUSED_MQA_TOPK_CACHE
[ -f $FUSED_MQA_TOPK_CACHE/manifest.json ] || tar -xJf .run14/bench-cache.txz -C $FUSED_MQA_TOPK_CACHE
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee $O/gpu.txt
python3 -m generator build $(cat .run14/bench-names.txt) > $O/build.log 2>&1; echo "build rc=$? at $SECONDS s"
if [ "${SELFTEST:-0}" = 1 ]; then
  timeout 150 python3 .serving-ref/prefill/serving_ref.py --selftest > $O/selftest.log 2>&1; echo "selftest rc=$? at $SECONDS s"
  tail -12 $O/selftest.log
fi
S=""; for n in 32768 65536 131072 262144 524288 1048576; do S="$S --shape 16384x$n"; done
K="--top-k 512 --top-k 1024 --top-k 2048"
for HD in "$@"; do
  H=${HD%%:*}; D=${HD##*:}
  timeout 170 python3 .serving-ref/prefill/serving_ref.py $S --heads $H $K --distribution $D --seed 1 \
    --out $O/serving-h$H-$D.jsonl > $O/serving-h$H-$D.log 2>&1; echo "serving h$H $D rc=$? at $SECONDS s"
  tail -2 $O/serving-h$H-$D.log
  timeout 170 python3 -m generator bench $S --heads $H $K --fused table --distribution $D --log $O/bench-h$H-$D.jsonl \
    > $O/bench-h$H-$D.log 2>&1; echo "bench h$H $D rc=$? at $SECONDS s"
  tail -2 $O/bench-h$H-$D.log
done
cd $OUT && tar -czf long-$TAG.tgz long-$TAG && rm -rf long-$TAG
