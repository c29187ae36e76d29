"""The project's promises about itself: README's commands are the ones CI runs."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest -q tests"
    assert command in readme and command in ci
    assert "pip install -e . && python -m generator tune" in readme
