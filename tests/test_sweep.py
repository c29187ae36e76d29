"""The sweep's grid and chunks (CPU): what `bench --sweep` measures on the GPU."""

import json

from generator.sweep import (
    SWEEP_KEYS,
    SWEEP_ROWS,
    Shape,
    chunk,
    geometric_mean,
    read_serving,
    sweep_shapes,
)
from runtime.contract import check_inputs


def test_the_grid_covers_the_issue_shapes_and_only_valid_chunks():
    shapes = sweep_shapes([32, 64], [512, 2048])
    assert all(s.rows <= s.keys and s.rows % s.requests == 0 for s in shapes)
    one = {(s.rows, s.keys) for s in shapes if s.requests == 1 and (s.heads, s.top_k) == (32, 2048)}
    assert one == {(r, n) for r in SWEEP_ROWS for n in SWEEP_KEYS if r <= n}
    assert len(shapes) == 4 * 42  # per heads and top-k, the 42 chunks of the serving engines' sweep


def test_a_packed_chunk_has_its_requests_side_by_side():
    wl = chunk(Shape(8, 64, 8192, 32, 512), device="cpu")
    check_inputs(*wl.args())
    assert len(set(wl.ks.tolist())) == 8 and int(wl.ke.max()) == 8192
    assert int((wl.ke - wl.ks).max()) == 1024  # each row sees its own request only


def test_serving_times_are_read_by_shape(tmp_path):
    path = tmp_path / "serving.jsonl"
    path.write_text(json.dumps({"requests": 1, "rows": 64, "keys": 8192, "heads": 32, "top_k": 2048, "ms": 0.049}) + "\n")
    assert read_serving(path) == {(1, 64, 8192, 32, 2048): 0.049}
    assert abs(geometric_mean([2.0, 0.5]) - 1.0) < 1e-12


def test_results_print_as_the_benchmark_tables():
    from generator.sweep import markdown

    def result(q, m, n, path, auto, serving):
        return {"requests": q, "rows": m, "keys": n, "heads": 32, "top_k": 512, "auto_path": path, "auto_ms": auto,
                "auto_floor_share": 0.5, "serving_ms": serving, "vs_serving": serving / auto}

    text = markdown([result(1, 512, 8192, "dense", 0.2, 0.1), result(1, 512, 32768, "mqa_topk_x", 0.1, 0.2),
                     result(8, 512, 8192, "dense", 0.1, 0.1)])
    lines = text.splitlines()
    assert "geometric mean 1.00x, slower on 1 of 3" in lines[0]
    assert lines[2] == "| requests, rows | 8K | 32K |"
    assert lines[4] == "| 1, 512 | 0.100 / 0.200 (0.50x; 0.50 d) | 0.200 / 0.100 (2.00x; 0.50) |"
    assert lines[5] == "| 8, 512 | 0.100 / 0.100 (1.00x; 0.50 d) | - |"
