"""tools/restamp_table.py carries a table over a change only where the kernels' code is shown not to
have moved (CPU: it renders the base revision's templates from a git worktree)."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                                reason="needs the git checkout (it renders the base revision from a worktree)")
NAME = "mqa_dense_sm90a_h32_k1024_r4_g2x2_q2_s4_t256_b4096_rc32_pb64"


def test_the_same_rendering_is_accepted_and_other_code_refused(monkeypatch, capsys):
    from tools import restamp_table

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "templates", "runtime"],
                           capture_output=True, text=True).stdout
    if dirty:
        pytest.skip("templates or runtime/ differ from HEAD: the base would render other code")
    assert "render the same code" in restamp_table.shown_unchanged(head, [NAME], "re-time")
    render = restamp_table.render
    monkeypatch.setattr(restamp_table, "render", lambda spec: render(spec).replace("__syncthreads();", "", 1))
    assert restamp_table.shown_unchanged(head, [NAME], "re-time") is None
    assert "render other code" in capsys.readouterr().out
