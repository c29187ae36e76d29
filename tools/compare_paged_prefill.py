"""Prefill from the paged cache against the gathered keys, timed in one call (GPU).

For each chunk (ROWSxKEYS, or ROWSxKEYSxREQUESTS for that many equal requests packed; random data,
generator.workloads.packed_workload) at each --heads and --top-k, the keys are written into a paged
cache (block size --block-size, blocks shuffled) and the tuned table's variant for the chunk (the one
fused_mqa_topk runs on the gathered keys: a fused variant, or our dense kernels) is timed two ways in rounds that alternate them: on the
gathered k_fp8 / k_scale, and as its paged build reading the cache (runtime.paged_prefill, its page
layout made once outside the timing, as a server makes it once a chunk for every indexer layer). The
two answers must be the same bytes. Also timed once: making the layout, and gathering the keys with
runtime.paged.gather_requests (torch indexing: a stand-in for vLLM's cp_gather_indexer_k_quant_cache,
not that kernel). Kernel times hide the host's launch (generator.timing, hide_launch). A line per
chunk, and JSON lines to --log.

    python3 tools/compare_paged_prefill.py --chunk 16384x32768 --chunk 16384x131072 --chunk 16384x65536x4 \\
        --heads 32 --heads 64 --top-k 2048 [--rounds 3] [--log paged-prefill.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunk", action="append", required=True, metavar="ROWSxKEYS[xREQUESTS]")
    p.add_argument("--heads", type=int, action="append")
    p.add_argument("--top-k", type=int, action="append")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--log", type=Path)
    args = p.parse_args()

    import torch

    from generator.paged_workloads import page_chunk
    from generator.timing import median_ms
    from generator.workloads import packed_workload
    from runtime.contract import Problem
    from runtime.dense import run_dense
    from runtime.dense_kernels import dense_variant_for
    from runtime.dense_variant import DenseVariant
    from runtime.dispatch import choose_variant
    from runtime.fused import launch_variant
    from runtime.paged import gather_requests
    from runtime.paged_prefill import page_layout, run_paged_build
    from runtime.variant import Variant

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to time")
        return 1
    log = args.log.open("a") if args.log else None
    for heads in args.heads or [64]:
        for top_k in args.top_k or [2048]:
            for spec in args.chunk:
                rows, keys, *more = (int(x) for x in spec.split("x"))
                requests = more[0] if more else 1
                wl = packed_workload(rows, keys, heads, top_k, requests=requests, seed=1, device="cuda")
                problem = Problem(rows=rows, keys=keys, heads=heads, top_k=top_k, device=wl.q.device,
                                  visible_keys=keys // requests)
                longest = keys // requests
                variant = choose_variant(problem) or dense_variant_for(wl.q.device, heads, top_k, longest)
                if variant is None or (isinstance(variant, Variant) and variant.mma != "wgmma"):
                    print(f"H={heads} top-{top_k} {spec}: the table's choice is {variant and variant.name}"
                          ": no paged build (the paged entry gathers there)")
                    continue
                paged = variant.paged_build(args.block_size)
                chunk = page_chunk(wl, block_size=args.block_size, seed=2)
                cache = chunk.kv_cache
                make_layout = lambda: page_layout(chunk.block_table, chunk.cu_seq_lens, wl.ks, wl.ke,  # noqa: E731
                                                  cache.shape[1], cache.shape[0])
                layout = make_layout()
                out_g = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
                out_p = torch.empty_like(out_g)
                if isinstance(variant, DenseVariant):
                    gathered = lambda: run_dense(wl.q, wl.k_fp8, wl.k_scale, wl.weights, wl.ks, wl.ke,  # noqa: E731
                                                 top_k, longest, variant=variant, out=out_g)
                else:
                    gathered = lambda: launch_variant(variant, wl.q, wl.k_fp8, wl.k_scale, wl.weights,  # noqa: E731
                                                      wl.ks, wl.ke, top_k, out=out_g)
                from_pages = lambda: run_paged_build(paged, wl.q, cache, wl.weights, layout, top_k,  # noqa: E731
                                                     longest, out=out_p)
                gathered(), from_pages()
                torch.cuda.synchronize()
                same = bool(torch.equal(out_g, out_p))
                times = {"gathered": [], "paged": []}
                for _ in range(args.rounds):
                    times["gathered"].append(median_ms(gathered, reps=args.reps, hide_launch=True))
                    times["paged"].append(median_ms(from_pages, reps=args.reps, hide_launch=True))
                g, pg = statistics.median(times["gathered"]), statistics.median(times["paged"])
                layout_ms = median_ms(make_layout, reps=args.reps)
                lens = chunk.cu_seq_lens[1:] - chunk.cu_seq_lens[:-1]
                gather_ms = median_ms(lambda: gather_requests(cache, lens, chunk.block_table), reps=args.reps)
                record = {"heads": heads, "top_k": top_k, "rows": rows, "keys": keys, "requests": requests,
                          "block_size": args.block_size, "variant": variant.name, "gathered_ms": g, "paged_ms": pg,
                          "paged_over_gathered": pg / g, "rounds": times, "layout_ms": layout_ms,
                          "torch_gather_ms": gather_ms, "same_bytes": same, "device": torch.cuda.get_device_name()}
                print(f"H={heads} top-{top_k} {spec}: gathered {g:.3f} ms, paged {pg:.3f} ms ({pg / g:.3f}x), "
                      f"layout {layout_ms * 1e3:.0f} us, torch gather {gather_ms:.3f} ms; "
                      f"{'same bytes' if same else 'ANSWERS DIFFER'} ({variant.name})", flush=True)
                if log:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                if not same:
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
