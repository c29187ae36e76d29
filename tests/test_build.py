"""Rendering and compiling: every shipped variant renders and compiles with nvcc for its arch (no GPU
needed), the cache reuses unchanged builds and never exposes half-written files, and a built
library's own report agrees with the Python model of the variant."""

import difflib
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import requires_nvcc

from generator.resources import build_problems, kernel_resource_problem
from generator.shipped import shipped_dense_variants, shipped_variants
from generator.space import AXES
from runtime.arch import ARCHS
from runtime.build import ResourceReport, build, plan, resource_report
from runtime.defaults import default_variant, default_variants
from runtime.dense_variant import DenseVariant
from runtime.kernel_code import code_digest
from runtime.loader import DenseLibrary, KernelLibrary
from runtime.render import render
from runtime.variant import Variant

REPO = Path(__file__).resolve().parent.parent


def use_fake_nvcc(directory: Path, monkeypatch, slow_over: str | None = None, slow_seconds: int = 3) -> None:
    """NVCC set to a script that writes a stand-in file where nvcc would write a library (taking
    slow_seconds over a library whose name holds `slow_over`): for tests of the cache and its locks,
    not of the compiler. The toolchain's answers (nvcc's path and version) are cleared: the caller
    clears them again when it ends (fake_nvcc does)."""
    from runtime import toolchain

    fake = directory / "nvcc"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake nvcc V0.0"; exit 0; fi\n'
                    'out=""; while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
                    + (f'case "$out" in *{slow_over}*) sleep {slow_seconds};; esac\n' if slow_over else "")
                    + 'echo "not a library" > "$out"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("NVCC", str(fake))
    toolchain.nvcc_path.cache_clear()
    toolchain.nvcc_version.cache_clear()


@pytest.fixture
def fake_nvcc(tmp_cache, tmp_path, monkeypatch):
    from runtime import toolchain

    use_fake_nvcc(tmp_path, monkeypatch)
    yield
    toolchain.nvcc_path.cache_clear()
    toolchain.nvcc_version.cache_clear()



