"""Smoke test of an installed wheel (run from outside the checkout, in a venv holding only the wheel
and its dependencies): the templates render, one variant builds where nvcc is, a call runs on the
CPU, the shipped table is found, and README.md's quick start runs as written. Exits non-zero on the first failure."""

import os
import shutil
import sys
import tempfile

import torch

import generator
import runtime
from generator.verify import verify_topk
from generator.workloads import make_workload
from runtime import kernel_code
from runtime.build import build
from runtime.toolchain import nvcc_path
from runtime.defaults import default_variant
from runtime.gpu import identify
from runtime.render import render
from runtime.table import load_table, table_for

checkout = os.environ["CHECKOUT"]  # the source tree the wheel was built from: nothing may come from it
for module in (generator, runtime):
    assert not module.__file__.startswith(checkout), f"{module.__name__} imported from the checkout: {module.__file__}"

# Every template and kernel module shipped: the wheel's code digests are the checkout's (a file left out
# of package-data would change them, and the shipped tables would then read as timed for other code).
templates_dir = os.path.join(checkout, "templates")
shipped = {os.path.relpath(os.path.join(d, f), templates_dir).replace(os.sep, "/"): open(os.path.join(d, f), "rb").read()
           for d, _, files in os.walk(templates_dir) if "__pycache__" not in d for f in files}
want = kernel_code.digests_of(shipped, lambda name: open(os.path.join(checkout, "runtime", name), "rb").read())
got = (kernel_code.code_digest(), kernel_code.paged_code_digest())
assert got == want, f"the wheel's (prefill, paged) code digests {got} are not the checkout's {want} (a template not shipped?)"
print("code digests: ok")

variant = default_variant(32, 512, mma="mmasync")
source = render(variant)
assert variant.name in source and "mma.sync" in source, "rendered source lacks the variant"
print("render: ok", len(source), "characters")

choice = table_for(identify("NVIDIA H200", (9, 0), 132))  # as torch names the card
entries = load_table(choice.path)
assert entries and not str(choice.path).startswith(checkout), f"the shipped H200 table is not the package's: {choice}"
print("table: ok", len(entries), "entries")

wl = make_workload("random", 8, 3000, 32, 512, seed=1)
assert verify_topk(runtime.fused_mqa_topk(*wl.args()), *wl.args()).ok
print("CPU call: ok")
assert runtime.__version__ != "0+checkout", runtime.__version__
print("version: ok", runtime.__version__)

# README.md's quick start, verbatim, as a user pastes it (the document read from the checkout, the code
# it runs from the wheel):
readme = open(os.path.join(checkout, "README.md")).read()
start = readme.index("```python", readme.index("## Quick start")) + len("```python\n")
exec(compile(readme[start:readme.index("```", start)], "README.md (quick start)", "exec"), {})
print("README quick start: ok")

if os.environ.get("FUSED_MQA_TOPK_PREBUILT"):  # a machine without nvcc, serving from a prebuilt cache
    (plan,) = build([variant])
    assert str(plan.library).startswith(os.environ["FUSED_MQA_TOPK_PREBUILT"]), plan.library
    print("prebuilt: ok", plan.library)
elif shutil.which("nvcc") or os.environ.get("NVCC"):
    nvcc_path()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["FUSED_MQA_TOPK_CACHE"] = cache
        (plan,) = build([variant])
        assert plan.library.is_file()
    print("build: ok", variant.name)
else:
    print("build: skipped (no nvcc on this machine)")
print("torch", torch.__version__, "python", sys.version.split()[0])
