"""Where a kernel cannot be had (no nvcc, a failed build, an unwritable cache), automatic dispatch
degrades to the dense path with one warning; a forced variant raises an error naming the variant and
the cause. Runs on a CPU: the fused choice is forced by patching dispatch."""

import warnings

import pytest
import torch

import runtime
import runtime.fused
from generator.verify import verify_topk
from generator.workloads import make_workload
from runtime import library_cache, loader, toolchain
from runtime.defaults import default_variant


@pytest.fixture
def no_nvcc(monkeypatch, tmp_cache):
    def missing():
        raise toolchain.BuildError("nvcc not found: install the CUDA toolkit (12.8 or newer) or set NVCC / CUDA_HOME")

    monkeypatch.setattr(toolchain, "nvcc_path", missing)
    monkeypatch.setattr(toolchain, "nvcc_version", missing)
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setattr(loader, "_warned", set())


@pytest.fixture
def unwritable_cache(monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(library_cache.CACHE_ENV, str(blocker / "cache"))  # mkdir fails even as root
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setattr(loader, "_warned", set())


@pytest.mark.parametrize("cause", ["no_nvcc", "unwritable_cache"])
def test_a_forced_variant_names_the_variant_and_the_cause(cause, request):
    request.getfixturevalue(cause)
    variant = default_variant(32, 512)
    with pytest.raises(loader.KernelUnavailable, match=f"{variant.name} is unavailable: .*(nvcc not found|Error)"):
        loader.load(variant)


@pytest.mark.parametrize("cause", ["no_nvcc", "unwritable_cache"])
def test_auto_dispatch_degrades_to_dense_with_one_warning(cause, request, monkeypatch):
    request.getfixturevalue(cause)
    variant = default_variant(32, 512)
    monkeypatch.setattr(runtime.fused, "choose_variant", lambda problem: variant)  # as a table would
    wl = make_workload("random", 16, 3000, 32, 512, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = runtime.fused_mqa_topk(*wl.args())
        second = runtime.fused_mqa_topk(*wl.args())
    ours = [w for w in caught if variant.name in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "the dense path serves instead" in str(ours[0].message)
    assert verify_topk(first, *wl.args()).ok and torch.equal(first, second)


def test_load_or_warn_returns_none_once_warned(no_nvcc):
    variant = default_variant(64, 2048)
    with pytest.warns(RuntimeWarning, match="unavailable"):
        assert loader.load_or_warn(variant, "x") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loader.load_or_warn(variant, "x") is None  # no second warning


def test_a_process_that_forbids_compiling_never_compiles(monkeypatch, tmp_cache):
    """FUSED_MQA_TOPK_NO_COMPILE=1: a variant with no prebuilt library is unavailable (naming the
    switch), the renderer and the build module are never imported, and automatic dispatch takes the
    dense path with one warning."""
    import sys

    monkeypatch.setenv(loader.NO_COMPILE_ENV, "1")
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setattr(loader, "_warned", set())
    monkeypatch.delitem(sys.modules, "runtime.build", raising=False)
    monkeypatch.delitem(sys.modules, "runtime.render", raising=False)
    variant = default_variant(32, 512, "sm90a")
    with pytest.raises(loader.KernelUnavailable, match=loader.NO_COMPILE_ENV):
        loader.load(variant)
    assert "runtime.build" not in sys.modules and "runtime.render" not in sys.modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert loader.load_or_warn(variant, "the dense path") is None
        assert loader.load_or_warn(variant, "the dense path") is None
    assert len(caught) == 1 and loader.NO_COMPILE_ENV in str(caught[0].message)