@pytest.mark.parametrize("mma, gated, instruction", [
    ("mmasync", False, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"),
    ("wgmma", False, "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"),
    ("wgmma", True, "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3")])
def test_rendered_source_is_self_contained_and_names_its_parameters(mma, gated, instruction):
    v = default_variant(32, 2048, mma=mma, gated=gated)
    src = render(v)
    assert v.name in src
    assert "#include \"common/" not in src  # shared headers pasted in
    assert instruction in src
    buffer = f"kCapacity = {v.buffer};" if gated else f"kBuffer = {v.buffer};"
    if mma == "wgmma":  # the CTA's shape on the pipeline's frame (common/pipeline.cuh)
        shape = (f"pipeline::Shape<{v.rows}, {v.heads}, {v.key_tile}, {v.warps}, {v.stages}",)
    else:
        shape = (f"kHeads = {v.heads};", f"kRows = {v.rows};", f"kKeyTile = {v.key_tile};", f"Warps = {v.warps};",
                 f"kStages = {v.stages};")
    for line in (*shape, f"kTopK = {v.top_k};", buffer):
        assert line in src
    if gated:  # the exact rescan kernel is compiled in with it
        assert f"kSampleTiles = {v.sample_tiles};" in src and v.rescan_variant.name in src
    assert "{{ v." not in src and "include_raw" not in src  # nothing left unrendered


def test_every_kernel_asserts_the_variant_spaces_figures():
    """Python decides which points fit by its own sums of shared memory and registers; every kernel
    renders them into a compile-time check against its own (pipeline::SpaceAgrees, or equality for
    the mma.sync kernel and the dense top-k kernels' shared structs), so a sum that drifts fails the
    build instead of admitting a point that cannot launch."""
    from generator.shipped import shipped_paged_variants

    for v in (default_variant(32, 2048, mma="wgmma", gated=True), default_variant(64, 512, mma="wgmma", gated=False)):
        assert f"pipeline::SpaceAgrees<Shape, Layout, {v.smem_bytes()}, {v.registers_available()}>" in render(v)
    mma_sync = default_variant(32, 2048, mma="mmasync")
    assert f"static_assert(kSmemBytes == {mma_sync.smem_bytes()}," in render(mma_sync)
    paged = shipped_paged_variants()[0]
    assert f"pipeline::SpaceAgrees<Shape, Layout, {paged.smem_bytes()}, {paged.math_registers}>" in render(paged)
    dense = shipped_dense_variants()[0]
    for d in (dense, replace(dense, page_block_size=64)):  # (the paged build adds the cluster top-k)
        src = render(d)
        assert f"pipeline::SpaceAgrees<Shape, Layout, {d.logits_smem_bytes()}, {d.math_registers}>" in src
        assert f"static_assert(sizeof(TopKShared) == {d.topk_smem_bytes()}," in src
        if d.page_block_size:
            assert f"static_assert(sizeof(ClusterTopKShared) == {d.cluster_gate_smem_bytes()}," in src
            assert f"static_assert(sizeof(ResidentShared) == {d.cluster_resident_smem_bytes()}," in src


def test_every_shipped_variant_renders():
    from generator.shipped import shipped_paged_prefill_variants, shipped_paged_variants

    paged = shipped_paged_variants()
    assert len(paged) == 24 and all(v.invalid_reason() is None for v in paged)
    for v in shipped_variants() + paged:
        assert v.name in render(v)
    prefill = shipped_paged_prefill_variants()
    assert {p.page_block_size for p in prefill} == {64} and len(prefill) == len(shipped_dense_variants()) + sum(
        v.mma == "wgmma" for v in shipped_variants())
    for p in prefill:  # (the gathered twin's code, with the paged producer and launch)
        source = render(p)
        assert p.name in source and "paged::load_key_tile<64, kKeyTile>" in source
        assert "mqa_topk_launch_paged(" in source or "mqa_dense_run_paged(" in source


def kind_of(variant) -> tuple:
    """What sets a library's code paths and register budget, short of its tile sizes: its kernel kind
    (the fused kernel's instruction, gate, selector warps and sample tiles; the dense top-k's CTA and
    the kernels it holds), and its heads."""
    if isinstance(variant, DenseVariant):
        return ("dense", variant.heads, variant.topk_threads, variant.kernels)
    return (variant.mma, variant.gated, variant.select_warps, variant.sample_tiles, variant.heads)


def one_of_each_kind(variants: list) -> list:
    kinds = {}
    for v in variants:
        kinds.setdefault(kind_of(v), v)
    return list(kinds.values())


@requires_nvcc
def test_a_shipped_variant_of_each_kind_compiles_within_its_resources(tmp_cache, capsys):
    """A shipped variant of every kind and head count (the first by name of each) compiles, within the
    resource rules `build` applies (generator/resources.py), and its library's report agrees with the
    Python model. `python -m generator build --shipped` applies the same rules to every shipped
    variant (minutes on a many-core machine, too long for this suite on two cores)."""
    fused, dense = one_of_each_kind(shipped_variants()), one_of_each_kind(shipped_dense_variants())
    assert len(fused) >= 20 and len(dense) >= 8
    with capsys.disabled():  # a line a library as they compile (minutes on two cores), not a silent wait
        print(f"\ncompiling {len(fused + dense)} shipped libraries, one of each kind:", file=sys.stderr, flush=True)
        plans = build(fused + dense, progress=True)
    assert [p.variant for p in plans] == fused + dense
    for p in plans:
        assert p.library.is_file() and p.source.is_file()
        assert build_problems(p) == []
        # The extern "C" side of the library answers without a GPU and agrees with the Python model.
        if p.variant in dense:
            lib = DenseLibrary(p.variant, str(p.library))
            assert (lib.logits_smem_bytes, lib.topk_smem_bytes) == (p.variant.logits_smem_bytes(), p.variant.topk_smem_bytes())
            assert lib.short_row_keys == p.variant.short_row_keys
            continue
        lib = KernelLibrary(p.variant, str(p.library))
        assert lib.smem_bytes == p.variant.smem_bytes()
        assert lib.threads == p.variant.threads
        assert lib.rows_per_block == p.variant.rows
        check_tail_split(p.variant, lib)
    assert not [f for f in tmp_cache.rglob("*") if ".tmp." in f.name], "temporary files left behind"


@requires_nvcc
def test_the_fp16_gate_compiles_within_its_resources(tmp_cache):
    """The fp16 gate's build (not in a shipped table yet: BENCHMARKS.md, "Past the epilogue: the fp16 gate
    built") compiles within the resource rules, and its library agrees with the Python model."""
    v = Variant.from_name("mqa_topk_wgmma_sm90a_h64_k2048_r2_t256_w8_s3_b16384_m32_sw7_g16")
    (p,) = build([v])
    assert build_problems(p) == []
    lib = KernelLibrary(v, str(p.library))
    assert (lib.smem_bytes, lib.threads, lib.rows_per_block) == (v.smem_bytes(), v.threads, v.rows)
    check_tail_split(v, lib)


def test_the_resource_rules_reject_spills_where_a_kernel_must_have_none():
    """The rules the build test and `build` apply can fail: a scan kernel with a stack frame, a
    selector warp spilling past its bound, a report without registers; the portable kernels are not
    held to them."""
    gated = next(v for v in shipped_variants() if v.select_warps == 3)
    clean, spilled = ResourceReport(168, 0, 0, 0), ResourceReport(168, 16, 16, 16)
    assert kernel_resource_problem(gated, "fused_mqa_topk_kernel", clean) is None
    assert "must have none" in kernel_resource_problem(gated, "fused_mqa_topk_kernel", spilled)
    assert kernel_resource_problem(gated, "fused_mqa_topk_gate_kernel", ResourceReport(56, 80, 80, 80)) is None
    assert "at most 80" in kernel_resource_problem(gated, "fused_mqa_topk_gate_kernel", ResourceReport(56, 96, 96, 96))
    assert "registers" in kernel_resource_problem(gated, "fused_mqa_topk_kernel", ResourceReport(0, 0, 0, 0))
    sampling = next(v for v in shipped_variants() if v.gated and not v.select_warps and v.sample_tiles)
    assert kernel_resource_problem(sampling, "fused_mqa_topk_gate_kernel", ResourceReport(168, 48, 48, 48)) is None
    assert "at most 48" in kernel_resource_problem(sampling, "fused_mqa_topk_gate_kernel", ResourceReport(168, 64, 64, 64))
    assert "must have none" in kernel_resource_problem(sampling, "fused_mqa_topk_kernel", spilled)
    portable = next(v for v in shipped_variants() if v.mma == "mmasync")
    assert kernel_resource_problem(portable, "fused_mqa_topk_kernel", spilled) is None


def check_tail_split(variant, lib) -> None:
    """The gated kernels with selector warps split the blocks past the last full round of CTAs into up
    to 8 parts of their keys, as many as the SMs allow (the split lists hold that many slabs); every
    other kernel, and a tail too wide for two parts a block, is not split."""
    splits = variant.gated and variant.select_warps > 0
    cases = {(4096, 132): (4, 8), (8192, 132): (8, 8), (4092, 132): (0, 1), (16, 132): (16, 8), (1, 132): (1, 8),
             (64, 132): (64, 2), (160, 132): (28, 4), (1024, 132): (0, 1), (256, 132): (0, 1), (4096, 148): (0, 1),
             (4000, 148): (4, 8)}
    for (blocks, sms), expected in cases.items():
        assert lib.tail_split(blocks, sms) == (expected if splits else (0, 1)), (variant.name, blocks, sms)


def test_cache_reuses_unchanged_builds_and_rebuilds_on_change(fake_nvcc, monkeypatch):
    """About the cache, not the compiler: a fake nvcc stands in (fake_nvcc)."""
    v = default_variant(64, 512)
    (first,) = build([v])
    mtime = first.library.stat().st_mtime_ns
    (again,) = build([v])
    assert again.library == first.library and again.library.stat().st_mtime_ns == mtime  # reused
    # A changed flag is a different digest: a new library, the old one untouched.
    import runtime.build as b
    monkeypatch.setattr(b, "BASE_NVCC_FLAGS", b.BASE_NVCC_FLAGS + ("-DFUSED_MQA_TOPK_TEST_FLAG=1",))
    assert plan(v).library != first.library
    (rebuilt,) = build([v])
    assert rebuilt.library != first.library and rebuilt.library.is_file()
    assert first.library.stat().st_mtime_ns == mtime


def test_a_build_for_new_kernel_code_that_renders_the_same_source_serves_it_by_manifest(fake_nvcc, monkeypatch):
    """A change that moves the kernel-code digest but not a variant's source (another template, a
    comment) reuses its library, and records it under the new code, so that find_library (a serving
    process that may not compile) finds it. Fails where the record keeps the old code."""
    import runtime.build as b
    import runtime.library_cache as lc

    v = default_variant(64, 512)
    (first,) = build([v])
    mtime = first.library.stat().st_mtime_ns
    assert lc.find_library(v) == first.library
    for module in (b, lc):
        monkeypatch.setattr(module, "code_digest_of", lambda variant: "0123456789abcdef")
    assert lc.find_library(v) is None  # (the manifest records the library for the old code)
    (again,) = build([v])
    assert again.library == first.library and again.library.stat().st_mtime_ns == mtime  # not compiled again
    assert lc.find_library(v) == first.library


@requires_nvcc
def test_build_error_names_the_variant(tmp_cache, monkeypatch):
    import runtime.build as b
    monkeypatch.setattr(b, "BASE_NVCC_FLAGS", b.BASE_NVCC_FLAGS + ("-DTHIS_FLAG_BREAKS=1", "--no-such-nvcc-option"))
    v = default_variant(32, 512)
    with pytest.raises(b.BuildError, match=v.name):
        build([v])
    assert not list(tmp_cache.rglob("*.so")), "a failed build must not publish a library"


def test_a_build_cut_short_keeps_the_libraries_it_finished(tmp_path, monkeypatch):
    """A build killed part way (a timeout, Ctrl-C) keeps in the manifest the libraries ninja finished,
    so the next build compiles only the rest (before, the manifest was written after ninja ended, and
    the next build compiled every library again). A fake nvcc: instant, 60 s over `slow`."""
    import signal
    import time

    from runtime import library_cache, toolchain
    from runtime.defaults import default_variant

    fast = [default_variant(32, 512, "sm90a"), default_variant(64, 512, "sm90a")]
    slow = default_variant(64, 2048, "sm90a")
    use_fake_nvcc(tmp_path, monkeypatch, slow_over=slow.name, slow_seconds=60)
    cache = tmp_path / "cache"
    monkeypatch.setenv(library_cache.CACHE_ENV, str(cache))
    script = ("import runtime.build as b; from runtime.build import spec_from_name as s; "
              f"b.build([s(n) for n in {[v.name for v in (*fast, slow)]!r}], jobs=3, progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not all((cache / v.name).is_dir() and list((cache / v.name).glob("*.so"))
                                                      for v in fast):
            time.sleep(0.2)
        time.sleep(1)
        assert proc.poll() is None, "the build ended before it could be cut short"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    try:
        records = {r["variant"] for r in library_cache.read_manifest(cache).values()}
        assert records == {v.name for v in fast}
    finally:
        toolchain.nvcc_path.cache_clear()
        toolchain.nvcc_version.cache_clear()


def test_a_library_reported_before_it_is_written_is_recorded_once_it_is():
    """Whether a ninja reports an edge as it ends (1.13 does, piped) or as it starts, the build records
    each library that exists, and none that does not: a report before the file is there leaves it to
    the end of the build."""
    import tempfile

    from runtime.build import _Recorder, plan
    from runtime.defaults import default_variant
    from runtime.library_cache import read_manifest

    root = Path(tempfile.mkdtemp())
    p = plan(default_variant(32, 512, "sm90a"), root)
    recorder = _Recorder(root, [p], "fake nvcc")
    recorder.finished(str(p.library))  # (reported as it starts: nothing there yet)
    assert read_manifest(root) == {}
    p.library.parent.mkdir(parents=True, exist_ok=True)
    p.library.write_bytes(b"a library")
    recorder.rest()
    assert [r["variant"] for r in read_manifest(root).values()] == [p.variant.name]


def test_cli_list_and_render(tmp_cache):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "generator", "list", "--heads", "64", "--top-k", "512", "--invalid"],
                         capture_output=True, text=True, check=True, env=env).stdout
    assert "REJECTED" in out and "mqa_topk_mmasync_sm90a_h64_k512" in out
    name = default_variant(64, 512).name
    path = subprocess.run([sys.executable, "-m", "generator", "render", name], capture_output=True, text=True,
                          check=True, env=env).stdout.strip()
    assert path.endswith(f"{name}.cu") and name in open(path).read()


