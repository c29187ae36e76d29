"""Loading a compiled variant (building it on first use) and calling its extern "C" launcher."""

from __future__ import annotations

import ctypes
import threading

from generator.build import build
from generator.variant import Variant


class KernelLibrary:
    """One variant's shared library; see the `extern "C"` block of the kernel template."""

    def __init__(self, variant: Variant, path: str):
        self.variant = variant
        self.path = path
        lib = ctypes.CDLL(path)
        lib.mqa_topk_launch.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.mqa_topk_launch.restype = ctypes.c_int
        lib.mqa_topk_error_string.argtypes = [ctypes.c_int]
        lib.mqa_topk_error_string.restype = ctypes.c_char_p
        lib.mqa_topk_variant_name.restype = ctypes.c_char_p
        for fn in ("mqa_topk_smem_bytes", "mqa_topk_threads", "mqa_topk_rows_per_block"):
            getattr(lib, fn).restype = ctypes.c_int
        self._lib = lib
        built_name = lib.mqa_topk_variant_name().decode()
        if built_name != variant.name:
            raise RuntimeError(f"{path} holds {built_name}, expected {variant.name}")

    def launch(self, q, k, k_scale, weights, ks, ke, out, block_order, block_counter, rows: int, keys: int,
               stream: int) -> None:
        err = self._lib.mqa_topk_launch(q, k, k_scale, weights, ks, ke, out, block_order, block_counter, rows, keys,
                                        stream)
        if err != 0:
            raise RuntimeError(f"{self.variant.name}: launch failed: {self._lib.mqa_topk_error_string(err).decode()}")

    @property
    def smem_bytes(self) -> int:
        return self._lib.mqa_topk_smem_bytes()

    @property
    def threads(self) -> int:
        return self._lib.mqa_topk_threads()

    @property
    def rows_per_block(self) -> int:
        return self._lib.mqa_topk_rows_per_block()


_loaded: dict[str, KernelLibrary] = {}
_lock = threading.Lock()


def load(variant: Variant) -> KernelLibrary:
    """The variant's library, compiled into the cache first if needed (one build per process)."""
    lib = _loaded.get(variant.name)
    if lib is None:
        with _lock:
            lib = _loaded.get(variant.name)
            if lib is None:
                (plan,) = build([variant])
                lib = _loaded[variant.name] = KernelLibrary(variant, str(plan.library))
    return lib
