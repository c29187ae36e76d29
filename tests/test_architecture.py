"""The house rules of docs/architecture.md, checked on the source: the runtime imports nothing of the
generator, no modules import each other in a circle, and a serving process that calls the op imports
neither Jinja nor the compiler driver."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "generator")


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (at any depth of its code, lazily or not)."""
    modules = {f"{p.parent.name}.{p.stem}" if p.stem != "__init__" else p.parent.name: p
               for pkg in PACKAGES for p in (REPO / pkg).glob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name.split(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = (f"{package}.{node.module}" if node.module else package) if node.level else (node.module or "")
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    found = target if target in modules else base if base in modules else None
                    if found and found != name:
                        graph[name].add(found)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules and a.name != name)
    return graph


def test_the_graph_is_read():
    graph = import_graph()
    assert "runtime.loader" in graph["runtime.dense"] and "runtime.table" in graph["generator.tune"]


def test_the_runtime_imports_nothing_of_the_generator():
    climbs = sorted((m, t) for m, targets in import_graph().items() if m.startswith("runtime")
                    for t in targets if t.startswith("generator"))
    assert not climbs, f"runtime modules import the generator: {climbs}"


def test_no_modules_import_each_other_in_a_circle():
    graph = import_graph()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m == goal:
                return True
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))
        return False

    circles = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if reaches(b, a)})
    assert not circles, f"import circles through: {circles}"


def test_a_served_call_imports_neither_jinja_nor_the_compiler_driver():
    code = ("import sys, torch, runtime\n"
            "q = torch.randn(4, 32, 128).to(torch.float8_e4m3fn); k = torch.randn(600, 128).to(torch.float8_e4m3fn)\n"
            "ks = torch.zeros(4, dtype=torch.int32); ke = torch.full((4,), 600, dtype=torch.int32)\n"
            "runtime.fused_mqa_topk(q, (k, torch.ones(600)), torch.rand(4, 32), ks, ke, 512)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jinja2', 'generator', 'optuna')"
            " or m in ('runtime.render', 'runtime.build')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"a served call imported {out.strip()}"


def test_a_leftover_folder_of_caches_does_not_shadow_the_data(tmp_path, monkeypatch):
    """An old checkout's runtime/tuned_configs/ holding only __pycache__ is a namespace package to
    Python; runtime.data passes over it to the real folder (it once hid the shipped table)."""
    import importlib.util
    from types import SimpleNamespace

    from runtime import data

    stale = tmp_path / "tuned_configs"
    (stale / "__pycache__").mkdir(parents=True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: SimpleNamespace(submodule_search_locations=[str(stale)]))
    assert data.data_dir.__wrapped__("tuned_configs") == REPO / "tuned_configs"
    (stale / "H200-132SM.json").write_text("{}")
    assert data.data_dir.__wrapped__("tuned_configs") == stale  # a folder with data is taken