def test_ablations_still_patch_the_templates():
    """tools/ablate.py places a kernel's time by textual patches of the rendered source; each must
    still match (a stale one would time the baseline twice under another name)."""
    from runtime.dense_variant import default_dense_variant
    from tools import ablate as tool

    for variant in (default_dense_variant(32, 2048), default_variant(32, 2048, gated=True)):
        sources = tool.sources(variant)
        assert set(sources) == {"baseline", *tool.ablations(variant)}
        assert len(set(sources.values())) == len(sources)  # every patch changed the source
    # A gated ablation must patch the gated kernel (or the shared headers it calls, as no_relu does),
    # not the rescan kernel compiled beside it (one did, unnoticed, after the code it matched moved:
    # experiment log, "2026-11-29: cheaper epilogue"). Those that accumulate in fp16 retype the shared
    # products and head sums, so the rescan kernel's accumulator declaration changes with them: that
    # line alone.
    sources = tool.sources(default_variant(32, 2048, gated=True))
    base = sources["baseline"].splitlines()
    rescan_start, gate_start = base.index("namespace rescan {"), base.index("namespace gate {")
    for name, text in sources.items():
        blocks = difflib.SequenceMatcher(None, base, text.splitlines(), autojunk=False).get_opcodes()
        changed = [i for tag, i1, i2, _, _ in blocks if tag != "equal" for i in range(i1, max(i2, i1 + 1))]
        in_rescan = [base[i].strip() for i in changed if rescan_start < i < gate_start]
        allowed = ["float acc[kN / 2];"] if name in tool.RETYPE_ACCUMULATORS else []
        assert changed and all(line in allowed for line in in_rescan) or name == "baseline", \
            f"ablation {name} patches the rescan kernel: {in_rescan}"
    assert tool.RETYPE_ACCUMULATORS and tool.RETYPE_ACCUMULATORS <= set(tool.GATED_ABLATIONS)


