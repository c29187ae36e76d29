"""What a compiled library's resources must be (ptxas's report of each kernel, read from its build
log): the rules `build` applies to every library it reports on and the build tests apply to theirs.

A Hopper kernel that spills or keeps a stack frame, or whose wgmma products ptxas serialises, runs
slower by a multiple without any other sign; the exceptions below are measured, bounded, and sit
outside the scan's loops (tools/sass.py shows where)."""

from __future__ import annotations

from runtime.build import BuildPlan, ResourceReport, resource_report

# ptxas serialises every wgmma of a kernel (and says so, C7514) when it cannot prove that no other
# instruction touches the accumulators of products in flight: a silent 2x.
WGMMA_SERIALISED = "C7514"


def kernel_resource_problem(variant, kernel: str, report: ResourceReport) -> str | None:
    """Why this kernel's registers or spills are out of bounds for its variant, or None."""
    if not 0 < report.registers <= 255:
        return f"{report.registers} registers"
    limit = None  # bytes of spill stores allowed; None: none, and no stack frame
    if getattr(variant, "select_warps", 0) and kernel == "fused_mqa_topk_gate_kernel":
        # Selector warps run at 56 registers beside the scan: a few per-block scalars spill (44-76
        # bytes; a load at the top of two of their passes' loops), off the critical path; the math
        # warps' scan, at 152-224, must not. With a selector warpgroup more the math warpgroups have
        # 200 registers, and at H = 64 the selector warps' passes spill up to 116 bytes, the scan and
        # sample loops none.
        limit = 120 if variant.select_warps > 3 else 80
        if getattr(variant, "gate_bits", 32) == 16:
            # The fp16 gate's build (its union list's counts and pointers beside them): 124 bytes at H = 64
            # with seven selector warps, and none in its scan, rescoring or sample loops (tools/sass.py).
            limit += 8
    elif getattr(variant, "sample_tiles", 0) and kernel == "fused_mqa_topk_gate_kernel":
        # The gated kernel with the math warps selecting: at H = 64 ptxas keeps up to twelve
        # per-block values on the stack (40-48 bytes at two row tiles, 168 registers, every top-k):
        # stored and loaded in the loop over a CTA's blocks (about 16,000 instructions), none in the
        # scan loops (404 instructions a 64-key slice; tools/sass.py, six such variants of the H100's
        # table read on 2026-12-06).
        limit = 48
    elif kernel.startswith("dense_short_topk_kernel"):
        # The short-row top-k holds a row in 32 registers a thread at 64: up to three 4-byte per-row
        # values on the stack, stored once a row, loaded outside the loops over the row's keys.
        limit = 12
    elif getattr(variant, "mma", "wgmma") != "wgmma":
        return None  # (the portable kernels are not held to it)
    if limit is None:
        return None if report.clean else f"stack or spills in a kernel that must have none: {report}"
    return None if report.spill_store_bytes <= limit else f"{report.spill_store_bytes} bytes of spill stores (at most {limit}): {report}"


def build_problems(p: BuildPlan) -> list[str]:
    """Every rule a built library breaks, named by variant and kernel (empty: none)."""
    problems = [f"{p.variant.name} {kernel}: {why}" for kernel in p.variant.kernels
                if (why := kernel_resource_problem(p.variant, kernel, resource_report(p, kernel)))]
    if WGMMA_SERIALISED in p.log.read_text():
        problems.append(f"{p.variant.name}: ptxas serialised its wgmma products ({WGMMA_SERIALISED})")
    return problems
