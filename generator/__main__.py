"""python -m generator {list, render, build, check, bench, decode, tune, report, regret}"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .space import AXES, enumerate_space


def _fixed_axes(args) -> dict:
    return {a: getattr(args, a) for a in ("heads", "top_k", "arch") if getattr(args, a, None) is not None}


def cmd_list(args) -> int:
    shown = 0
    for v, reason in enumerate_space(**_fixed_axes(args)):
        if reason is None:
            print(v.name)
            shown += 1
        elif args.invalid:
            print(f"{v.name}  REJECTED: {reason}")
    print(f"# {shown} valid variants", file=sys.stderr)
    return 0


def valid_specs(names: list[str]) -> list | None:
    """The variants these names describe, or None after saying, per name, why it is not one the
    variant space accepts (nothing is sent to nvcc that would be rejected before compiling)."""
    from runtime.build import spec_from_name
    from runtime.dense_variant import DenseVariant, dense_rejection_reason
    from runtime.paged_variant import PagedVariant

    from .space import rejection_reason

    specs, bad = [], 0
    for name in names:
        try:
            spec = spec_from_name(name)
        except ValueError as e:
            print(f"{name}: {e} (python -m generator list prints valid names)", file=sys.stderr)
            bad += 1
            continue
        if isinstance(spec, DenseVariant):
            reason = dense_rejection_reason(spec)
        else:
            reason = spec.invalid_reason() if isinstance(spec, PagedVariant) else rejection_reason(spec)
        if reason:
            print(f"{name}: rejected: {reason}", file=sys.stderr)
            bad += 1
        specs.append(spec)
    return None if bad else specs


def cmd_render(args) -> int:
    from runtime.build import build, plan, write_source

    variants = valid_specs(args.names)
    if variants is None:
        return 2
    if args.compile:
        plans = build(variants)
    else:
        plans = [plan(v) for v in variants]
        for p in plans:
            write_source(p)
    for p in plans:
        print(p.source_text if args.stdout else p.source)
    return 0


def cmd_build(args) -> int:
    from runtime.build import build, cache_dir, resource_report

    from .resources import build_problems
    from .shipped import (
        shipped_dense_decode_builds,
        shipped_dense_variants,
        shipped_paged_prefill_variants,
        shipped_paged_variants,
        shipped_variants,
    )

    variants = valid_specs(args.names)
    if variants is None:
        return 2
    if args.shipped:
        variants += shipped_variants() + shipped_dense_variants() + shipped_paged_variants() + \
            shipped_paged_prefill_variants() + shipped_dense_decode_builds()
    if args.all:
        variants += [v for v, reason in enumerate_space(**_fixed_axes(args)) if reason is None]
    if args.candidates:
        from .tune import likely_candidates

        variants += likely_candidates(args.arch or "sm90a")
    if not variants:
        print("nothing to build: name variants, or pass --shipped, --candidates or --all", file=sys.stderr)
        return 2
    variants = sorted(set(variants), key=lambda v: v.name)
    print(f"# {len(variants)} variants; compiling those not in {cache_dir()} (nvcc, {args.jobs or os.cpu_count()} jobs)",
          file=sys.stderr, flush=True)
    plans = build(variants, jobs=args.jobs, progress=True)
    dirty, problems = 0, []
    for p in plans:
        if not p.log.exists():  # a cached library whose log was pruned (e.g. a cache carried to another machine)
            print(f"{p.variant.name}: cached, no build log (resources not reported)")
            continue
        for kernel in p.variant.kernels:
            r = resource_report(p, kernel)
            dirty += not r.clean
            print(f"{p.variant.name} {kernel}: regs={r.registers} stack={r.stack_bytes} "
                  f"spills={r.spill_store_bytes}/{r.spill_load_bytes}")
        problems += build_problems(p)
    print(f"# built {len(plans)} variants into {plans[0].library.parent.parent}; {dirty} kernels with stack or spills",
          file=sys.stderr)
    for problem in problems:  # (a candidate the tuner may time is not held to them: only what ships fails)
        print(f"# out of bounds (generator/resources.py): {problem}", file=sys.stderr)
    return 1 if problems and args.shipped else 0


def cmd_check(args) -> int:
    from .check import main

    return main(args)


def cmd_bench(args) -> int:
    from .bench import main

    if not args.sweep:  # (the sweep has its own defaults)
        args.heads = args.heads or [32]
        args.top_k = args.top_k or [2048]
    return main(args)


# The subcommands whose module holds both their options (add_arguments) and their run (main), by name:
# (module, help).
MODULE_COMMANDS = {
    "decode": ("paged_bench", "GPU: paged decode steps (runtime.paged_mqa_topk) timed eager and graph-replayed "
                              "against the HBM floor of the same run"),
    "tune": ("tune", "GPU: tune variants per shape bucket with optuna; write <GPU>.json to the user table "
                     "directory (FUSED_MQA_TOPK_TABLES)"),
    "report": ("report", "write a tuned table's report and plots again, from the table and the optuna storage of "
                         "its run (no GPU)"),
    "regret": ("regret", "how far the tuner's search lands from the best of a bucket's whole variant space: "
                         "--record times the space (GPU), --replay runs searches over it (any machine; "
                         "generator/regret.py)"),
}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m generator", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    def axes(p):
        p.add_argument("--heads", type=int, choices=AXES["heads"], help="only variants for this many heads")
        p.add_argument("--top-k", dest="top_k", type=int, choices=AXES["top_k"], help="only variants for this top-k")
        p.add_argument("--arch", choices=AXES["arch"], help="only variants for this compile target")

    p = sub.add_parser("list", help="the variant space: valid names (and rejected points with --invalid)")
    axes(p)
    p.add_argument("--invalid", action="store_true", help="also print rejected points and why")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("render", help="render variants' sources into the cache and print their paths")
    p.add_argument("names", nargs="+")
    p.add_argument("--stdout", action="store_true", help="print the source instead")
    p.add_argument("--compile", action="store_true", help="also compile")
    p.set_defaults(fn=cmd_render)

    p = sub.add_parser("build", help="compile variants with nvcc (no GPU needed); prints ptxas resources")
    p.add_argument("names", nargs="*")
    p.add_argument("--shipped", action="store_true", help="every variant the tuned tables and defaults name "
                                                           "(the paged decode defaults and the paged prefill builds included)")
    p.add_argument("--all", action="store_true", help="every valid point (narrow with --heads/--top-k/--arch)")
    p.add_argument("--candidates", action="store_true",
                   help="what a tuning study likely measures first (starting points, table choices, their "
                        "neighbours): build before `tune` on a machine with few cores")
    p.add_argument("-j", "--jobs", type=int, help="nvcc processes at a time (default: the CPU count)")
    axes(p)
    p.set_defaults(fn=cmd_build)

    p = sub.add_parser("check", help="GPU: verify variants against the reference on every family, and time them")
    p.add_argument("--variant", action="append", default=[], help="variant name (default: the default per heads/top_k)")
    p.add_argument("--family", action="append", help="workload family (default: all)")
    p.add_argument("--rows", type=int, default=384, help="rows of each family's chunk (default 384)")
    p.add_argument("--keys", type=int, default=12_288, help="keys of each family's chunk (default 12,288)")
    p.add_argument("--dense", action="store_true", help="also verify the dense path")
    p.add_argument("--shipped", action="store_true",
                   help="every variant a tuned table dispatches or a default names, and every dense variant, on "
                        "every family; selector-warp variants also on launches whose tail is split; on Hopper every "
                        "shipped paged decode variant on every family laid out in pages")
    p.add_argument("--decode", action="store_true",
                   help="with --shipped: only its decode checks (the paged decode variants and the dense decode path, "
                        "on Hopper), for a change that touches decode alone")
    p.add_argument("--large", action="append", default=[], metavar="MxN", help="spot-check a large causal chunk")
    p.add_argument("--sample-rows", type=int, default=48, help="rows verified in a --large chunk")
    p.add_argument("--time", action="append", default=[], metavar="MxN", help="time fused vs dense on a causal chunk")
    p.add_argument("--log", help="append JSON lines here")
    p.add_argument("--resume", action="store_true",
                   help="skip the checks --log already records as passed for this kernel code (finishes a run "
                        "cut short by a time limit)")
    p.add_argument("--time-budget", type=float, metavar="MIN",
                   help="start no check after this many minutes (exit status 3 if some were left: --resume runs them)")
    p.set_defaults(fn=cmd_check)

    from .bench import add_arguments as bench_arguments

    p = sub.add_parser("bench", help="GPU: _scaled_mm rate, dense logits and top-k, fused variants, timed in one run")
    bench_arguments(p)
    p.set_defaults(fn=cmd_bench)

    for name, (module_name, text) in MODULE_COMMANDS.items():
        module = importlib.import_module(f".{module_name}", __package__)
        p = sub.add_parser(name, help=text)
        module.add_arguments(p)
        p.set_defaults(fn=module.main)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `python -m generator list | head`: the reader left; so do we, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