def _sass_tool():
    from tools import sass

    return sass


@requires_nvcc
def test_the_tensor_core_probes_compile():
    """tools/accumulation.py and tools/rescore.py compile their probes (tools/mma_probe.cu,
    tools/wgmma_probe.cu, tools/rescore_probe.cu, tools/rescore_wide_probe.cu, tools/rescore_union_probe.cu) on the GPU
    machine, where a compile error costs device time: they compile here, and export what the tools call."""
    from tools import accumulation, rescore

    mma, wgmma = accumulation.probe_library(), accumulation.wgmma_library()
    assert mma.mma_probe and mma.mma_probe_f16 and wgmma.wgmma_probe_f16 and wgmma.wgmma_rate
    for heads in (32, 64):  # (tools/rescore.py's probe, over wgmma.cuh.j2 rendered for N = heads; the union
        assert rescore.rescore_library(heads).rescore  # probe's for N = 128, a block of 128 / heads rows)
        assert rescore.union_library(heads).rescore_union_rows() == 128 // heads
    assert rescore.wide_library().rescore_wide


def test_sass_tool_finds_the_innermost_product_loops():
    """tools/sass.py counts a hot loop's instructions from nvdisasm's output (no GPU, and no nvdisasm
    needed for this check: a hand-written listing in its format)."""
    tool = _sass_tool()
    listing = """
        .text._ZN12_GLOBAL__N_14gate26fused_mqa_topk_gate_kernelE14CUtensorMap_st:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   FMNMX R2, R3, RZ, !PT ;
.L_x_2:
        /*0020*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24 ;
        /*0030*/                   FFMA R4, R2, R5, R4 ;
        /*0040*/              @!P0 BRA `(.L_x_2) ;
        /*0050*/                   IADD3 R6, R6, 0x1, RZ ;
        /*0060*/               @P1 BRA `(.L_x_1) ;
.L_x_3:
        /*0070*/                   FADD R7, R7, R8 ;
        /*0080*/                   BRA `(.L_x_3) ;
"""
    loops = tool.product_loops(listing)
    assert loops == [("gate::fused_mqa_topk_gate_kernel", [("QGMMA.64x128x32.F32.E4M3.E4M3",
                                                            "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24"),
                                                           ("FFMA", "FFMA R4, R2, R5, R4"),
                                                           ("BRA", "@!P0 BRA `(.L_x_2)")])]


