"""Where the package's data is: the Jinja templates and the shipped tuned tables.

Both live at the top of the repository (templates/, tuned_configs/) and ship inside the runtime
package as runtime.templates and runtime.tuned_configs (pyproject.toml maps the folders there), so
an installed wheel, an editable install and a checkout on sys.path read the same files.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path


@lru_cache(maxsize=None)
def data_dir(name: str) -> Path:
    """The folder of runtime.<name> ("templates" or "tuned_configs")."""
    try:
        return Path(str(resources.files(f"runtime.{name}")))  # installed: the wheel's copy, or the mapped folder
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / name  # a checkout on sys.path, not installed
