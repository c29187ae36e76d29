"""tools/paged_split_fit.py on a sweep made from a model (no GPU): a request of C keys in P parts taking
a C / P + b P + c, whose best split is sqrt(a C / b); the fit must find the rule's constant near it,
and the interpolation must return the swept times where it was swept."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tools import paged_split_fit

PARTS = (4, 8, 15, 24, 32, 48, 64)


def model_ms(context: int, parts: int, a: float = 16e-6, b: float = 2.5e-3, c: float = 0.01) -> float:
    return a * context / parts + b * parts + c


def write_sweep(path: Path) -> None:
    with path.open("w") as f:
        for context in (32768, 131072, 524288):
            for parts in PARTS:
                ms = model_ms(context, parts)
                f.write(json.dumps({"batch": 1, "context": context, "heads": 64, "top_k": 2048, "next_n": 4,
                                    "parts": parts, "ms": {"rows": ms}}) + "\n")


def test_the_fit_finds_the_models_balance(tmp_path):
    log = tmp_path / "sweep.jsonl"
    write_sweep(log)
    curves = paged_split_fit.read_curves([log], "rows")
    steps = curves[(64, 2048, 4)]
    assert len(steps) == 3
    best, best_ms = paged_split_fit.fit(steps, 2048, 132)
    optimum = math.sqrt(16e-6 * 131072 / 2.5e-3)  # about 29 parts at 128K keys
    assert abs(best - optimum) <= 0.25 * optimum, best
    from runtime.paged import PARTS_AT_128K_TOP_2048

    assert best_ms < paged_split_fit.mean_at(steps, 2048, 132, PARTS_AT_128K_TOP_2048)  # better than the n1-fitted 16


def test_time_at_returns_swept_points_and_stays_between_neighbours():
    curve = {p: model_ms(131072, p) for p in PARTS}
    for p in PARTS:
        assert paged_split_fit.time_at(curve, p) == curve[p]
    mid = paged_split_fit.time_at(curve, 20)
    assert min(curve[15], curve[24]) <= mid <= max(curve[15], curve[24])
    assert paged_split_fit.time_at(curve, 1) == curve[4] and paged_split_fit.time_at(curve, 500) == curve[64]
