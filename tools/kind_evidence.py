"""Fill a tuned table's per-kind evidence (Entry.kind_ms) from the optuna storage of the run that wrote it.

A tuning run records, per bucket, the best median each kernel kind reached in its study
(generator.search.kind_times); generator.tune.losing_kinds skips the starting points of kinds that
lost every bucket of a class by a wide margin. A table written before that was kept lacks the
evidence; where the run's storage survives (a journal), this reads each bucket's study back and
writes the evidence into the entries of the same bucket, with a line in the table's history.
Entries whose study the storage lacks stay without evidence (their class then prunes nothing
unless two other buckets of it have some).

    python tools/kind_evidence.py --journal tune-journal.log [--table tuned_configs/H200-132SM.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from generator.search import kind_times
    from generator.study import Bucket
    from generator.tune import note_in_history

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--journal", type=Path, required=True, help="the run's optuna journal file")
    p.add_argument("--table", type=Path, default=REPO / "tuned_configs" / "H200-132SM.json")
    args = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    data = json.loads(args.table.read_text())
    storage = JournalStorage(JournalFileBackend(str(args.journal)))
    evidence, codes = {}, set()
    for summary in optuna.get_all_study_summaries(storage):
        times = kind_times(optuna.load_study(study_name=summary.study_name, storage=storage))
        if times:  # (a study's name: GPU_CODE_ARCH_BUCKET, generator.study.study_name)
            prefix, bucket = summary.study_name.split(f"_{data['arch']}_", 1)
            evidence[bucket] = times
            codes.add(prefix.rsplit("_", 1)[-1])
    filled = 0
    for e in data["entries"]:
        name = Bucket(e["heads"], e["top_k"], e["rows"], e["keys"], e.get("requests", 1)).name
        if name in evidence:
            e["kind_ms"] = evidence[name]
            filled += 1
    note_in_history(data, f"python tools/kind_evidence.py --journal {args.journal.name}",
                    kind_evidence=f"kind_ms of {filled} of {len(data['entries'])} entries from {len(evidence)} studies "
                                  f"in {args.journal.name}, measured for kernel code {', '.join(sorted(codes))}")
    args.table.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.table}: kind_ms filled in {filled} of {len(data['entries'])} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
