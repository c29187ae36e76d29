"""Loading a compiled variant and calling its extern "C" launcher.

A library is found by the kernel cache's manifest (runtime.library_cache); only where none is
recorded for this kernel code does load() import the renderer and nvcc (runtime.build) and compile
it on first use, so a server that ships prebuilt kernels never imports Jinja or the compiler.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
import warnings

import torch

from .dense_variant import DenseVariant
from .environment import getenv
from .library_cache import PREBUILT_ENV, cache_dir, find_library
from .paged_variant import PagedVariant
from .variant import Variant


class _Library:
    """A built variant opened with ctypes. Its `extern "C"` block exports <prefix>_variant_name (checked
    against the variant: a library never serves another) and <prefix>_error_string (for cudaError_t codes)."""

    def __init__(self, variant, path: str, prefix: str):
        self.variant = variant
        self.path = path
        self._lib = ctypes.CDLL(path)
        self._error_string = getattr(self._lib, f"{prefix}_error_string")
        self._error_string.argtypes = [ctypes.c_int]
        self._error_string.restype = ctypes.c_char_p
        name_fn = getattr(self._lib, f"{prefix}_variant_name")
        name_fn.restype = ctypes.c_char_p
        built_name = name_fn().decode()
        if built_name != variant.name:
            raise RuntimeError(f"{path} holds {built_name}, expected {variant.name}")

    def _int_functions(self, *names: str) -> None:
        for fn in names:
            getattr(self._lib, fn).restype = ctypes.c_int

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"{self.variant.name}: {what} failed: {self._error_string(err).decode()}")


class KernelLibrary(_Library):
    """A fused variant's shared library; see the `extern "C"` block of its kernel template."""

    def __init__(self, variant: Variant, path: str):
        super().__init__(variant, path, "mqa_topk")
        # (a paged build exports mqa_topk_launch_paged instead of mqa_topk_launch, an fp16 gate's build
        # mqa_topk_launch_gate16)
        launch = ("mqa_topk_launch_paged" if variant.page_block_size else
                  "mqa_topk_launch_gate16" if getattr(variant, "gate_bits", 32) == 16 else "mqa_topk_launch")
        # (q, k, k_scale | q, kv_cache, pages, cache_blocks; then weights, ks, ke, out, workspace, rows, keys,
        # [q_gate, w_gate, row_bounds, key_norms,] stream)
        gate_inputs = [ctypes.c_void_p] * 4 if launch == "mqa_topk_launch_gate16" else []
        getattr(self._lib, launch).argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int] if variant.page_block_size
                                               else [ctypes.c_void_p] * 3) + [ctypes.c_void_p] * 5 + \
            [ctypes.c_int, ctypes.c_int] + gate_inputs + [ctypes.c_void_p]
        if gate_inputs:  # (q, weights, k, rows, keys, q_gate, w_gate, row_bounds, key_norms, stream)
            self._lib.mqa_topk_gate16_inputs.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 5
            self._int_functions("mqa_topk_gate16_inputs")
        self._lib.mqa_topk_block_order.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 2
        self._int_functions(launch, "mqa_topk_block_order", "mqa_topk_smem_bytes", "mqa_topk_threads",
                            "mqa_topk_rows_per_block")
        self._lib.mqa_topk_workspace_bytes.argtypes = [ctypes.c_int]
        self._lib.mqa_topk_workspace_bytes.restype = ctypes.c_longlong

    def workspace_bytes(self, rows: int) -> int:
        """Device memory a launch over `rows` rows needs (on the current device)."""
        n = self._lib.mqa_topk_workspace_bytes(rows)
        if n < 0:
            raise RuntimeError(f"{self.variant.name}: cannot size the workspace (no CUDA device?)")
        return n

    def launch(self, q, k, k_scale, weights, ks, ke, out, workspace, rows: int, keys: int, stream: int) -> None:
        self._check(self._lib.mqa_topk_launch(q, k, k_scale, weights, ks, ke, out, workspace, rows, keys, stream),
                    "launch")

    def launch_gate16(self, q, k, k_scale, weights, ks, ke, out, workspace, rows: int, keys: int, q_gate, w_gate, row_bounds,
                      key_norms, stream: int) -> None:
        """An fp16 gate's launch: the plain launch's arguments and the gate's inputs (runtime/gate16.py)."""
        self._check(self._lib.mqa_topk_launch_gate16(q, k, k_scale, weights, ks, ke, out, workspace, rows, keys, q_gate, w_gate,
                                                     row_bounds, key_norms, stream), "launch")

    def gate16_inputs(self, q, weights, k, rows: int, keys: int, q_gate, w_gate, row_bounds, key_norms, stream: int) -> None:
        """An fp16 gate's build: its inputs made on the GPU (runtime/gate16.gate_inputs_on_device)."""
        self._check(self._lib.mqa_topk_gate16_inputs(q, weights, k, rows, keys, q_gate, w_gate, row_bounds, key_norms, stream),
                    "the gate's inputs")

    def launch_paged(self, q, kv_cache, pages, cache_blocks: int, weights, ks, ke, out, workspace, rows: int, keys: int,
                     stream: int) -> None:
        """A paged build's launch: key x of [0, keys) is read from cache block pages[x / block size]."""
        self._check(self._lib.mqa_topk_launch_paged(q, kv_cache, pages, cache_blocks, weights, ks, ke, out, workspace, rows,
                                                    keys, stream), "launch")

    def block_order(self, ks, ke, rows: int, keys: int, scratch, stream: int) -> None:
        """Writes the order a launch claims its row blocks in to the start of `scratch` (8 bytes a
        row block and 256 more)."""
        self._check(self._lib.mqa_topk_block_order(ks, ke, rows, keys, scratch, stream), "block order")

    def tail_split(self, num_blocks: int, sms: int) -> tuple[int, int]:
        """(split blocks, parts each) of a launch over num_blocks row blocks on `sms` SMs: the gated
        kernels cut the blocks past the last full round of CTAs into parts of their keys; (0, 1)
        where a kernel does not split."""
        if not hasattr(self._lib, "mqa_topk_tail_split"):
            return 0, 1
        blocks = ctypes.c_int(0)
        parts = self._lib.mqa_topk_tail_split(num_blocks, sms, ctypes.byref(blocks))
        return blocks.value, parts

    @property
    def smem_bytes(self) -> int:
        return self._lib.mqa_topk_smem_bytes()

    @property
    def threads(self) -> int:
        return self._lib.mqa_topk_threads()

    @property
    def rows_per_block(self) -> int:
        return self._lib.mqa_topk_rows_per_block()


