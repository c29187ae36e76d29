python -m pip install -q --no-index --find-links .whl optuna 2>&1 | grep -v WARNING | tail -1
python -c "import optuna; print('optuna', optuna.__version__)"
export PYTHONPATH=$PWD FUSED_MQA_TOPK_CACHE=$PWD/.tcache
S="--heads 32 --top-k 512 --shape 512x8192 --shape 512x32768 --no-decode"
now() { python -c "import time; print(time.time())"; }
t0=$(now); timeout 150 python -m generator tune $S --gpus 2 --out-dir $OUT/g2 > $OUT/g2.log 2>&1; echo "rc=$? gpus2 start $t0 end $(now)" | tee -a $OUT/wall.txt
t0=$(now); timeout 50 python -m generator tune $S --gpus 1 --out-dir $OUT/g1 > $OUT/g1.log 2>&1; echo "rc=$? gpus1 start $t0 end $(now)" | tee -a $OUT/wall.txt
tail -n 6 $OUT/g2.log $OUT/g1.log
