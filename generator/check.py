"""`python -m generator check`: build, verify against the reference, and time, in one call.

The GPU machine is lent by the minute, so one command does everything: build the variants (or
reuse the carried cache), run every workload family through each variant and verify it with the
reference (poisoned outputs, so unwritten elements show), spot-check large chunks, and time fused
against dense on causal chunks. A table goes to stdout; JSON lines to --log.

Every check is planned by name before any runs (`Pending`), so that a run cut short by the lent
machine's time limit is finished by the same command with --resume: the checks the log already
holds as passed, for this kernel code, are not run again. --time-budget stops starting checks in
time for the log to be complete.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from runtime.arch import arch_for_capability
from runtime.defaults import default_variants
from runtime.dense import dense_mqa_topk, run_dense
from runtime.dense_variant import DenseVariant
from runtime.fused import launch_variant
from runtime.kernel_code import paged_code_digest
from runtime.paged import decode_layout, launch_paged, paged_mqa_topk
from runtime.paged_variant import PagedVariant
from runtime.scoring import logits_window
from runtime.variant import Variant

from .paged_workloads import PagedWorkload, make_paged_workload, verify_paged
from .provenance import code_digest
from .space import AXES
from .timing import median_ms, scoring_tflops, visible_pairs
from .verify import verify_topk
from .workloads import FAMILIES, make_workload

POISON = -7  # what the output holds before a run: never a valid index nor the -1 pad


@dataclass
class Check:
    what: str
    ok: bool
    detail: str
    stats: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.what:60s} {self.detail}"


@dataclass(frozen=True)
class Pending:
    """A check not yet run: its name (what its Check will be called) and how to run it."""

    what: str
    run: Callable[[], Check]


# A check's name says what it ran, its seed included: --resume skips by name, so no two checks of a
# run may share one.
def variant_check_name(variant: Variant, family: str, rows: int, keys: int, seed: int) -> str:
    return f"{variant.name} {family} M={rows} N={keys} seed={seed}"


def dense_check_name(heads: int, top_k: int, variant: DenseVariant | None, family: str, rows: int, keys: int,
                     seed: int, told_longest_row: int | None) -> str:
    name = variant.name if variant else f"dense h{heads} k{top_k}"
    told = f" told {told_longest_row}" if told_longest_row is not None else ""
    return f"{name} {family} M={rows} N={keys}{told} seed={seed}"


def passed_in_log(path: str | Path, code: str) -> set[str]:
    """The checks a --log file records as passed for kernel code `code` (lines of other code, failed
    checks, timings and lines cut short by a killed run are not)."""
    done: set[str] = set()
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return done
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("ok") is True and entry.get("code") == code and "check" in entry:
            done.add(entry["check"])
    return done


def run_poisoned(variant: Variant, wl, stats: dict | None = None) -> torch.Tensor:
    """The variant's output for wl, written over an output buffer pre-filled with POISON."""
    out = torch.full((wl.rows, wl.top_k), POISON, dtype=torch.int32, device=wl.q.device)
    launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k, out=out, stats=stats)
    torch.cuda.synchronize()
    return out


def sampled_rows(rows: int, count: int, seed: int) -> list[int]:
    """`count` random rows (seeded) and the first and last: what a sampled verification checks."""
    g = torch.Generator().manual_seed(seed)
    return sorted(set(torch.randint(0, rows, (count,), generator=g).tolist()) | {0, rows - 1})


def repeat_detail(first: torch.Tensor, again: torch.Tensor) -> str:
    """'' where a second run gave the same bytes (the determinism contract), else what differs."""
    differ = int((first != again).any(1).sum())
    return f"; a second run differs in {differ} rows" if differ else ""