class DenseLibrary(_Library):
    """A dense variant's shared library: the logits kernel and the top-k kernel (see the
    `extern "C"` block of templates/dense_mqa_topk_sm90.cu.j2)."""

    def __init__(self, variant: DenseVariant, path: str):
        super().__init__(variant, path, "mqa_dense")
        p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        # (a paged build exports mqa_dense_run_paged, and no one-piece logits launch)
        run = "mqa_dense_run_paged" if variant.page_block_size else "mqa_dense_run"
        # (q, k, k_scale | q, kv_cache, pages, cache_blocks; then weights, ks, ke, out, logits, window, piece_rows, rows,
        # keys, stream)
        getattr(self._lib, run).argtypes = ([p, p, p, i] if variant.page_block_size else [p] * 3) + [p] * 5 + [ll, i, i, i, p]
        if not variant.page_block_size:
            self._lib.mqa_dense_logits_launch.argtypes = [p, p, p, p, p, p, p, ll, i, i, i, i, p]
            self._int_functions("mqa_dense_logits_launch")
        else:
            self._lib.mqa_dense_cluster_topk_ctas.argtypes = [ll, i]
            self._lib.mqa_dense_decode_layout.argtypes = [p, p, i, i, i, i, i, p, p, p, p]
            self._int_functions("mqa_dense_cluster_topk_ctas", "mqa_dense_decode_layout")
        self._lib.mqa_dense_topk_launch.argtypes = [p, ll, p, p, i, i, i, p, i, p]
        self._lib.mqa_dense_check_inputs.argtypes = [p, p, p, p, p, p, i, i, i, p, p, p]
        self._int_functions(run, "mqa_dense_topk_launch", "mqa_dense_logits_smem_bytes", "mqa_dense_topk_smem_bytes",
                            "mqa_dense_short_row_keys", "mqa_dense_check_inputs")
        self._run = getattr(self._lib, run)
        self._check_result = (ctypes.c_int * 2)()
        self._check_lock = threading.Lock()  # (one host buffer per library)

    def run(self, q, k, k_scale, weights, ks, ke, out, logits, window: int, piece_rows: int, rows: int, keys: int,
            stream: int) -> None:
        """The whole dense path in one call: rows [0, rows) in pieces of piece_rows rows, each row's
        first `window` keys (a multiple of 4) scored into the piece's logits (piece_rows x window floats
        at `logits`, key ks[r] + j at column j), then selected; the short-row top-k serves where a
        window is at most short_row_keys, in the smallest of its CTAs that holds one."""
        err = self._run(q, k, k_scale, weights, ks, ke, out, logits, window, piece_rows, rows, keys, stream)
        if err:
            self._check(err, "dense run")

    def run_paged(self, q, kv_cache, pages, cache_blocks: int, weights, ks, ke, out, logits, window: int,
                  piece_rows: int, rows: int, keys: int, stream: int) -> None:
        """run() of a paged build: key x of [0, keys) is read from cache block pages[x / block size]."""
        err = self._run(q, kv_cache, pages, cache_blocks, weights, ks, ke, out, logits, window, piece_rows, rows, keys,
                        stream)
        if err:
            self._check(err, "dense run")

    def logits(self, q, k, k_scale, weights, ks, ke, logits, window: int, row_begin: int, piece_rows: int,
               rows: int, keys: int, stream: int) -> None:
        """One piece's logits: row r's key ks[r] + j at logits[(r - row_begin) * window + j], j < window."""
        self._check(self._lib.mqa_dense_logits_launch(q, k, k_scale, weights, ks, ke, logits, window, row_begin,
                                                      piece_rows, rows, keys, stream), "logits launch")

    def topk(self, logits, window: int, ks, ke, row_begin: int, piece_rows: int, keys: int, out, stream: int,
             short_rows: bool = True) -> None:
        """One piece's top-k from logits laid out as logits() writes them: by the short-row kernel
        where short_rows and a window fits it (as run), else by the histogram one."""
        self._check(self._lib.mqa_dense_topk_launch(logits, window, ks, ke, row_begin, piece_rows, keys, out,
                                                    int(short_rows), stream), "top-k launch")

    def check_inputs(self, q, k, k_scale, weights, ks, ke, rows: int, heads: int, keys: int, device_result,
                     stream: int) -> tuple[int, int]:
        """The contract's value checks in one launch, waited for: (flags, the most keys one row sees);
        see common/input_check.cuh. device_result: two ints of device memory."""
        with self._check_lock:
            self._check(self._lib.mqa_dense_check_inputs(q, k, k_scale, weights, ks, ke, rows, heads, keys,
                                                         device_result, self._check_result, stream), "input check")
            return self._check_result[0], self._check_result[1]

    @property
    def logits_smem_bytes(self) -> int:
        return self._lib.mqa_dense_logits_smem_bytes()

    @property
    def topk_smem_bytes(self) -> int:
        return self._lib.mqa_dense_topk_smem_bytes()

    @property
    def short_row_keys(self) -> int:
        """The longest row the short-row top-k kernel holds in registers (in its largest CTA)."""
        return self._lib.mqa_dense_short_row_keys()

    def decode_layout(self, context_lens, block_table, next_n: int, cache_blocks: int, spare: int, pages, ks, ke,
                      stream: int) -> None:
        """A paged build: runtime.paged.decode_layout's pages, ks and ke in one launch (int32 device
        pointers; block_table [batch, max_blocks] contiguous, pages batch x max_blocks + spare long)."""
        batch, max_blocks = block_table.shape
        self._check(self._lib.mqa_dense_decode_layout(context_lens.data_ptr(), block_table.data_ptr(), batch, max_blocks,
                                                      next_n, cache_blocks, spare, pages, ks, ke, stream), "decode layout")

    def cluster_topk_ctas(self, window: int, piece_rows: int) -> int:
        """A paged build: the CTAs a row its cluster top-k selects a piece of piece_rows rows of
        `window` keys with on the current device (0: a CTA a row, by the other top-k kernels)."""
        return self._lib.mqa_dense_cluster_topk_ctas(window, piece_rows)


