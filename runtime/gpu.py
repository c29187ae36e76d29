"""Which GPU this is, in the one form tuned tables are named and found by: family and SM count.

torch reports the same chip under several names ("NVIDIA H100 80GB HBM3" is an H100 SXM, "NVIDIA
H100 PCIe" a PCIe card with fewer SMs) and different chips under similar ones, so tables are keyed
by a canonical family and the SM count the kernels actually see ("H200-132SM"), never by the raw
name. A GPU the list below does not know keeps its own name as the family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .arch import arch_for_capability

# (pattern on the name torch reports, family): the first match wins, so variants come before the
# plain model name.
FAMILIES = (
    (r"GH200", "GH200"),
    (r"H200.*NVL", "H200-NVL"),
    (r"H200", "H200"),
    (r"H100.*PCIe", "H100-PCIe"),
    (r"H100.*NVL", "H100-NVL"),
    (r"H100", "H100-SXM"),
    (r"H800.*PCIe", "H800-PCIe"),
    (r"H800", "H800"),
    (r"H20\b", "H20"),
)


@dataclass(frozen=True)
class GpuIdentity:
    family: str
    sms: int
    capability: tuple[int, int]
    name: str  # as torch reports it

    @property
    def key(self) -> str:
        """What tables are named and found by: 'H200-132SM'."""
        return f"{self.family}-{self.sms}SM"

    @property
    def arch(self) -> str | None:
        """The arch name our builds use on this GPU, or None (no fp8 tensor cores)."""
        arch = arch_for_capability(*self.capability)
        return arch.name if arch else None


def identify(name: str, capability: tuple[int, int], sms: int) -> GpuIdentity:
    for pattern, family in FAMILIES:
        if re.search(pattern, name):
            return GpuIdentity(family, sms, tuple(capability), name)
    own = re.sub(r"[^A-Za-z0-9]+", "-", re.sub(r"^NVIDIA\s+", "", name)).strip("-") or "GPU"
    return GpuIdentity(own, sms, tuple(capability), name)


@lru_cache(maxsize=None)
def device_identity(index: int) -> GpuIdentity:
    import torch

    props = torch.cuda.get_device_properties(index)
    return identify(props.name, (props.major, props.minor), props.multi_processor_count)
