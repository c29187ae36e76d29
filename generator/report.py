"""The tuner's report, written next to its table: <GPU>-report.md, and plots where matplotlib is.

Per bucket: the variant chosen, fused against dense with their spreads, the path taken, how many
candidates the study measured (and how many it rejected, failed or stopped early), the GPU seconds
it took, and when and for which kernel code it was measured; for this run's studies, where the time
went. With matplotlib: fused and dense ms against keys per heads and top-k, and per bucket tuned in
this run optuna's optimisation history and parameter importances.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from runtime.table import load_table, table_meta


def write_report(table: Path, results: list) -> Path:
    """Writes the report of `table` (every entry) and of `results` (this run's BucketResults)."""
    entries = sorted(load_table(table) or [], key=lambda e: (e.heads, e.top_k, e.requests, e.keys, e.rows))
    meta = table_meta(table)
    out = table.with_name(table.stem + "-report.md")
    lines = [f"# {meta.get('identity', table.stem)}: tuned table report", "",
             f"GPU: {meta.get('gpu', '?')}, {meta.get('sms', '?')} SMs, driver {meta.get('driver', '?')}, power limit "
             f"{meta.get('power_limit_w', '?')} W; torch {meta.get('torch', '?')}, CUDA {meta.get('cuda', '?')}; "
             f"kernel code {meta.get('code', '?')}; updated {meta.get('updated', '?')}.", "",
             f"Command: `{meta.get('command', '?')}`", ""]
    if len(meta.get("history") or []) > 1:  # the runs that wrote the entries, oldest first
        lines += ["Runs that wrote this table:", ""] + [f"- {h.get('started') or '?'}: `{h['command']}`"
                                                        for h in meta["history"]] + [""]
    plots = _plots(table, entries, results)
    for heads, top_k in sorted({(e.heads, e.top_k) for e in entries}):
        lines += [f"## H = {heads}, top-{top_k}", "",
                  "| rows | keys | variant | fused ms | dense ms | path | speed-up | trials | GPU s | measured | code |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for e in (e for e in entries if (e.heads, e.top_k) == (heads, top_k)):
            keys = f"{e.keys} ({e.requests} requests)" if e.requests > 1 else e.keys
            lines.append(f"| {e.rows} | {keys} | `{e.variant}` | {e.fused_ms:.3f} +-{e.fused_spread:.1%} | "
                         f"{e.dense_ms:.3f} +-{e.dense_spread:.1%} | {e.use} | {e.dense_ms / e.fused_ms:.2f}x | "
                         f"{e.trials or '-'} | {f'{e.tune_s:.0f}' if e.tune_s else '-'} | {e.measured or '-'} | {e.code or '-'} |")
        lines += [f"![fused and dense, H = {heads}, top-{top_k}]({p.name})" for p in plots.get((heads, top_k), [])]
        lines.append("")
    if results:
        lines += ["## This run's studies", "",
                  "| bucket | measured | rejected | failed | stopped early | search s | settle s | plots |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in results:
            names = " ".join(f"[{p.stem.rsplit('-', 1)[-1]}]({p.name})" for p in plots.get(r.bucket.name, []))
            lines.append(f"| {r.bucket.name} | {r.trials} | {r.rejected} | {r.failed} | {r.pruned} | "
                         f"{r.search_s:.0f} | {r.settle_s:.0f} | {names or '-'} |")
        lines += ["", time_summary(results, meta.get("search_wall_s")), ""]
    if not plots:
        lines.append("(No plots: matplotlib is not installed; `pip install matplotlib` and tune again.)")
    out.write_text("\n".join(lines) + "\n")
    return out


def time_summary(results: list, workers_wall_s: float | None) -> str:
    """Where this run's GPU time went: in total, and the buckets that took most (what to cut when a
    run must fit a time limit). workers_wall_s: the search's wall time where workers searched (the
    table header's search_wall_s, which only such a run writes)."""
    total = sum(r.search_s + r.settle_s for r in results)
    slowest = sorted(results, key=lambda r: r.search_s + r.settle_s, reverse=True)[:3]
    most = ", ".join(f"{r.bucket.name} {r.search_s + r.settle_s:.0f} s" for r in slowest)
    workers = f" after the workers' search of {workers_wall_s:.0f} s" if workers_wall_s else ""
    return f"This run spent {total:.0f} s on {len(results)} buckets{workers}; most: {most}."


def _plots(table: Path, entries, results) -> dict:
    """PNG files by (heads, top_k) and by bucket name; {} without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    made: dict = {}
    for heads, top_k in sorted({(e.heads, e.top_k) for e in entries}):
        fig, ax = plt.subplots(figsize=(6, 4))
        for rows in sorted({e.rows for e in entries if (e.heads, e.top_k) == (heads, top_k)}):
            pts = sorted((e.keys, e.fused_ms, e.dense_ms) for e in entries
                         if (e.heads, e.top_k, e.rows, e.requests) == (heads, top_k, rows, 1))
            if not pts:
                continue
            keys = [p[0] for p in pts]
            line = ax.plot(keys, [p[1] for p in pts], "o-", label=f"fused, {rows} rows")[0]
            ax.plot(keys, [p[2] for p in pts], "x--", color=line.get_color(), label=f"dense, {rows} rows")
        ax.set(xscale="log", yscale="log", xlabel="keys (single-request chunks)", ylabel="ms", title=f"H = {heads}, top-{top_k}")
        ax.legend(fontsize=6)
        path = table.with_name(f"{table.stem}-h{heads}-k{top_k}.png")
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        made[(heads, top_k)] = [path]
    import optuna
    from optuna.visualization import matplotlib as optuna_plots

    for r in results:
        if getattr(r, "study", None) is None:
            continue
        made[r.bucket.name] = []
        for kind, plot in (("history", optuna_plots.plot_optimization_history),
                           ("importances", optuna_plots.plot_param_importances)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    ax = plot(r.study)
            except (ValueError, RuntimeError):  # too few complete trials for importances
                continue
            path = table.with_name(f"{table.stem}-{r.bucket.name}-{kind}.png")
            ax.figure.savefig(path, dpi=110, bbox_inches="tight")
            plt.close(ax.figure)
            made[r.bucket.name].append(path)
    return made
