"""Timing paged decode steps on the GPU: the paged kernel eager and replayed in a CUDA graph, the
gathered path where it fits, against the HBM floor of the same run.

The floor of a step is the cache bytes it must read (132 a token, once per request) over the
device's copy rate measured in the same run (bytes moved a second, read + write, by a large
device-to-device copy): SPEC.md section 5.
"""

from __future__ import annotations

import itertools
import json
import sys

import torch

from runtime.dense import logits_bytes
from runtime.loader import load
from runtime.paged import (check_paged_inputs, decode_layout, explain_paged, gathered_paged_mqa_topk, paged_mqa_topk,
                           paged_variant_for, parts_for)
from runtime.paged_variant import CACHE_BYTES_PER_KEY

from .distributions import add_distribution_option, check_distribution, head_weights, key_scales
from .timing import geometric_mean, interleaved_ms, median_ms

BATCHES = (1, 4, 16, 64, 256)
CONTEXTS = (8192, 32768, 131072, 524288, 1 << 20)
NEXT_N = (1, 2, 4)
HEADS = (32, 64)
TOP_K = (512, 2048)
GATHER_LIMIT_BYTES = 8 << 30  # the gathered path copies the step's keys: timed only up to this


def copy_rate(nbytes: int = 2 << 30) -> float:
    """Bytes moved a second (read + write) by a device-to-device copy of nbytes."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), warmup=3, reps=20, hide_launch=True)
    return 2 * nbytes / (ms * 1e-3)


def run_head(rate: float) -> dict:
    """A timing file's first line: the copy rate (the HBM floor's), the GPU, and torch._scaled_mm's fp8
    rate sustained over 3 s (the products' floor on a power-capped card: decode_report's step bound)."""
    from .decode_report import FP8_RATE
    from .timing import scaled_mm_tflops

    return {"copy_rate_bytes_per_s": rate, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            FP8_RATE: scaled_mm_tflops(seconds=3.0)}


def random_step(batch: int, context: int, next_n: int, heads: int, top_k: int, block_size: int = 64, seed: int = 0,
                distribution: str = "positive", device="cuda"):
    """A decode step of `batch` requests of `context` tokens, made on `device`: every request's blocks
    distinct and shuffled over the cache; data by `distribution` (generator.distributions)."""
    check_distribution(distribution)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    blocks = -(-context // block_size)
    num_blocks = batch * blocks
    table = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    logical = torch.empty_like(table)  # each cache block's place in its request
    logical[table.long()] = torch.arange(num_blocks, dtype=torch.int32, device=device) % blocks
    cache = torch.empty(num_blocks, block_size * CACHE_BYTES_PER_KEY, dtype=torch.uint8, device=device)
    for lo in range(0, num_blocks, 4096):  # in slices: the fp32 randn of a whole cache would not fit
        hi = min(lo + 4096, num_blocks)
        values = torch.randn(hi - lo, block_size * 128, generator=gen, device=device).to(torch.float8_e4m3fn)
        cache[lo:hi, : block_size * 128] = values.view(torch.uint8)
        position = logical[lo:hi, None].float() * block_size + torch.arange(block_size, device=device)
        scales = key_scales(position, context, distribution, gen)
        cache[lo:hi, block_size * 128:] = scales.view(torch.uint8)
    q = torch.randn(batch, next_n, heads, 128, generator=gen, device=device).to(torch.float8_e4m3fn)
    weights = head_weights((batch * next_n, heads), distribution, gen, device)
    lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    return (q, cache.view(num_blocks, block_size, 1, CACHE_BYTES_PER_KEY), weights, lens, table.view(batch, blocks), top_k)


def with_heads(step, heads: int):
    """random_step's step with its first `heads` heads (the same cache: a step's data made once for every
    head count)."""
    q, cache, weights, lens, table, top_k = step
    return (q[:, :, :heads].contiguous(), cache, weights[:, :heads].contiguous(), lens, table, top_k)


def captured(fn) -> torch.cuda.CUDAGraph:
    """fn() captured once in a CUDA graph (run once before, which loads its library and warms the allocator
    outside the capture)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def graph_replay_ms(fn) -> float:
    """fn() captured once in a CUDA graph, then the median of its replays (the launch hidden)."""
    return median_ms(captured(fn).replay, warmup=3, reps=20, hide_launch=True)


