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


def test_a_base_must_hold_the_code_the_entries_record(capsys):
    """--base names the revision the entries were timed on: its digests, read from git, must be the ones
    the table records, or a base with newer code would carry the entries over changes it never saw."""
    from runtime.kernel_code import code_digest, paged_code_digest
    from tools import restamp_table

    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "templates", "runtime"],
                           capture_output=True, text=True).stdout
    if dirty:
        pytest.skip("templates or runtime/ differ from HEAD: HEAD's digests are not this checkout's")
    assert restamp_table.digests_at("HEAD") == (code_digest(), paged_code_digest())
    assert restamp_table.timed_at("HEAD", {code_digest()}, code_digest(), "re-time")
    assert not restamp_table.timed_at("HEAD", {"0123456789abcdef"}, code_digest(), "re-time")
    assert "name the revision" in capsys.readouterr().out
