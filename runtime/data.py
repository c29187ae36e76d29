"""Where the package's data is: the Jinja templates and the shipped tuned tables.

Both live at the top of the repository (templates/, tuned_configs/) and ship inside the runtime
package as runtime.templates and runtime.tuned_configs (pyproject.toml maps the folders there), so
an installed wheel, an editable install and a checkout on sys.path read the same files.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def data_dir(name: str) -> Path:
    """The folder of runtime.<name> ("templates" or "tuned_configs"): where the installed package has
    it (a wheel's copy, or the folder an editable install maps), else the checkout's top-level one. A
    folder that holds nothing but caches is passed over (an old checkout's leftover runtime/<name>/
    would otherwise shadow the real one as a namespace package)."""
    try:
        spec = importlib.util.find_spec(f"runtime.{name}")
    except ModuleNotFoundError:
        spec = None
    candidates = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    checkout = Path(__file__).resolve().parent.parent / name
    for folder in (*candidates, checkout):
        if folder.is_dir() and any(p.name != "__pycache__" for p in folder.iterdir()):
            return folder
    return checkout
