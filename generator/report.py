"""The tuner's report, written next to its table: <GPU>-report.md, and plots where matplotlib is.

Per bucket: the variant chosen, fused against dense with their spreads, the path taken, how many
candidates the study measured (and how many it rejected, failed or stopped early), the GPU seconds
it took, and when and for which kernel code it was measured; for this run's studies, where the time
went. With matplotlib: fused and dense ms against keys per heads and top-k, and per bucket tuned in
this run optuna's optimisation history and parameter importances.

`python -m generator report TABLE [--storage URL]` writes them again from a table and the optuna
storage its run kept the studies in, without a GPU: on a machine with matplotlib, after a run on one
without it, or whose time was too scarce to spend on plots.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from runtime.table import load_table, table_meta

from .design import SOURCES, describe_sources, total_sources
from .workers import JOURNAL, storage_for

SQLITE = "sqlite:///"


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
                  "| rows | keys | variant | fused ms | dense ms | path | speed-up | trials (start / table / neighbour / "
                  "model) | GPU s | measured | code |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for e in (e for e in entries if (e.heads, e.top_k) == (heads, top_k)):
            keys = f"{e.keys} ({e.requests} requests)" if e.requests > 1 else e.keys
            lines.append(f"| {e.rows} | {keys} | `{e.variant}` | {e.fused_ms:.3f} +-{e.fused_spread:.1%} | "
                         f"{e.dense_ms:.3f} +-{e.dense_spread:.1%} | {e.use} | {e.dense_ms / e.fused_ms:.2f}x | "
                         f"{e.trials or '-'}{f' ({_sources_cell(e.trial_sources)})' if e.trial_sources else ''} | "
                         f"{f'{e.tune_s:.0f}' if e.tune_s else '-'} | {e.measured or '-'} | {e.code or '-'} |")
        lines += [f"![fused and dense, H = {heads}, top-{top_k}]({p.name})" for p in plots.get((heads, top_k), [])]
        lines.append("")
    if results:
        lines += ["## This run's studies", "",
                  "| bucket | measured | from: start / table / neighbour / model | rejected | failed | stopped early "
                  "| search s | settle s | plots |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in results:
            names = " ".join(f"[{p.stem.rsplit('-', 1)[-1]}]({p.name})" for p in plots.get(r.bucket.name, []))
            lines.append(f"| {r.bucket.name} | {r.trials} | {_sources_cell(r.trial_sources)} | {r.rejected} | "
                         f"{r.failed} | {r.pruned} | {r.search_s:.0f} | {r.settle_s:.0f} | {names or '-'} |")
        lines += ["", f"This run's measured trials came from: {describe_sources(total_sources(results))}.",
                  "", time_summary(results, meta.get("search_wall_s")), ""]
    if not plots:
        lines.append(f"(No plots: matplotlib is not installed; `pip install matplotlib`, then `python -m generator "
                     f"report {table.name} [--storage URL]` draws them.)")
    out.write_text("\n".join(lines) + "\n")
    return out


def _sources_cell(sources: dict | None) -> str:
    return " / ".join(str(sources.get(s, 0)) for s in SOURCES) if sources else "-"


def time_summary(results: list, workers_wall_s: float | None) -> str:
    """Where this run's GPU time went: in total, and the buckets that took most (what to cut when a
    run must fit a time limit). workers_wall_s: the search's wall time where workers searched (the
    table header's search_wall_s, which only such a run writes)."""
    total = sum(r.search_s + r.settle_s for r in results)
    slowest = sorted(results, key=lambda r: r.search_s + r.settle_s, reverse=True)[:3]
    most = ", ".join(f"{r.bucket.name} {r.search_s + r.settle_s:.0f} s" for r in slowest)
    workers = f" after the workers' search of {workers_wall_s:.0f} s" if workers_wall_s else ""
    return f"This run spent {total:.0f} s on {len(results)} buckets{workers}; most: {most}."