def graphs_replay_ms(calls: dict, timer=None) -> dict[str, float]:
    """Each call captured in its own CUDA graph, then the replays' medians, timed in alternating rounds
    (timing.interleaved_ms), so that a choice between them sees the same clocks: timed one after another,
    a disturbance meets one call alone and flips the choice (experiment log, "2026-12-05: decode tables
    borrowed; an H100 measured")."""
    graphs = {name: captured(fn) for name, fn in calls.items()}
    timed = interleaved_ms({name: g.replay for name, g in graphs.items()}, warmup=3, hide_launch=True, timer=timer)
    return {name: t.ms for name, t in timed.items()}


def time_step(args, rate: float, gathered: bool = True, distribution: str = "positive", dense: bool = False) -> dict:
    """One step timed as a server calls it: automatic dispatch eager and graph-replayed, as called and
    with the step's decode_layout given (made once a step, outside the timed call), the path each took,
    and the memory a call takes beyond its answer (the paged kernel's workspace or the dense path's
    logits)."""
    q, cache, _weights, lens, table, top_k = args
    batch, next_n, heads = q.shape[:3]
    context = int(lens[0])
    problem = check_paged_inputs(*args, check_values=False)
    variant = paged_variant_for(problem)
    parts = parts_for(batch, problem.capacity, top_k, q.device)
    step_bytes = batch * context * CACHE_BYTES_PER_KEY
    floor_ms = step_bytes / rate * 1e3
    layout = decode_layout(lens, table, next_n, cache.shape[1], cache.shape[0])
    call = lambda: paged_mqa_topk(*args, validate=False)
    planned = lambda: paged_mqa_topk(*args, validate=False, layout=layout)
    eager = median_ms(call, warmup=3, reps=20)
    replay = graph_replay_ms(call)
    path, path_planned = (explain_paged(*args, layout=given).path for given in (None, layout))
    row = {"distribution": distribution, "batch": batch, "context": context, "next_n": next_n, "heads": heads, "top_k": top_k,
           "variant": variant.name if variant else None, "parts": parts, "step_mib": step_bytes / 2**20,
           "path": path, "path_layout_given": path_planned,
           "call_mib": _call_bytes(path, variant, problem) / 2**20,
           "call_mib_layout_given": _call_bytes(path_planned, variant, problem) / 2**20,
           "floor_ms": floor_ms, "eager_ms": eager, "graph_ms": replay, "share_of_floor": floor_ms / replay,
           "layout_eager_ms": median_ms(planned, warmup=3, reps=20),
           "layout_graph_ms": graph_replay_ms(planned) if path_planned != path or path == "dense" else replay,
           "same_bytes_layout_given": bool(torch.equal(call(), planned()))}
    if dense:  # our dense kernels' paged build, the same step replayed; both exact: the same bytes
        row["dense_graph_ms"] = graph_replay_ms(lambda: paged_mqa_topk(*args, validate=False, variant="dense"))
        row["dense_same_bytes"] = bool(torch.equal(paged_mqa_topk(*args, validate=False),
                                                   paged_mqa_topk(*args, validate=False, variant="dense")))
    if gathered and 2 * step_bytes <= GATHER_LIMIT_BYTES:
        row["gathered_ms"] = median_ms(lambda: gathered_paged_mqa_topk(*args), warmup=2, reps=10)
    return row


def _call_bytes(path: str, variant, problem) -> int:
    """Device memory a call of `path` takes beyond its answer: the paged kernel's workspace, or the dense
    path's logits (a window of the block table's capacity for as many rows as fit its budget)."""
    if path == "dense":  # (dense_paged_mqa_topk: the step's layout holds batch x capacity keys)
        return logits_bytes(problem.batch * problem.next_n, problem.batch * problem.capacity, problem.capacity)
    if path == "paged kernel":
        return load(variant).workspace_bytes(problem.batch, parts_for(problem.batch, problem.capacity, problem.top_k,
                                                                      problem.device))
    return 0


