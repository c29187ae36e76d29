#!/usr/bin/env bash
# One call on the lent GPU machine: install the carried wheels, then run what is asked, logging
# under $OUT. Build here first (`FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache python -m generator build
# --shipped`, plus any extra variants), then run with carry [".kernel-cache", ".whl"]:
#   bash tools/device_run.sh tests [pytest args...]   # GPU tests
#   bash tools/device_run.sh bench [bench args...]    # python -m generator bench
#   bash tools/device_run.sh check [check args...]    # python -m generator check
#   bash tools/device_run.sh tune [tune args...]      # python -m generator tune
#   bash tools/device_run.sh regret [regret args...]  # python -m generator regret
#   bash tools/device_run.sh wheel [check args...]    # as users get it: the wheel in dist/ (pip wheel --no-deps
#                                                     # -w dist . here; carry dist too), no nvcc anywhere, the
#                                                     # carried cache as FUSED_MQA_TOPK_PREBUILT, run from /tmp
set -euo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:.
export FUSED_MQA_TOPK_CACHE=$PWD/.kernel-cache
what=$1
shift
case "$what" in
    tests) python3 -m pytest -q "$@" 2>&1 | tee "$OUT/tests.log" ;;
    bench | check | tune | regret) python3 -m generator "$what" "$@" 2>&1 | tee "$OUT/$what.log" ;;
    wheel)
        python3 -m pip install -q --no-deps --no-index --target /tmp/wheel-site dist/*.whl
        repo=$PWD
        py=$(command -v python3)
        nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /none/nvcc)")
        (cd /tmp && env -u NVCC PATH="$(echo "$PATH" | tr ':' '\n' | grep -vx "$nvcc_dir" | paste -sd:)" \
            CUDA_HOME=/nonexistent PYTHONPATH=/tmp/site:/tmp/wheel-site FUSED_MQA_TOPK_CACHE=/tmp/empty-cache \
            FUSED_MQA_TOPK_PREBUILT="$repo/.kernel-cache" \
            CHECKOUT="$repo" PY="$py" \
            sh -c 'command -v nvcc && exit 3; "$PY" -m generator check --shipped "$@" && "$PY" "$0"' \
            "$repo/.ci/wheel_smoke.py" "$@") 2>&1 | tee "$OUT/wheel.log" ;;
    *) echo "unknown step $what" >&2; exit 2 ;;
esac
