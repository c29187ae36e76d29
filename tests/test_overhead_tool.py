"""tools/overhead.py --python: the entry's Python timed with the GPU's part stubbed (no GPU needed)."""

import pytest

from tools import overhead


def test_the_entrys_python_is_timed_down_to_the_dense_kernels_call(capsys):
    assert overhead.python_costs(["64x8192"], 64, 2048) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("h64 k2048 64x8192: the entry's Python") and line.endswith("us a call")
    assert float(line.split(": ")[-1].split()[0]) > 0


def test_a_call_that_misses_the_stubbed_library_is_an_error(monkeypatch):
    from runtime import fused

    monkeypatch.setattr(fused, "run_dense", lambda *args, **kw: None)  # (a path the stubs do not reach)
    with pytest.raises(RuntimeError, match="did not reach the dense kernels' library"):
        overhead.python_costs(["1x8192"], 32, 512)