class PagedLibrary(_Library):
    """A paged-decode variant's shared library; see the `extern "C"` block of
    templates/paged_mqa_topk_wgmma.cu.j2."""

    def __init__(self, variant: PagedVariant, path: str):
        super().__init__(variant, path, "paged_topk")
        p, i = ctypes.c_void_p, ctypes.c_int
        self._lib.paged_topk_launch.argtypes = [p] * 7 + [i] * 4 + [p]
        self._int_functions("paged_topk_launch", "paged_topk_smem_bytes", "paged_topk_threads")
        self._lib.paged_topk_workspace_bytes.argtypes = [i, i]
        self._lib.paged_topk_workspace_bytes.restype = ctypes.c_longlong

    def workspace_bytes(self, batch: int, parts: int) -> int:
        """Device memory a launch over `batch` requests in `parts` parts each needs."""
        return self._lib.paged_topk_workspace_bytes(batch, parts)

    def launch(self, q, kv_cache, weights, context_lens, block_table, out, workspace, batch: int, max_blocks: int,
               num_blocks: int, parts: int, stream: int) -> None:
        self._check(self._lib.paged_topk_launch(q, kv_cache, weights, context_lens, block_table, out, workspace, batch,
                                                max_blocks, num_blocks, parts, stream), "launch")

    @property
    def smem_bytes(self) -> int:
        return self._lib.paged_topk_smem_bytes()

    @property
    def threads(self) -> int:
        return self._lib.paged_topk_threads()