def stored_results(table: Path, storage) -> list:
    """A BucketResult per entry of `table` whose study `storage` holds: what write_report lists under
    this run's studies and draws optuna's plots from. A study is found by the entry's own code digest
    (and the table's arch and GPU identity), so an entry measured for other kernels never shows a
    study of today's code; an entry without a digest has none."""
    import optuna

    from runtime.variant import Variant

    from .search import trial_sources
    from .study import Bucket, BucketResult, Comparison, counts, study_name

    meta = table_meta(table)
    arch, gpu = meta.get("arch"), meta.get("identity")
    stored = set(optuna.get_all_study_names(storage))  # (load_study raises on any other name)
    # Where workers searched, an entry's tune_s is its settling alone and tune counted no search here
    # (Entry.tune_s): the summary names the workers' wall time instead.
    workers_searched = bool(meta.get("search_wall_s"))
    results = []
    for e in sorted(load_table(table) or [], key=lambda e: e.bucket):
        bucket = Bucket.of(e)
        name = study_name(arch, bucket, gpu, e.code) if arch and gpu and e.code else None
        if name not in stored:
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        c = counts(study)
        search_s = 0.0 if workers_searched else _trials_span_s(study)
        results.append(BucketResult(bucket, Variant.from_name(e.variant),
                                    Comparison(e.fused_ms, e.fused_spread, e.dense_ms, e.dense_spread),
                                    c["measured"], c["rejected"], c["failed"], c["pruned"], study,
                                    search_s=search_s, settle_s=max(0.0, e.tune_s - search_s),
                                    trial_sources=trial_sources(study)))
    return results


def _trials_span_s(study) -> float:
    """Seconds from the study's first trial's start to its last one's end."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.datetime_start and t.datetime_complete]
    if not trials:
        return 0.0
    return (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()


def existing_storage(url: str):
    """The optuna storage `url` names (generator.workers.storage_for), where it exists already: a
    mistyped journal or SQLite path would otherwise become a new, empty file, and the report one
    without studies. Raises where it cannot be read."""
    import optuna

    path = url[len(JOURNAL):] if url.startswith(JOURNAL) else url[len(SQLITE):] if url.startswith(SQLITE) else None
    if path is not None and not Path(path).is_file():
        raise FileNotFoundError(f"no such file: {path}")
    storage = storage_for(url)  # (an RDBStorage or a JournalStorage: one connection for every study)
    optuna.get_all_study_names(storage)  # (what shows that it reads)
    return storage


def add_arguments(p) -> None:
    p.add_argument("table", type=Path, metavar="TABLE", help="a table `tune` wrote (<GPU>.json); the report and "
                                                             "plots are written beside it")
    p.add_argument("--storage", metavar="URL", help="the optuna storage its tuning run kept the studies in (`tune "
                                                    "--storage`: journal:PATH, sqlite:///tune.db, ...): each bucket "
                                                    "whose study it holds gets its study's counts and plots")


def main(args) -> int:
    table: Path = args.table
    if not table.is_file():
        print(f"TABLE {table}: {'not a file' if table.exists() else 'no such file'} (a <GPU>.json that `python -m "
              f"generator tune` wrote)", file=sys.stderr)
        return 2
    try:
        entries = load_table(table)
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # not JSON, or not a table's fields
        print(f"TABLE {table}: not a tuned table ({type(err).__name__}: {err})", file=sys.stderr)
        return 2
    results = []
    if args.storage:
        try:
            storage = existing_storage(args.storage)
        except Exception as err:  # each storage backend and database driver fails in its own way
            print(f"--storage {args.storage}: cannot be opened ({type(err).__name__}: {err})", file=sys.stderr)
            return 2
        results = stored_results(table, storage)
    out = write_report(table, results)
    text = out.read_text()
    plotted = sum(f"({table.stem}-{r.bucket.name}-history.png)" in text for r in results)  # (linked: drawn now)
    print(f"report: {out}")
    if args.storage:
        print(f"{len(results)} of {len(entries)} buckets' studies found in {args.storage}; {plotted} with study plots")
    else:
        print(f"no --storage: the table's {len(entries)} buckets and the summary plots, no study plots")
    return 0


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
