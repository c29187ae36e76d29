"""Where does a paged decode step's time go? Clock marks from inside the paged kernel's launches.

The paged kernel (templates/paged_mqa_topk_wgmma.cu.j2) compiled with -DFUSED_MQA_TOPK_TIMELINE marks,
for every work item (one part of one request) of every CTA:

    wait (its Q tile) | scan (of which: compacting the candidate buffer) | publish (its rows' lists to
    the workspace, or with one part the answer) | merge (a CTA that merges the request's rows, its first
    row: the other parts' lists into its buffer) | answer (that CTA: the select and the ascending write; where
    the buffer holds more than top_k, split into the select's passes, its compaction, the ascending write)

and each CTA's first and last global-timer reading, so the launch's span is known beside its time by
CUDA graph replay (the difference: the launch itself and the workspace's memset node).

    python tools/paged_timeline.py build VARIANT... --out .ablate           # here: nvcc
    python tools/paged_timeline.py run VARIANT... --out .ablate --shape 1x8192 [--launches 5]  # GPU

A shape is BATCHxCONTEXT (random_step's data, generator/paged_bench.py); `--parts` forces the split.
Each answer is checked by the two-sided rule (generator.verify). Figures are medians over the
launches: per item for the scanning phases, and the merging CTA's phases for the request whose
answer came last (the step's critical path).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.cli import variant_tool_parser  # noqa: E402
from tools.timeline import GLOBAL_END, GLOBAL_START, MARKS, Marks, cmd_build  # noqa: E402

# The marks of an item: 0 wait, 1 Q ready, 2 scan end, 3 cycles compacting during the scan (a duration),
# 4 published (or answered, one part), 5 merged (a merging CTA's first row), 6 answered (a merging CTA's last row),
# 7 its answer's k-th entry found (the select's passes), 8 its buffer compacted to it (row 0 of the request).
WAIT, READY, SCANNED, COMPACTING, PUBLISHED, MERGED, ANSWERED, SELECTED, COMPACTED = range(9)


def launch_phases(marks) -> dict | None:
    """One launch's figures from its marks ([CTAS, EVENTS, MARKS] uint64, numpy), in microseconds at the
    CTAs' own clock rate; None where nothing was marked."""
    import numpy as np

    m = marks.astype(np.int64)
    starts, ends = m[:, 0, GLOBAL_START], m[:, 0, GLOBAL_END]
    ctas = np.nonzero(starts)[0]
    if not len(ctas):
        return None
    rates = []  # cycles a ns, per CTA: its clock span against its global-timer span
    items, merges = [], []
    for c in ctas:
        done = np.nonzero(m[c, :, PUBLISHED])[0]
        if not len(done):
            continue
        clocks = m[c][:, [i for i in range(MARKS) if i not in (GLOBAL_START, GLOBAL_END, COMPACTING)]]
        first, last = m[c, 0, WAIT], clocks.max()
        if ends[c] > starts[c]:
            rates.append((last - first) / (ends[c] - starts[c]))
        for e in done:
            x = m[c, e]
            items.append({"wait": x[READY] - x[WAIT], "scan": x[SCANNED] - x[READY], "compacting": x[COMPACTING],
                          "publish": x[PUBLISHED] - x[SCANNED]})
            if x[ANSWERED] and x[MERGED]:  # (a CTA that waited for the parts and found every row taken merged none)
                # the merging CTA's end on the global timer, from its clock (cycles after its first mark)
                end_ns = starts[c] + (x[ANSWERED] - first) / max(rates[-1] if rates else 1.0, 1e-9)
                merge = {"merge": x[MERGED] - x[PUBLISHED], "answer": x[ANSWERED] - x[MERGED], "end_ns": end_ns}
                if x[SELECTED] and x[COMPACTED]:
                    merge |= {"select": x[SELECTED] - x[MERGED], "compact": x[COMPACTED] - x[SELECTED],
                              "ascending": x[ANSWERED] - x[COMPACTED]}
                merges.append(merge)
    if not items:
        return None
    ghz = float(np.median(rates)) if rates else float("nan")
    us = lambda cycles: float(cycles) / ghz / 1e3  # noqa: E731
    out = {"ctas": len(ctas), "items": len(items), "ghz": ghz,
           "launch_us": float(ends[ctas].max() - starts[ctas].min()) / 1e3,
           "first_start_spread_us": float(starts[ctas].max() - starts[ctas].min()) / 1e3}
    for key in ("wait", "scan", "compacting", "publish"):
        out[key + "_us"] = us(statistics.median(i[key] for i in items))
    if merges:
        last = max(merges, key=lambda x: x["end_ns"])
        for key in ("merge", "answer", "select", "compact", "ascending"):
            if key in last:
                out[key + "_us"] = us(last[key])
    return out