def sweep(batches=BATCHES, contexts=CONTEXTS, next_ns=NEXT_N, heads=HEADS, top_ks=TOP_K, out=sys.stdout,
          gathered: bool = True, memory_limit: int = 48 << 30, distributions=("positive",), dense: bool = False) -> list[dict]:
    """Every point of the grid whose cache fits memory_limit, one json line each, and the copy rate first."""
    rate = copy_rate()
    print(json.dumps(run_head(rate)), file=out, flush=True)
    rows = []
    for distribution, batch, context in itertools.product(distributions, batches, contexts):
        if batch * context * CACHE_BYTES_PER_KEY > memory_limit:
            continue
        for next_n in next_ns:
            args = random_step(batch, context, next_n, max(heads), top_ks[0], distribution=distribution)
            for h, top_k in itertools.product(heads, top_ks):
                row = time_step((*with_heads(args, h)[:5], top_k), rate, gathered, distribution, dense)
                rows.append(row)
                print(json.dumps(row), file=out, flush=True)
            del args
            torch.cuda.empty_cache()
    return rows


# The steps `decode --tune` times both paths on (450: the grid whole, up to 256 requests of 1M
# tokens); the nearest entry answers for the steps between and beyond. A cap of 16M tokens a step
# (before 2be12be) left 256 x 512K to a 64 x 128K entry's choice, 0.77-0.92 of the serving path's
# speed on the H200; the whole grid took 51 s on an H100 (BENCHMARKS.md, "Decode: the whole grid in
# the decode tables"). `--max-tokens` caps it; a step whose cache does not fit the GPU is skipped.
TUNE_BATCHES = (1, 4, 16, 64, 256)
TUNE_CONTEXTS = (8192, 32768, 131072, 524288, 1 << 20)
TUNE_TOP_K = (512, 1024, 2048)
TUNE_MAX_TOKENS = max(TUNE_BATCHES) * max(TUNE_CONTEXTS)  # steps of more tokens are not timed
# Beyond a step's cache: the dense path's logits (at most runtime.dense.DEFAULT_LOGITS_BUDGET a call, held
# by each of its two captured graphs and its eager answer check) and random_step's fp32 slices.
STEP_SLACK_BYTES = 2 << 30


def free_device_bytes() -> int:
    """The current GPU's free memory, after returning the allocator's cached blocks."""
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


