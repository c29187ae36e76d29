"""The project's promises about itself: README's commands are the ones CI runs."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest -q tests"
    assert command in readme and command in ci
    assert "pip install -e . && python -m generator tune" in readme


def test_the_repository_speaks_of_the_product():
    """Records cite dates, commits and sections, not the numbered work periods they were made in, and
    the README is the manual: the contract is in it, not in a file outside the repository."""
    import re

    pattern = re.compile(r"\bsessions?\b", re.IGNORECASE)
    offenders = []
    for folder in ("generator", "runtime", "tools", "tests", "docs", ".ci"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".j2", ".cuh", ".cu", ".md", ".json", ".sh") and "__pycache__" not in path.parts:
                offenders += [f"{path.relative_to(REPO)}:{i + 1}" for i, line in enumerate(path.read_text().splitlines())
                              if pattern.search(line) and path.name != "test_project.py"]
    for name in ("README.md", "BENCHMARKS.md"):
        offenders += [f"{name}:{i + 1}" for i, line in enumerate((REPO / name).read_text().splitlines())
                      if pattern.search(line)]
    assert not offenders, offenders
    readme = (REPO / "README.md").read_text()
    assert "SPEC.md" not in readme and "## The contract" in readme
    from runtime.contract import SUPPORTED_HEADS, SUPPORTED_TOP_K

    assert "**32 or 64**" in readme and SUPPORTED_HEADS == (32, 64)
    assert "**512, 1024 or 2048**" in readme and SUPPORTED_TOP_K == (512, 1024, 2048)


def test_the_installed_version_is_the_projects():
    import re
    from pathlib import Path

    import runtime

    declared = re.search(r'^version = "([^"]+)"', (Path(__file__).parent.parent / "pyproject.toml").read_text(), re.M)
    assert runtime.__version__ == declared.group(1), (runtime.__version__, declared.group(1))


def test_the_readme_quick_start_runs_as_written():
    """README.md's quick start, pasted as a user would (CI runs it again from the installed wheel)."""
    readme = (REPO / "README.md").read_text()
    start = readme.index("```python", readme.index("## Quick start")) + len("```python\n")
    exec(compile(readme[start:readme.index("```", start)], "README.md (quick start)", "exec"), {})


def test_every_import_from_the_packages_names_something_that_exists():
    """Imports inside functions run only where their path does, many only on a GPU, which CI lacks: one
    that named a function its module no longer had made every GPU run of `tune` fail (f321875). Each
    `from runtime... / generator... / tools... import X` anywhere in the code or the tests must find X."""
    import ast
    import importlib
    import sys

    sys.path.insert(0, str(REPO))
    missing = []
    for folder in ("runtime", "generator", "tools", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            package = path.relative_to(REPO).with_suffix("").parts[:-1]
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                parts = list(package[:len(package) - node.level + 1]) if node.level else []
                module = ".".join(parts + ([node.module] if node.module else []))
                if module.split(".")[0] not in ("runtime", "generator", "tools"):
                    continue
                found = importlib.import_module(module)
                for alias in node.names:
                    if alias.name != "*" and not hasattr(found, alias.name):
                        try:
                            importlib.import_module(f"{module}.{alias.name}")
                        except ImportError:
                            missing.append(f"{path.relative_to(REPO)}:{node.lineno}: {module}.{alias.name}")
    assert not missing, missing
