"""The variants this project ships: every variant a tuned table names, plus the default per
(heads, top_k). CI compiles all of them; the runtime can load any of them."""

from __future__ import annotations

import json

from runtime.table import table_dir

from .space import AXES, default_variant
from .variant import Variant


def shipped_variants() -> list[Variant]:
    names = set()
    for path in sorted(table_dir().glob("*.json")):
        names.update(e["variant"] for e in json.loads(path.read_text())["entries"])
    variants = {Variant.from_name(n) for n in names}
    variants.update(default_variant(h, k) for h in AXES["heads"] for k in AXES["top_k"])
    return sorted(variants)
