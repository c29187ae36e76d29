#!/usr/bin/env bash
# How far a second recording moves the top of a landscape, and whether a longer warm-up steadies it
# (BENCHMARKS.md, "The tuner's search against the whole space"): on the GPU machine, for each bucket,
# the N fastest points of its recorded landscape timed again four times, twice as a tuning study times
# a candidate (one warm-up run) and twice warmed up for WARM_MS of its own GPU time first; then
# tools/landscape_drift.py profiles each recording and compares each pair; last, each bucket's three
# fastest recorded points timed side by side twice, as tune's pick times a study's finalists.
#   bash tools/rerun_fastest.sh [N] [WARM_MS] [LANDSCAPE:BUCKET ...]
# (defaults 16, 500 and the four recorded buckets; carry nothing: it builds). A bucket of 16 points
# takes about 2 minutes of nvcc and 2 of timing on the H200 machine: give one or two buckets a call,
# e.g. `bash tools/rerun_fastest.sh 16 500 landscape-h32-long.jsonl:32x2048x16384x131072`.
# Everything lands in one tarball, $OUT/rerun-fastest.tgz, with summary.md.
set -uo pipefail
OUT=${OUT:-/tmp/out}
N=${1:-16}
WARM=${2:-500}
shift $(( $# < 2 ? $# : 2 ))
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(landscape.jsonl:64x2048x4096x32768 landscape.jsonl:64x2048x16384x131072
                                   landscape-packed.jsonl:64x2048x16384x131072x8
                                   landscape-h32-long.jsonl:32x2048x16384x131072)
mkdir -p "$OUT"
W=$(mktemp -d)
export PYTHONPATH=$PWD FUSED_MQA_TOPK_CACHE=${FUSED_MQA_TOPK_CACHE:-$W/cache}
L=docs/results/h200-2026-12-04-landscape
{ nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; git log --oneline -1; } > "$W/summary.md"
record() {  # landscape, bucket, name, warm-ms
    python -m generator regret --record "$W/$3.jsonl" --bucket "$2" --fastest "$N" --of "$L/$1" --warm-ms "$4" \
        >> "$W/record.log" 2>&1 || echo "$3: exit $?" >> "$W/summary.md"
}
for spec in "${specs[@]}"; do
    file=${spec%%:*} bucket=${spec#*:}
    for name in one-a warm-a one-b warm-b; do  # (alternated: neither method's pair is timed closer together)
        record "$file" "$bucket" "$name" "$([ "${name%-*}" = warm ] && echo "$WARM" || echo 0)"
    done
done
# The side-by-side pick (tune.pick) of each bucket's 3 fastest recorded points, twice: does it repeat?
python - "$L" "${specs[@]}" >> "$W/playoff.md" 2>&1 <<'PY'
import statistics, sys
from pathlib import Path
from generator.regret import Landscape, parse_bucket
from generator.tune import GpuMeasurer
from runtime.variant import Variant
m = GpuMeasurer()
for spec in sys.argv[2:]:
    f, b = spec.split(":")
    bucket = parse_bucket(b)
    points = Landscape.read(Path(sys.argv[1]) / f).points[bucket]
    med = {n: statistics.median(t) for n, t in points.items() if t}
    finals = [Variant.from_name(n) for n in sorted(med, key=med.get)[:3]]
    for attempt in (1, 2):
        timed = m.playoff(finals, bucket)
        print(f"{bucket.name} playoff {attempt}: " + ", ".join(
            f"{v.name} {timed[v.name].ms:.3f} ms (+-{timed[v.name].spread:.1%}; recorded {med[v.name]:.3f})"
            for v in finals), flush=True)
PY
{
    echo "## the three fastest of each bucket, timed side by side twice"; cat "$W/playoff.md"
    for name in one-a one-b warm-a warm-b; do
        echo; echo "## $name"; python tools/landscape_drift.py "$W/$name.jsonl" --top 10
    done
    echo; echo "## a second recording, one warm-up run (one-a against one-b)"
    python tools/landscape_drift.py "$W/one-a.jsonl" --against "$W/one-b.jsonl"
    echo; echo "## a second recording, warmed up for $WARM ms (warm-a against warm-b)"
    python tools/landscape_drift.py "$W/warm-a.jsonl" --against "$W/warm-b.jsonl"
    echo; echo "## the landscapes against one-a"
    python tools/landscape_drift.py "$L"/landscape*.jsonl --against "$W/one-a.jsonl"
} >> "$W/summary.md" 2>&1
cat "$W/summary.md"
tar -czf "$OUT/rerun-fastest.tgz" -C "$W" --exclude=cache .
