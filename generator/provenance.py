"""Where a measurement came from: the kernel code it timed, the GPU and the software it ran on.

A tuned entry is only as good as the code it timed: a table made for other kernels says so at run
time (runtime.dispatch), and optuna studies are keyed by the GPU identity and this digest, so that a
stored study never reuses timings of another GPU or of older kernels.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from functools import lru_cache
from importlib import resources
from pathlib import Path

# The modules whose content decides what a variant's library computes and how fast: the templates,
# the parameters they are rendered from, the rendering and the compiler flags.
KERNEL_MODULES = ("arch.py", "variant.py", "dense_variant.py", "render.py", "build.py")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """16 hex digits of sha256 over the templates and KERNEL_MODULES (file names and bytes)."""
    h = hashlib.sha256()
    package = resources.files("generator")
    templates = Path(str(package / "templates"))
    files = sorted(p for p in templates.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        h.update(str(path.relative_to(templates)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name in KERNEL_MODULES:
        h.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def gpu_record(index: int) -> dict:
    """The GPU a measurement ran on: torch's name, the identity tables are keyed by, its SMs, and
    (where nvidia-smi answers) the driver and the power limit, which decides its sustained clock."""
    import torch

    from runtime.gpu import device_identity

    identity = device_identity(index)
    record = {"gpu": identity.name, "identity": identity.key, "sms": identity.sms,
              "capability": ".".join(map(str, identity.capability))}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            # (by UUID: CUDA_VISIBLE_DEVICES renumbers torch's devices, nvidia-smi's stay)
            out = subprocess.run([smi, f"--id=GPU-{torch.cuda.get_device_properties(index).uuid}",
                                  "--query-gpu=driver_version,power.limit", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()
            driver, power = (x.strip() for x in out.split(","))
            record.update(driver=driver, power_limit_w=float(power))
        except (subprocess.SubprocessError, ValueError, AttributeError, OSError):
            pass
    return record


def software_record() -> dict:
    """torch, its CUDA, and nvcc where there is one."""
    import torch

    from .build import nvcc_version_or_none

    record = {"torch": torch.__version__, "cuda": torch.version.cuda}
    nvcc = nvcc_version_or_none()
    if nvcc:
        record["nvcc"] = nvcc
    return record