def test_sass_tool_takes_a_tiles_hot_path_from_its_wait_to_its_first_barrier():
    """tools/sass.py --hot: from the last mbarrier wait before a loop's first product to the first
    barrier after its last one; none where the loop has no such barrier."""
    tool = _sass_tool()
    ops = ["SYNCS.PHASECHK.TRANS64.TRYWAIT", "IADD3", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "QGMMA.64x64x32.F32.E4M3.E4M3",
           "FMNMX", "VOTE.ANY", "ATOMS.ADD", "QGMMA.64x64x32.F32.E4M3.E4M3", "SHFL.IDX", "BAR.SYNC.DEFER_BLOCKING",
           "ATOMS.ADD", "BAR.SYNC.DEFER_BLOCKING", "BRA"]
    loop = [(op, op + " R0") for op in ops]
    assert [op for op, _ in tool.hot_path(loop)] == ops[2:9]
    assert tool.hot_path(loop[:9]) is None  # (no barrier after the products)


@requires_nvcc
@pytest.mark.parametrize("arch", ["sm89", "sm100a"])
def test_the_portable_kernels_build_for_ada_and_blackwell(arch, tmp_cache):
    """Beyond Hopper the mma.sync kernels serve (Ada: sm_89; Blackwell: sm_100a runs the same
    instruction): every heads and top-k default builds, spill-free, for the arch's own target."""
    variants = [v for h in AXES["heads"] for k in AXES["top_k"] for v in default_variants(h, k, arch)]
    assert variants and all(v.mma == "mmasync" and v.arch == arch for v in variants)
    for p in build(variants):
        report = resource_report(p, "fused_mqa_topk_kernel")
        assert report.clean and 0 < report.registers <= 255, (p.variant.name, report)
        assert ARCHS[arch].gencode in p.flags


