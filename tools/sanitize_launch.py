"""One small launch of a fused, dense or paged variant, verified, for running under compute-sanitizer:

    compute-sanitizer --tool racecheck python tools/sanitize_launch.py VARIANT [--rows 64] [--keys 70000]

A paged variant (paged_topk_...) runs a decode step of --rows requests of --keys tokens each, cut
into --parts parts a request (the parts' lists merged by the CTA that finishes a request's last). A
paged prefill build (a name ending _pb<block size>) runs the chunk with its keys in a paged cache.

tools/sanitize.py runs every tool over every kind of kernel this way. The default shape has fewer row
blocks than SMs, so a selector-warp (`_sw3`, `_sw7`) variant splits every block into parts of at
least kMinPartKeys (4 x kGateFloor: 2 parts at 70,000 keys and top-2048): the line printed says how
many blocks were split and how many rescanned (--family all_equal: every block).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch

    from generator.paged_workloads import make_paged_workload, page_chunk, verify_paged
    from generator.verify import verify_topk
    from generator.workloads import make_workload
    from runtime.build import spec_from_name
    from runtime.dense import dense_mqa_topk
    from runtime.dense_variant import DenseVariant
    from runtime.fused import launch_variant
    from runtime.page_layout import page_layout
    from runtime.paged import launch_paged
    from runtime.paged_prefill import run_paged_build
    from runtime.paged_variant import PagedVariant

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variant")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--keys", type=int, default=70_000)
    p.add_argument("--family", default="random")
    p.add_argument("--parts", type=int, default=4, help="parts a request (paged variants)")
    args = p.parse_args()
    v = spec_from_name(args.variant)
    if isinstance(v, PagedVariant):
        wl = make_paged_workload(args.family, [args.keys] * args.rows, v.next_n, v.heads, v.top_k, seed=3, device="cuda")
        out = launch_paged(v, *wl.args(), parts=args.parts)
        torch.cuda.synchronize()
        report = verify_paged(out, wl)
        print(v.name, f"{args.rows}x{args.keys} {args.family}, {args.parts} parts:", report.summary())
        return 0 if report.ok else 1
    wl = make_workload(args.family, args.rows, args.keys, v.heads, v.top_k, seed=3, device="cuda")
    stats: dict = {}
    if v.page_block_size:  # a paged prefill build: the chunk's keys in a paged cache, read through its layout
        chunk = page_chunk(wl, block_size=v.page_block_size, seed=4)
        layout = page_layout(chunk.block_table, chunk.cu_seq_lens, wl.ks, wl.ke, v.page_block_size,
                             chunk.kv_cache.shape[0])
        out = run_paged_build(v, wl.q, chunk.kv_cache, wl.weights, layout, v.top_k, args.keys)
    elif isinstance(v, DenseVariant):  # pieces of 4 MiB of logits: several launches of both kernels
        out = dense_mqa_topk(*wl.args(), logits_budget_bytes=4 << 20, variant=v)
    else:
        out = launch_variant(v, wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke, v.top_k, stats=stats)
    torch.cuda.synchronize()
    report = verify_topk(out, *wl.args())
    print(v.name, f"{args.rows}x{args.keys} {args.family}:", report.summary(),
          ", ".join(f"{k} {n}" for k, n in stats.items()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