def cmd_run(args) -> int:
    import torch

    from generator.paged_bench import graph_replay_ms, random_step
    from generator.timing import median_ms
    from generator.verify import verify_topk
    from runtime.build import spec_from_name
    from runtime.loader import PagedLibrary
    from runtime.paged import gather_paged, parts_for
    from tools.timeline import library_path

    for name in args.variant:
        variant = spec_from_name(name)
        path = library_path(args.out, variant.name)
        lib = PagedLibrary(variant, str(path))
        timeline = Marks(path)
        for spec in args.shape:
            batch, context = (int(x) for x in spec.split("x"))
            q, cache, weights, lens, table, top_k = random_step(batch, context, variant.next_n, variant.heads,
                                                                variant.top_k, block_size=variant.block_size)
            parts = args.parts or parts_for(batch, table.shape[1] * variant.block_size, top_k, q.device)
            out = torch.empty(batch * variant.next_n, top_k, dtype=torch.int32, device="cuda")
            workspace = torch.empty(lib.workspace_bytes(batch, parts), dtype=torch.uint8, device="cuda")

            def run():
                lib.launch(q.data_ptr(), cache.data_ptr(), weights.data_ptr(), lens.data_ptr(), table.data_ptr(),
                           out.data_ptr(), workspace.data_ptr(), batch, table.shape[1], cache.shape[0], parts,
                           torch.cuda.current_stream().cuda_stream)

            graph_ms = graph_replay_ms(run)
            eager_ms = median_ms(run, warmup=3, reps=20)
            launches = []
            for _ in range(args.launches):
                torch.cuda.synchronize()
                timeline.clear()
                run()
                torch.cuda.synchronize()
                if (phases := launch_phases(timeline.read())) is not None:
                    launches.append(phases)
            if not launches:
                print(f"{variant.name} {spec}: no marks (was the library built by `paged_timeline.py build`?)")
                continue
            k_fp8, k_scale, ks, ke = gather_paged(cache, lens, table, variant.next_n)
            report = verify_topk(out, q.reshape(-1, variant.heads, 128), (k_fp8, k_scale), weights, ks, ke, top_k)
            med = {k: statistics.median(x[k] for x in launches if k in x) for k in launches[0]}
            print(f"{variant.name} {batch}x{context} parts {parts}: graph {graph_ms * 1e3:.1f} us, eager "
                  f"{eager_ms * 1e3:.1f} us; launch span {med['launch_us']:.1f} us over {med['ctas']:.0f} CTAs "
                  f"(starts spread {med['first_start_spread_us']:.1f} us), {med['items']:.0f} items, "
                  f"{med['ghz']:.2f} GHz; " + f"verified: {report.summary()}", flush=True)
            print(f"  an item: wait {med['wait_us']:.1f} us, scan {med['scan_us']:.1f} (compacting "
                  f"{med['compacting_us']:.1f}), publish {med['publish_us']:.1f}" +
                  (f"; the last request's merge {med['merge_us']:.1f} us, answer {med['answer_us']:.1f}"
                   if "merge_us" in med else "") +
                  (f" (select {med['select_us']:.1f}, compact {med['compact_us']:.1f}, ascending write "
                   f"{med['ascending_us']:.1f})" if "select_us" in med else ""), flush=True)
    return 0


def main() -> int:
    p = variant_tool_parser(__doc__, ("build", "run"))
    p.add_argument("--launches", type=int, default=5, help="launches marked, reported as medians")
    p.add_argument("--parts", type=int, default=0, help="parts a request (default: the runtime's choice)")
    args = p.parse_args()
    return cmd_build(args) if args.what == "build" else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