@requires_nvcc
def test_a_cache_built_with_nvcc_serves_a_machine_without_it(tmp_path, monkeypatch):
    """`build --shipped` leaves a self-describing cache (manifest.json); without nvcc a library the
    manifest vouches for is loaded from the cache or from FUSED_MQA_TOPK_PREBUILT, a missing one is a
    BuildError that says what to do, and one whose bytes are not those recorded is not trusted. Where
    nvcc is, a library another nvcc built is rebuilt."""
    import json

    from runtime import library_cache, toolchain

    v = default_variant(32, 512, mma="mmasync")
    made = tmp_path / "made"
    (built,) = build([v], root=made)
    entry = json.loads((made / library_cache.MANIFEST).read_text())["libraries"][built.library.name]
    assert entry["variant"] == v.name and entry["arch"] == v.arch and entry["nvcc"] == toolchain.nvcc_version()
    assert entry["flags"] == list(built.flags) and len(entry["source_sha256"]) == 64
    assert entry["code"] == code_digest() and entry["library_sha256"] == library_cache.file_sha256(built.library)

    def no_nvcc():
        raise toolchain.BuildError("nvcc not found")

    monkeypatch.setattr(toolchain, "nvcc_version", no_nvcc)
    monkeypatch.setattr(toolchain, "nvcc_path", no_nvcc)
    assert build([v], root=made)[0].library == built.library  # in the cache itself
    monkeypatch.setenv(library_cache.PREBUILT_ENV, str(made))
    (found,) = build([v], root=tmp_path / "empty")  # a read-only prebuilt directory
    assert found.library == built.library and KernelLibrary(v, str(found.library)).threads == v.threads
    monkeypatch.setenv(library_cache.CACHE_ENV, str(tmp_path / "empty"))
    assert library_cache.find_library(v) == built.library  # by the manifest alone
    monkeypatch.delenv(library_cache.PREBUILT_ENV)
    with pytest.raises(toolchain.BuildError, match="holds no library for .*build --shipped"):
        build([v], root=tmp_path / "empty")
    # A library whose bytes changed after the manifest recorded them is served by neither path.
    copy = tmp_path / "copy"
    shutil.copytree(made, copy)
    (copy / v.name / built.library.name).write_bytes(built.library.read_bytes() + b"\0")
    monkeypatch.setenv(library_cache.PREBUILT_ENV, str(copy))
    assert library_cache.find_library(v) is None
    with pytest.raises(toolchain.BuildError, match="holds no library"):
        build([v], root=tmp_path / "empty")
    monkeypatch.undo()
    manifest = json.loads((made / library_cache.MANIFEST).read_text())
    manifest["libraries"][built.library.name]["nvcc"] = "Cuda compilation tools, release 1.0"
    (made / library_cache.MANIFEST).write_text(json.dumps(manifest))
    mtime = built.library.stat().st_mtime_ns
    (again,) = build([v], root=made)
    assert again.library == built.library and again.library.stat().st_mtime_ns != mtime  # rebuilt by this nvcc


