"""Rendering a variant's CUDA source from the Jinja templates."""

from __future__ import annotations

from functools import lru_cache

import jinja2

from .data import data_dir

# The templates: templates/ of a checkout, runtime.templates of an installed wheel (runtime.data).
TEMPLATES = data_dir("templates")

# Each variant names its template (`variant.template`). The shared headers (templates/common/*.cuh)
# are pasted into it verbatim by include_raw() -- PTX operands such as {%0, %1} must not meet the
# Jinja parser -- and wgmma(n) renders the warpgroup product for an N, so a rendered source is one
# self-contained file: what is compiled is exactly what one reads on disk.


def include_raw(relative_path: str) -> str:
    text = TEMPLATES.joinpath(relative_path).read_text().replace("#pragma once\n", "")  # pasted once, by construction
    return f"// ---- begin {relative_path} ----\n{text}// ---- end {relative_path} ----\n"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: TEMPLATES.joinpath(name).read_text()),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.globals["include_raw"] = include_raw
    env.globals["wgmma"] = wgmma_source
    return env


def wgmma_source(n: int) -> str:
    """templates/common/wgmma.cuh.j2 rendered for an N: the warpgroup product and its epilogue's helpers."""
    return _environment().get_template("common/wgmma.cuh.j2").render(n=n)


def render(v) -> str:
    """The CUDA source of a variant (Variant or DenseVariant)."""
    return _environment().get_template(v.template).render(v=v)