def allocate(nbytes: int, device, what: str, dtype=torch.uint8):
    """torch.empty of nbytes bytes, or a clear error naming what it was for (the process lives on)."""
    try:
        return torch.empty(nbytes // dtype.itemsize, dtype=dtype, device=device)
    except torch.cuda.OutOfMemoryError as e:
        raise RuntimeError(f"{what}: {nbytes} bytes ({nbytes / 2**20:.0f} MiB) could not be allocated on {device} "
                           f"({str(e).splitlines()[0]})") from e


def answer_buffer(out: torch.Tensor | None, rows: int, top_k: int, device) -> torch.Tensor:
    """`out` where the caller owns the answer's buffer (checked: a contiguous int32 [rows, top_k]),
    else a new one."""
    if out is None:
        return torch.empty((rows, top_k), dtype=torch.int32, device=device)
    if tuple(out.shape) != (rows, top_k) or out.dtype != torch.int32 or not out.is_contiguous():
        raise ValueError(f"out: expected a contiguous int32 [{rows}, {top_k}] tensor")
    return out


def launch_on(device: torch.device):
    """(a context in which `device` is the current device, the raw handle of its current stream): our
    launchers launch on the current device and stream. The context switches devices only where
    `device` is not current already (torch.cuda.device costs microseconds a call, which a one-row
    call notices)."""
    current = torch.cuda.current_device()
    index = current if device.index is None else device.index
    context = contextlib.nullcontext() if index == current else torch.cuda.device(index)
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return context, raw(index) if raw else torch.cuda.current_stream(index).cuda_stream


def aligned16(x):
    """TMA and 16-byte vector loads need 16-byte aligned addresses; a contiguous view can start anywhere."""
    return x if x.data_ptr() % 16 == 0 else x.clone()


_LIBRARY_KINDS = ((DenseVariant, DenseLibrary), (PagedVariant, PagedLibrary), (Variant, KernelLibrary))
_loaded: dict[str, KernelLibrary | DenseLibrary | PagedLibrary] = {}
_lock = threading.Lock()


class KernelUnavailable(RuntimeError):
    """A variant's library cannot be had here: no nvcc, a failed build, an unwritable cache, a
    library that does not load."""


# Set to 1 in a serving process that must never run nvcc: a variant with no prebuilt library is then
# unavailable (automatic dispatch takes the dense path, with one warning) instead of compiled.
NO_COMPILE_ENV = "FUSED_MQA_TOPK_NO_COMPILE"


def _compiled(variant: Variant | DenseVariant | PagedVariant):
    """The path of the variant's library, rendered and compiled into the cache where no usable one
    is there (the only place the runtime reaches the renderer and nvcc)."""
    if getenv(NO_COMPILE_ENV, "0") not in ("", "0"):
        raise KernelUnavailable(f"no prebuilt library of {variant.name} in {cache_dir()} or {PREBUILT_ENV}, and "
                                f"{NO_COMPILE_ENV} forbids compiling it")
    from .build import build, find_built

    if find_built(variant) is None:
        print(f"fused-mqa-topk: compiling {variant.name} on first use (nvcc, about a minute; cached in {cache_dir()})",
              file=sys.stderr, flush=True)
    (built,) = build([variant])
    return built.library


def load(variant: Variant | DenseVariant | PagedVariant) -> KernelLibrary | DenseLibrary | PagedLibrary:
    """The variant's library, compiled into the cache first if needed (one build per process).
    Raises KernelUnavailable, naming the variant and the cause, where it cannot be built or loaded."""
    lib = _loaded.get(variant.name)
    if lib is None:
        with _lock:
            lib = _loaded.get(variant.name)
            if lib is None:
                try:
                    path = find_library(variant) or _compiled(variant)
                    kind = next(lib for spec, lib in _LIBRARY_KINDS if isinstance(variant, spec))
                    lib = _loaded[variant.name] = kind(variant, str(path))
                except Exception as e:  # noqa: BLE001 -- whatever stops a library (no nvcc, a failed build,
                    # an unwritable cache, a file that does not load, a symbol it lacks, a template that does
                    # not render) leaves the variant unavailable, and automatic dispatch falls back
                    raise KernelUnavailable(f"{variant.name} is unavailable: {type(e).__name__}: {e}") from e
    return lib


_warned: set[str] = set()


def load_or_warn(variant: Variant | DenseVariant, fallback: str) -> KernelLibrary | DenseLibrary | None:
    """load(variant), or None after one warning per variant (saying what serves instead) where it
    is unavailable: automatic dispatch degrades, it does not fail."""
    try:
        return load(variant)
    except KernelUnavailable as e:
        if variant.name not in _warned:
            _warned.add(variant.name)
            warnings.warn(f"{e}; {fallback} serves instead", RuntimeWarning, stacklevel=3)
        return None
