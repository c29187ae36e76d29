"""Where a measurement came from: the kernel code it timed (runtime.kernel_code), the GPU and the
software it ran on."""

from __future__ import annotations

import shutil
import subprocess

from runtime.kernel_code import code_digest

__all__ = ["code_digest", "gpu_record", "software_record"]


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

    from runtime.toolchain import nvcc_version_or_none

    record = {"torch": torch.__version__, "cuda": torch.version.cuda}
    nvcc = nvcc_version_or_none()
    if nvcc:
        record["nvcc"] = nvcc
    return record