def verify_variant(variant: Variant, family: str, rows: int, keys: int, seed: int, sample_rows: int | None = None,
                   tail_rows: bool = False) -> Check:
    """Runs the variant on a fresh workload over a poisoned output and verifies every row (or
    sample_rows random rows and the first and last; with tail_rows, also every row of the four
    lightest blocks, where a split tail's answers land), strictly (ascending order, ties by index),
    and runs it again: the same bytes, or the check fails."""
    wl = make_workload(family, rows, keys, variant.heads, variant.top_k, seed=seed, device="cuda")
    stats: dict = {}
    out = run_poisoned(variant, wl, stats)
    repeat = repeat_detail(out, run_poisoned(variant, wl, {}))
    rows_to_check = None
    if sample_rows is not None and sample_rows < rows:
        rows_to_check = set(sampled_rows(rows, sample_rows, seed))
        if tail_rows:  # blocks are claimed heaviest first: a causal chunk's tail is its first rows
            rows_to_check |= set(range(0, min(rows, 4 * variant.rows)))
        rows_to_check = sorted(rows_to_check)
    poisoned = int((out == POISON).sum())
    report = verify_topk(out, *wl.args(), rows=rows_to_check, strict=True)
    detail = report.summary() + (f"; {poisoned} unwritten" if poisoned else "") + repeat
    if "rescan_blocks" in stats:
        blocks = -(-rows // variant.rows)
        detail += f"; rescanned {stats['rescan_blocks']}/{blocks} row blocks, {stats['split_blocks']} split"
    return Check(variant_check_name(variant, family, rows, keys, seed), report.ok and not poisoned and not repeat,
                 detail, stats)


def verify_dense(heads: int, top_k: int, family: str, rows: int, keys: int, seed: int,
                 variant: DenseVariant | None = None, told_longest_row: int | None = None) -> Check:
    """The dense path (our kernels: `variant`, or the default) over a poisoned output, in pieces of
    8 MiB of logits so that a check covers several pieces. Its logits windows and top-k kernel follow
    the longest row: the one measured, or `told_longest_row` as a caller would promise it (the
    short-row kernel where its window is at most the variant's short_row_keys). A row longer than told
    is answered from its first keys, as many as the window holds: verified as a row that sees those.
    Strictly, and run twice, as verify_variant."""
    wl = make_workload(family, rows, keys, heads, top_k, seed=seed, device="cuda")
    longest = told_longest_row if told_longest_row is not None else wl.longest_row()

    def run() -> torch.Tensor:
        out = torch.full((rows, top_k), POISON, dtype=torch.int32, device="cuda")
        run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, top_k, longest, 8 << 20, variant, out)
        torch.cuda.synchronize()
        return out

    out = run()
    repeat = repeat_detail(out, run())
    poisoned = int((out == POISON).sum())
    if told_longest_row is not None:  # the ranges as the window cuts them
        wl = replace(wl, ke=torch.minimum(wl.ke, wl.ks + logits_window(told_longest_row, keys)))
    report = verify_topk(out, *wl.args(), strict=True)
    return Check(dense_check_name(heads, top_k, variant, family, rows, keys, seed, told_longest_row),
                 report.ok and not poisoned and not repeat,
                 report.summary() + (f"; {poisoned} unwritten" if poisoned else "") + repeat)


def split_tail_rows(variant: Variant, tail_blocks: int = 3, sms: int | None = None) -> int:
    """Rows whose blocks fill one round of this GPU's CTAs (`sms`: its SM count, asked of device 0
    by default) and leave `tail_blocks` more: the tail a selector-warp kernel cuts into parts of
    their keys."""
    sms = sms if sms is not None else torch.cuda.get_device_properties(0).multi_processor_count
    return (sms + tail_blocks) * variant.rows


def pending_variant(variant: Variant, family: str, rows: int, keys: int, seed: int, **kw) -> Pending:
    return Pending(variant_check_name(variant, family, rows, keys, seed),
                   lambda: verify_variant(variant, family, rows, keys, seed, **kw))


def pending_split_tail(variant: Variant, family: str, sms: int) -> Pending:
    """The variant on a launch whose tail is split: random scores split its three tail blocks; rising
    scores and all_equal may overflow slabs and have their blocks rescanned instead."""
    rows = split_tail_rows(variant, sms=sms)

    def run() -> Check:
        c = verify_variant(variant, family, rows, 140_000, seed=7, sample_rows=48, tail_rows=True)
        split = family != "random" or c.stats.get("split_blocks") == 3
        return Check(c.what + " (split tail)", c.ok and split, c.detail)

    return Pending(variant_check_name(variant, family, rows, 140_000, 7) + " (split tail)", run)