def tune_decode(batches=TUNE_BATCHES, contexts=TUNE_CONTEXTS, next_ns=NEXT_N, heads=HEADS, top_ks=TUNE_TOP_K,
                out=sys.stdout, max_tokens: int = TUNE_MAX_TOKENS) -> list:
    """The paged kernel, the dense path, and the dense path with the step's layout given, each
    graph-replayed on every step of the grid, the three in alternating rounds (graphs_replay_ms;
    positive-weight random data); a DecodeEntry a step
    whose two answers are exact: the same bytes, or (where the kernel sums heads in another order
    than the dense kernels, so that a key tying the k-th within rounding may be swapped) each
    verified by the two-sided rule on the rows where they differ. A step where one is not is
    reported and not kept."""
    from datetime import datetime, timezone

    from runtime.decode_table import DecodeEntry

    from .paged_workloads import PagedWorkload, verify_paged

    entries = []
    for batch, context in itertools.product(batches, contexts):
        if batch * context > max_tokens:
            continue
        need, free = batch * context * CACHE_BYTES_PER_KEY + STEP_SLACK_BYTES, free_device_bytes()
        if need > free:  # (a GPU of less memory: the step takes its nearest timed step's choice)
            print(json.dumps({"batch": batch, "context": context, "skipped": f"its cache and the dense path's logits "
                              f"take about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"}), file=out, flush=True)
            continue
        for next_n in next_ns:
            made = random_step(batch, context, next_n, max(heads), top_ks[0])
            layout = decode_layout(made[3], made[4], next_n, made[1].shape[1], made[1].shape[0])
            for h, top_k in itertools.product(heads, top_ks):
                args = with_heads(made, h)
                step = (*args[:5], top_k)
                kernel = paged_variant_for(check_paged_inputs(*step, check_values=False))
                if kernel is None:
                    continue
                answers = [paged_mqa_topk(*step, validate=False, variant=v) for v in (kernel, "dense")]
                same = bool(torch.equal(*answers))
                differing = (answers[0] != answers[1]).any(1).nonzero().flatten()[:64].tolist()
                wl = PagedWorkload("positive", *step)
                exact = same or all(verify_paged(a, wl, rows=differing, strict=True).ok for a in answers)
                times = list(graphs_replay_ms({
                    name: lambda v=v, lay=lay: paged_mqa_topk(*step, validate=False, variant=v, layout=lay)
                    for name, v, lay in (("kernel", kernel, None), ("dense", "dense", None), ("planned", "dense", layout))
                }).values())
                row = {"batch": batch, "context": context, "next_n": next_n, "heads": h, "top_k": top_k,
                       "kernel_ms": times[0], "dense_ms": times[1], "dense_planned_ms": times[2], "same_bytes": same,
                       "rows_differing": len(differing), "exact": exact}
                print(json.dumps(row), file=out, flush=True)
                if exact:
                    entries.append(DecodeEntry(h, top_k, next_n, batch, context, *(round(t, 5) for t in times),
                                               measured=datetime.now(timezone.utc).isoformat(timespec="seconds")))
            del made, args, layout
            torch.cuda.empty_cache()
    return entries


def add_arguments(p) -> None:
    p.add_argument("--batch", type=int, action="append", help=f"requests a step (default {BATCHES})")
    p.add_argument("--context", type=int, action="append", help=f"tokens a request (default {CONTEXTS})")
    p.add_argument("--next-n", dest="next_n", type=int, action="append", help=f"rows a request (default {NEXT_N})")
    p.add_argument("--heads", type=int, action="append", choices=HEADS)
    p.add_argument("--top-k", dest="top_k", type=int, action="append", choices=TOP_K + (1024,))
    add_distribution_option(p, "data the steps are timed on (default positive; each given is timed)")
    p.add_argument("--no-gathered", dest="gathered", action="store_false", help="do not time the gathered path")
    p.add_argument("--dense", action="store_true", help="also time our dense kernels' paged build (variant=\"dense\")")
    p.add_argument("--log", help="write the JSON lines here (default: stdout)")
    p.add_argument("--tune", action="store_true",
                   help="time the paged kernel and our dense path on the decode grid (default batches "
                        f"{TUNE_BATCHES}, contexts {TUNE_CONTEXTS}, top-k {TUNE_TOP_K}) and write this GPU's decode "
                        "table, which automatic dispatch reads to choose between them")
    p.add_argument("--max-tokens", type=int, default=TUNE_MAX_TOKENS,
                   help=f"--tune: time no step of more tokens than this (default {TUNE_MAX_TOKENS:,}); a larger step "
                        "takes its nearest timed step's choice")
    p.add_argument("--report", metavar="OURS", help="no GPU: set the timings of a `decode --log` run against the "
                   "serving path's on the same steps (--serving) and print the tables (generator/decode_report.py)")
    p.add_argument("--serving", metavar="THEIRS", help="--report: the serving path's times, a JSON line a step "
                   "({batch, context, next_n, heads, top_k, graph_ms, eager_ms})")
    p.add_argument("--table", help="--tune: write the decode table here (default: this GPU's in the user's table "
                                   "directory, FUSED_MQA_TOPK_TABLES or ~/.local/share/fused-mqa-topk/tables, decode/)")