@requires_nvcc
def test_a_server_loads_a_built_library_without_the_renderer(tmp_cache, monkeypatch):
    """The loader finds a library by the manifest: with the renderer and the compiler made to fail,
    a built variant still loads (and only an unbuilt one is unavailable, naming the cause)."""
    import sys

    from runtime import loader

    v = default_variant(64, 512, mma="mmasync")
    build([v])
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setitem(sys.modules, "runtime.render", None)  # importing it now raises ImportError
    monkeypatch.setitem(sys.modules, "runtime.build", None)
    assert loader.load(v).threads == v.threads
    with pytest.raises(loader.KernelUnavailable, match="runtime.build"):
        loader.load(default_variant(32, 1024, mma="mmasync"))


def test_builds_of_different_variants_in_one_cache_do_not_wait_for_each_other(tmp_path, monkeypatch):
    """Each variant's build holds that variant's lock (and the manifest's only to record it): a
    process compiling one variant does not hold up another compiling a different one, and both end
    up in the manifest. A fake nvcc stands in (this is about the locks, not the compiler): it takes
    3 s over `one`, no time over `other`."""
    import threading
    import time

    from runtime import build as b
    from runtime import library_cache, toolchain
    from runtime.defaults import default_variant

    one, other = default_variant(32, 512, "sm90a"), default_variant(64, 512, "sm90a")
    use_fake_nvcc(tmp_path, monkeypatch, slow_over=one.name)
    monkeypatch.setenv(library_cache.CACHE_ENV, str(tmp_path / "cache"))
    try:
        errors = []

        def build_one():
            try:
                b.build([one], progress=False)
            except Exception as e:  # noqa: BLE001 -- reported below, in the test's thread
                errors.append(e)

        slow = threading.Thread(target=build_one)
        slow.start()
        time.sleep(0.5)  # `one` is compiling
        start = time.monotonic()
        b.build([other], progress=False)
        assert time.monotonic() - start < 2.0 and slow.is_alive(), "the build of `other` waited for `one`'s"
        slow.join(timeout=30)
        assert not errors, errors
        records = {r["variant"] for r in library_cache.read_manifest(tmp_path / "cache").values()}
        assert records == {one.name, other.name}
        assert not list((tmp_path / "cache").glob(".ninja.*"))  # each build's ninja log went with it
    finally:
        toolchain.nvcc_path.cache_clear()
        toolchain.nvcc_version.cache_clear()


def test_sass_comparison_ignores_only_the_names_that_hash_the_source():
    """tools/compare_sass.py (and restamp_table.py --sass through it) compares instructions with the names
    that hash a whole source file left out: the anonymous namespace's and the internal-linkage names of
    called functions, which change when anything else in the file does. Other names still count."""
    from tools.compare_sass import ANONYMOUS

    call = "CALL.REL.NOINC `($_ZN94_INTERNAL_{}_63_mqa_dense_cu_3ca144939663_resident_top_kEPKfiiiPi)"
    assert ANONYMOUS.sub("", call.format("208f0939")) == ANONYMOUS.sub("", call.format("ff2ed003"))
    label = ".text._ZN12_GLOBAL__N__{}_4gate26fused_mqa_topk_gate_kernelE"
    assert ANONYMOUS.sub("", label.format("1a2b3c4d")) == ANONYMOUS.sub("", label.format("99aa77ee"))
    assert ANONYMOUS.sub("", call.format("208f0939")) != ANONYMOUS.sub("", call.format("208f0939").replace("resident", "streamed"))
