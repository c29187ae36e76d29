"""`python -m generator report`: a tuned table's report drawn again, from the table and the optuna
storage of its run, with the fake measurer standing in for the GPU."""

import json

import pytest
from test_tuner import FakeMeasurer

from generator.__main__ import main
from generator.tune import Bucket, run
from generator.workers import storage_for
from runtime.table import table_path

BUCKETS = [Bucket(32, 512, 4096, 32768), Bucket(32, 512, 16384, 131072)]
TRIALS = 6


@pytest.fixture
def tuned(tmp_path):
    """A table tuned into a journal, its report and plots removed: (table, storage URL, the run's results)."""
    url = f"journal:{tmp_path / 'tune-journal.log'}"
    results = run(BUCKETS, FakeMeasurer(dense=1.2), "Fake GPU", "sm90a", trials=TRIALS, out_dir=tmp_path,
                  storage=storage_for(url), log=lambda s: None)
    for drawn in [*tmp_path.glob("*.png"), *tmp_path.glob("*.md")]:
        drawn.unlink()
    return table_path("Fake GPU", tmp_path), url, results


def study_rows(report: str) -> dict[str, list[str]]:
    """The cells of the report's "This run's studies" rows, by bucket name."""
    if "## This run's studies" not in report:
        return {}
    section = report.split("## This run's studies", 1)[1].split("\n\n")[1]
    return {cells[0]: cells[1:] for line in section.splitlines()[2:]
            if (cells := [c.strip() for c in line.strip("|").split("|")])}


def test_the_report_is_drawn_again_from_the_table_and_its_journal(tuned, capsys):
    table, url, results = tuned
    assert main(["report", str(table), "--storage", url]) == 0
    report = table.with_name("Fake_GPU-report.md")
    rows = study_rows(report.read_text())
    assert set(rows) == {b.name for b in BUCKETS}
    for r in results:  # the counts the run reported, read back from its studies
        sources = " / ".join(str(r.trial_sources[s]) for s in ("start", "table", "neighbour", "model"))
        assert rows[r.bucket.name][:5] == [str(r.trials), sources, str(r.rejected), str(r.failed), str(r.pruned)]
    out = capsys.readouterr().out
    assert str(report) in out and f"2 of 2 buckets' studies found in {url}" in out

    assert main(["report", str(table)]) == 0  # without the storage: the table's rows alone
    text = report.read_text()
    assert not study_rows(text) and all(f"| {b.rows} | {b.keys} |" in text for b in BUCKETS)


def test_the_studies_plots_are_drawn_where_matplotlib_is(tuned, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'report' extra): no plots to check")
    table, url, _ = tuned
    assert main(["report", str(table), "--storage", url]) == 0
    for b in BUCKETS:
        assert table.with_name(f"Fake_GPU-{b.name}-history.png").is_file()
    assert table.with_name("Fake_GPU-h32-k512.png").is_file()
    assert "2 with study plots" in capsys.readouterr().out


def test_an_entry_measured_for_other_code_gets_only_a_study_of_that_code(tuned, capsys):
    """The study is found by the entry's own digest: one of other kernels never borrows today's."""
    import optuna

    from generator.tune import study_name

    table, url, _ = tuned
    older, current = BUCKETS
    data = json.loads(table.read_text())
    for e in data["entries"]:
        if (e["rows"], e["keys"]) == (older.rows, older.keys):
            e["code"] = "0123456789abcdef"
    table.write_text(json.dumps(data))
    assert main(["report", str(table), "--storage", url]) == 0
    assert set(study_rows(table.with_name("Fake_GPU-report.md").read_text())) == {current.name}
    assert "1 of 2 buckets' studies found" in capsys.readouterr().out

    optuna.create_study(study_name=study_name("sm90a", older, "Fake GPU", code="0123456789abcdef"),
                        storage=storage_for(url))  # a study of that code, with no trials
    assert main(["report", str(table), "--storage", url]) == 0
    rows = study_rows(table.with_name("Fake_GPU-report.md").read_text())
    assert set(rows) == {older.name, current.name} and rows[older.name][0] == "0"


def test_a_rebuilt_bucket_splits_its_gpu_seconds_into_the_search_and_the_settling(tuned):
    from generator.report import stored_results

    table, url, _ = tuned
    data = json.loads(table.read_text())
    for e in data["entries"]:
        e["tune_s"] = 100.0
    table.write_text(json.dumps(data))
    workers = table.with_name("Workers.json")  # (a file of its own: a table rewritten at once may keep its mtime)
    workers.write_text(json.dumps({**data, "search_wall_s": 40}))
    for r in stored_results(table, storage_for(url)):
        trials = r.study.get_trials()
        span = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
        assert 0 < span < 100 and (r.search_s, r.settle_s) == (pytest.approx(span), pytest.approx(100 - span))
    # Where workers searched, an entry's seconds are its settling alone, as the run's own report had them.
    assert [(r.search_s, r.settle_s) for r in stored_results(workers, storage_for(url))] == [(0.0, 100.0)] * 2


def test_a_table_or_storage_that_cannot_be_read_is_an_error_naming_it(tuned, tmp_path, capsys):
    table, _, _ = tuned
    missing = tmp_path / "H100.json"
    assert main(["report", str(missing)]) == 2
    assert f"TABLE {missing}: no such file" in capsys.readouterr().err
    not_a_table = tmp_path / "notes.json"
    not_a_table.write_text('{"gpu": "H200"}')
    assert main(["report", str(not_a_table)]) == 2
    assert f"TABLE {not_a_table}: not a tuned table" in capsys.readouterr().err

    journal = tmp_path / "mistyped.log"
    assert main(["report", str(table), "--storage", f"journal:{journal}"]) == 2
    assert f"--storage journal:{journal}: cannot be opened" in capsys.readouterr().err
    assert not journal.exists()  # not made, empty, by looking for it
    assert main(["report", str(table), "--storage", "nodb://x"]) == 2
    assert "--storage nodb://x: cannot be opened" in capsys.readouterr().err