def decode_variants(heads=HEADS, top_ks=TUNE_TOP_K, next_ns=NEXT_N, block_size: int = 64) -> list:
    """What `decode --tune` runs, to build first (in parallel): the paged kernel's defaults and our
    dense kernels' paged builds, short-row and long-row, at these heads and top-k."""
    from runtime.dense_variant import default_dense_variant
    from runtime.paged_variant import default_paged_variant

    paged = {default_paged_variant(h, k, n, block_size) for h in heads for k in top_ks for n in next_ns}
    dense = {default_dense_variant(h, k, short_rows=short).decode_build(block_size, n)
             for h in heads for k in top_ks for short in (True, False) for n in next_ns}
    return sorted(v.name for v in paged | dense if v is not None)


def tune_decode_table(path=None, heads=HEADS, top_ks=TUNE_TOP_K, batches=TUNE_BATCHES, contexts=TUNE_CONTEXTS,
                      next_ns=NEXT_N, out=sys.stdout, command: str = "", log=print,
                      max_tokens: int = TUNE_MAX_TOKENS) -> list:
    """Builds what the decode grid runs, times it (tune_decode) and writes this GPU's decode table to
    `path` (default: the user's table directory's decode/); returns the entries."""
    from pathlib import Path

    from runtime.build import build, spec_from_name
    from runtime.decode_table import decode_table_path, save_decode_table
    from runtime.gpu import device_identity

    build([spec_from_name(n) for n in decode_variants(heads, top_ks, next_ns)])
    entries = tune_decode(batches, contexts, next_ns, heads, top_ks, out=out, max_tokens=max_tokens)
    identity = device_identity(torch.cuda.current_device())
    path = Path(path) if path else decode_table_path(identity.key)
    # portable_arch: every library of the grid fits any GPU of the arch, so one without a decode table of
    # its own may borrow this one (runtime.decode_table.decode_table).
    save_decode_table(path, identity.key, entries, {"gpu": identity.name, "sms": identity.sms,
                                                    "portable_arch": identity.arch, "torch": torch.__version__,
                                                    "command": command})
    dense = sum(e.use(False) == "dense" for e in entries)
    planned = sum(e.use(True) == "dense" for e in entries)
    log(f"decode table: {len(entries)} steps to {path}; the dense path is faster on {dense} as called, on {planned} "
        f"with the layout given")
    return entries


def main(args) -> int:
    if args.report or args.serving:
        if not (args.report and args.serving):
            print("decode: --report and --serving go together (ours, then the serving path's times)", file=sys.stderr)
            return 2
        from .decode_report import report

        print(report(args.report, args.serving), end="")
        return 0
    if not torch.cuda.is_available():
        print("decode: needs a CUDA GPU (none here); the paged contract's CPU tests are tests/test_paged.py",
              file=sys.stderr)
        return 2
    out = open(args.log, "w") if args.log else sys.stdout  # noqa: SIM115 -- closed below, or stdout
    if args.tune:
        try:
            tune_decode_table(args.table, args.heads or HEADS, args.top_k or TUNE_TOP_K, args.batch or TUNE_BATCHES,
                              args.context or TUNE_CONTEXTS, args.next_n or NEXT_N, out=out,
                              command="python -m generator decode " + " ".join(sys.argv[2:]),
                              log=lambda line: print(line, file=sys.stderr), max_tokens=args.max_tokens)
            return 0
        finally:
            if out is not sys.stdout:
                out.close()
    try:
        rows = sweep(args.batch or BATCHES, args.context or CONTEXTS, args.next_n or NEXT_N, args.heads or HEADS,
                     args.top_k or TOP_K, out=out, gathered=args.gathered,
                     distributions=args.distribution or ("positive",), dense=args.dense)
    finally:
        if out is not sys.stdout:
            out.close()
    big = [r for r in rows if r["step_mib"] >= 64]
    print(f"{len(rows)} steps; graph-replayed share of the HBM floor where a step reads >= 64 MiB: "
          f"worst {min((r['share_of_floor'] for r in big), default=float('nan')):.2f}, "
          f"geometric mean {geometric_mean([r['share_of_floor'] for r in big]):.2f}", file=sys.stderr)
    return 0