def pending_dense(heads: int, top_k: int, family: str, rows: int, keys: int, seed: int,
                  variant: DenseVariant | None = None, told: int | None = None) -> Pending:
    return Pending(dense_check_name(heads, top_k, variant, family, rows, keys, seed, told),
                   lambda: verify_dense(heads, top_k, family, rows, keys, seed, variant=variant, told_longest_row=told))


def shipped_checks(families: Iterable[str], rows: int, keys: int, sms: int) -> list[Pending]:
    """Every variant a tuned table dispatches or a default names, and every dense variant: each on
    every family (all_equal overflows every slab: rescans), and each selector-warp variant on a
    launch whose tail is split (on a GPU of `sms` SMs)."""
    from .shipped import shipped_dense_variants, shipped_variants

    families = list(families)
    checks = []
    for v in shipped_variants():
        for i, fam in enumerate(families):
            checks.append(pending_variant(v, fam, rows, max(keys, 4 * v.top_k) if fam == "short_rows" else keys, 400 + i))
        if v.select_warps:
            checks += [pending_split_tail(v, fam, sms) for fam in ("random", "increasing", "all_equal")]
    for d in shipped_dense_variants():  # each top-k kernel: the histogram one (rows too long to hold), the short-row one
        short, long = min(keys, d.short_row_keys), max(keys, d.short_row_keys + 1000)
        for i, fam in enumerate(families):
            checks.append(pending_dense(d.heads, d.top_k, fam, rows, long, 500 + i, d))
            checks.append(pending_dense(d.heads, d.top_k, fam, rows, short, 600 + i, d, told=short))
            # windows of 2 top_k keys (half of a full row is its answer): the short-row kernel's
            # smallest CTA, where the k-th score lies among the row's crowd
            checks.append(pending_dense(d.heads, d.top_k, fam, rows, 2 * d.top_k, 650 + i, d, told=2 * d.top_k))
        # rows longer than the caller promised: answered from their first keys
        checks.append(pending_dense(d.heads, d.top_k, "random", rows, keys, 700, d, told=keys // 2))
    return checks


# A decode step's requests: off the block size, shorter than every top_k, empty, shorter than next_n,
# several tiles; with shared prefix blocks (prefix caching) and a shuffled block table.
PAGED_CONTEXTS = (9000, 130, 0, 3, 2049, 12000, 64, 4100)


def paged_check_name(variant: PagedVariant, family: str, contexts, parts: int, seed: int) -> str:
    return f"{variant.name} {family} contexts={','.join(map(str, contexts))} parts={parts} seed={seed}"


def verify_paged_variant(variant: PagedVariant, family: str, contexts, parts: int, seed: int) -> Check:
    """The paged kernel on a step laid out in pages, over a poisoned output, every row verified
    strictly, and run again with the other split (one part, or `parts`): the same bytes, or the check
    fails (each part's list is exact, so no split may change the answer)."""
    wl = paged_check_step(family, contexts, variant.next_n, variant.heads, variant.top_k, seed)
    run = lambda split: poisoned_run(wl, lambda out: launch_paged(variant, *wl.args(), out=out, parts=split))  # noqa: E731
    return paged_check(paged_check_name(variant, family, contexts, parts, seed), wl, run(parts),
                       run(1 if parts > 1 else 3))


def paged_check_step(family: str, contexts, next_n: int, heads: int, top_k: int, seed: int) -> PagedWorkload:
    """The decode step a paged check runs: `contexts` laid out in pages, two shared prefix blocks, slack
    in the block table."""
    return make_paged_workload(family, list(contexts), next_n, heads, top_k, seed=seed, device="cuda",
                               shared_prefix=2, table_slack=2)


def poisoned_run(wl: PagedWorkload, launch) -> torch.Tensor:
    """launch(out) into an output filled with POISON first, finished."""
    out = torch.full((wl.batch * wl.next_n, wl.top_k), POISON, dtype=torch.int32, device="cuda")
    launch(out)
    torch.cuda.synchronize()
    return out


def paged_check(name: str, wl: PagedWorkload, out: torch.Tensor, again: torch.Tensor) -> Check:
    """Passes where `out` is written whole, verifies strictly on every row, and `again` is its bytes."""
    repeat = repeat_detail(out, again)
    poisoned = int((out == POISON).sum())
    report = verify_paged(out, wl, strict=True)
    return Check(name, report.ok and not poisoned and not repeat,
                 report.summary() + (f"; {poisoned} unwritten" if poisoned else "") + repeat)


def pending_paged(variant: PagedVariant, family: str, contexts, parts: int, seed: int) -> Pending:
    return Pending(paged_check_name(variant, family, contexts, parts, seed),
                   lambda: verify_paged_variant(variant, family, contexts, parts, seed))


def dense_decode_check_name(heads: int, top_k: int, next_n: int, family: str, contexts, seed: int) -> str:
    return f"dense decode h{heads} k{top_k} n{next_n} {family} contexts={','.join(map(str, contexts))} seed={seed}"


def verify_dense_decode(heads: int, top_k: int, next_n: int, family: str, contexts, seed: int) -> Check:
    """The dense decode path (paged_mqa_topk's variant="dense", which the decode table's dispatch
    takes) on a step laid out in pages, over a poisoned output, every row verified strictly, and run
    again with the step's layout given: the same bytes."""
    wl = paged_check_step(family, contexts, next_n, heads, top_k, seed)
    run = lambda layout: poisoned_run(wl, lambda out: paged_mqa_topk(  # noqa: E731
        *wl.args(), variant="dense", validate=False, out=out, layout=layout))
    layout = decode_layout(wl.context_lens, wl.block_table, next_n, wl.kv_cache.shape[1], wl.kv_cache.shape[0])
    return paged_check(dense_decode_check_name(heads, top_k, next_n, family, contexts, seed), wl, run(None), run(layout))


def pending_dense_decode(heads: int, top_k: int, next_n: int, family: str, contexts, seed: int) -> Pending:
    return Pending(dense_decode_check_name(heads, top_k, next_n, family, contexts, seed),
                   lambda: verify_dense_decode(heads, top_k, next_n, family, contexts, seed))


def shipped_paged_checks(families: Iterable[str]) -> list[Pending]:
    """Every paged decode variant the runtime ships, on every family laid out in pages, split into
    four parts a request (against one part's bytes), and one long request split across the GPU; and
    the dense decode path (which the decode table may choose instead) at the same heads, top-k and
    next_n on the same steps."""
    from .shipped import shipped_paged_variants

    checks = []
    for v in shipped_paged_variants():
        checks += [pending_paged(v, fam, PAGED_CONTEXTS, 4, 800 + i) for i, fam in enumerate(families)]
        checks.append(pending_paged(v, "random", (200_000,), 48, 900))
        checks += [pending_dense_decode(v.heads, v.top_k, v.next_n, fam, PAGED_CONTEXTS, 800 + i)
                   for i, fam in enumerate(families)]
        checks.append(pending_dense_decode(v.heads, v.top_k, v.next_n, "random", (200_000,), 900))
    return checks


def shipped_plan(families: Iterable[str], rows: int, keys: int, sms: int, arch: str, decode: bool) -> list[Pending]:
    """`check --shipped`'s checks: the prefill ones (none with --decode), then on Hopper the decode ones (the
    paged kernel is Hopper's; other GPUs gather and take the prefill paths)."""
    families = list(families)
    plan = [] if decode else shipped_checks(families, rows, keys, sms)
    return plan + (shipped_paged_checks(families) if arch == "sm90a" else [])


def time_pair(variant: Variant, rows: int, keys: int, seed: int = 0) -> dict:
    wl = make_workload("random", rows, keys, variant.heads, variant.top_k, seed=seed, device="cuda")
    args = wl.args()
    fused_ms = median_ms(lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, wl.top_k))
    dense_ms = median_ms(lambda: dense_mqa_topk(*args, validate=False), reps=5)
    pairs = visible_pairs(wl.ks, wl.ke)
    return {"variant": variant.name, "rows": rows, "keys": keys, "fused_ms": fused_ms, "dense_ms": dense_ms,
            "speedup": dense_ms / fused_ms, "fused_tflops": scoring_tflops(pairs, variant.heads, fused_ms),
            "dense_tflops": scoring_tflops(pairs, variant.heads, dense_ms)}


def run_checks(pending: list[Pending], record, done: set[str], budget_s: float | None) -> list[Pending]:
    """Runs each pending check not in `done` through `record`, starting none after `budget_s`
    seconds; returns those not started."""
    t0 = time.monotonic()
    for i, c in enumerate(pending):
        if c.what in done:
            continue
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            return [c for c in pending[i:] if c.what not in done]
        record(c.run())
    return []


def main(args) -> int:
    if args.resume and not args.log:
        print("check: --resume reads the checks already passed from --log; give --log FILE")
        return 2
    if args.decode and not args.shipped:
        print("check: --decode narrows --shipped to its decode checks; give --shipped too")
        return 2
    if not torch.cuda.is_available():
        print("check needs a CUDA GPU (it runs kernels); without one, run the CPU tests (README).")
        return 2
    arch = arch_for_capability(*torch.cuda.get_device_capability())
    variants = [Variant.from_name(n) for n in args.variant] or [
        v for h in AXES["heads"] for k in AXES["top_k"] for v in default_variants(h, k, arch.name)]
    code = f"{code_digest()}.{paged_code_digest()}"  # (a log's passes stand while neither kernel code changed)
    done = passed_in_log(args.log, code) if args.resume else set()
    log = open(args.log, "a") if args.log else None
    checks: list[Check] = []
    t0 = time.time()

    def record(c: Check):
        checks.append(c)
        print(c.line(), flush=True)
        if log:
            log.write(json.dumps({"check": c.what, "ok": c.ok, "detail": c.detail, "code": code}) + "\n")
            log.flush()  # (a run killed at the machine's time limit keeps what it finished)

    families = args.family or list(FAMILIES)
    pending: list[Pending] = []
    if args.shipped:
        pending += shipped_plan(families, args.rows, args.keys, torch.cuda.get_device_properties(0).multi_processor_count,
                                arch.name, args.decode)
        variants = []
    for v in variants:
        for i, fam in enumerate(families):
            keys = args.keys if fam != "short_rows" else max(args.keys, 4 * v.top_k)
            pending.append(pending_variant(v, fam, args.rows, keys, 100 + i))
    if args.dense:
        for i, fam in enumerate(families):
            pending.append(pending_dense(32, 2048, fam, args.rows, args.keys, 200 + i))
    for spec in args.large:
        rows, keys = (int(x) for x in spec.split("x"))
        pending += [pending_variant(v, "random", rows, keys, 7, sample_rows=args.sample_rows) for v in variants]
    resumed = sum(c.what in done for c in pending)
    left = run_checks(pending, record, done, args.time_budget and args.time_budget * 60)
    for spec in args.time if not left else []:
        rows, keys = (int(x) for x in spec.split("x"))
        for v in variants:
            t = time_pair(v, rows, keys)
            print(f"TIME  {v.name} M={rows} N={keys}: fused {t['fused_ms']:.3f} ms ({t['fused_tflops']:.0f} TFLOP/s), "
                  f"dense {t['dense_ms']:.3f} ms ({t['dense_tflops']:.0f} TFLOP/s), speedup {t['speedup']:.2f}x", flush=True)
            if log:
                log.write(json.dumps({"timing": t, "gpu": torch.cuda.get_device_name()}) + "\n")
    failed = [c for c in checks if not c.ok]
    passed = len(checks) - len(failed) + resumed
    print(f"\n{passed}/{len(pending)} checks passed ({resumed} of them in {args.log} before this run, for code "
          f"{code}; {len(checks)} run now in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()})"
          if resumed else
          f"\n{passed}/{len(pending)} checks passed in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}")
    for c in failed:
        print(c.line())
    if left:
        print(f"{len(left)} checks not started within the time budget (next: {left[0].what}); "
              f"run the same command with --resume to finish them")
    return 1 if failed else 3 if left else 0
