"""The history store and what a run says changed since the previous run of its gate."""

import json
import shutil

import pandas as pd
import pytest

from harness.run.report import write_report
from harness.run.report.history import load_history
from harness.run.report.regressions import BAND_ABS_FLOOR, noise_band
from tests.kit import harness_cli, summary
from tests.kit.handmade import crashed, failing, make_run, passing


def report(run_dir, history):
    return write_report(run_dir, history_dir=history)


def test_every_run_appends_its_rows_and_a_rebuild_replaces_them(tmp_path):
    history = tmp_path / "history"
    first = make_run(tmp_path, "r1", [passing("s/tp1-pp1"), failing("s/tp2-pp1")], started=1000)
    report(first, history)
    report(first, history)  # rebuilding the same run's report does not add rows
    report(make_run(tmp_path, "r2", [passing("s/tp1-pp1"), passing("s/tp2-pp1")], started=2000), history)

    rows = load_history(history)
    assert sorted(zip(rows["run_id"], rows["scenario"], rows["verdict"])) == [
        ("r1", "s/tp1-pp1", "pass"),
        ("r1", "s/tp2-pp1", "fail"),
        ("r2", "s/tp1-pp1", "pass"),
        ("r2", "s/tp2-pp1", "pass"),
    ]
    assert rows.loc[rows["verdict"] == "fail", "metric.logits.max_abs_dlogprob"].item() == pytest.approx(0.3)
    assert set(rows["torch"]) == {"2.13.0"} and set(rows["harness_commit"]) == {"abc1234"} and set(rows["gate"]) == {"pr"}
    assert rows["started"].dt.tz is not None
    csv = pd.read_csv(history / "history.csv")
    assert len(csv) == 4 and "metric.logits.max_abs_dlogprob" in csv.columns
    assert sorted(p.name for p in (history / "runs").iterdir()) == ["r1.parquet", "r2.parquet"]


def test_new_failure_fixed_and_still_failing(tmp_path):
    history = tmp_path / "history"
    report(
        make_run(
            tmp_path, "r1", [passing("s/tp1-pp1"), passing("s/tp2-pp1"), failing("s/tp1-pp2"), failing("s/tp2-pp2")], started=1000
        ),
        history,
    )
    second = make_run(
        tmp_path, "r2", [passing("s/tp1-pp1"), crashed("s/tp2-pp1"), passing("s/tp1-pp2"), failing("s/tp2-pp2")], started=2000
    )
    meta = report(second, history)

    changes = meta["changes"]
    assert changes["previous_run"] == "r1"
    assert changes["new_failures"] == ["s/tp2-pp1"]
    assert changes["fixed"] == ["s/tp1-pp2"]
    assert changes["still_failing"] == ["s/tp2-pp2"]
    summary = (second / "summary.md").read_text()
    top = summary[: summary.index("| scenario |")]  # the regressions come before the table
    assert "New failures (regressions): 1" in top
    assert "`s/tp2-pp1` crash (was pass in `r1`)" in top and "harness run s/tp2-pp1 --fault rank-raise@1" in top
    assert "Fixed: 1" in top and "Still failing: 1" in top


def test_first_run_of_a_gate_has_nothing_to_compare_with(tmp_path):
    meta = report(make_run(tmp_path, "r1", [failing("s/tp2-pp1")]), tmp_path / "history")
    assert meta["changes"]["previous_run"] is None
    assert "No earlier run of this gate" in (tmp_path / "r1" / "summary.md").read_text()


def test_previous_run_is_the_latest_earlier_run_of_the_same_gate(tmp_path):
    history = tmp_path / "history"
    report(make_run(tmp_path, "pr-old", [passing("s/tp2-pp1")], gate="pr", started=1000), history)
    report(make_run(tmp_path, "nightly", [failing("s/tp2-pp1")], gate="nightly", started=1500), history)
    report(make_run(tmp_path, "pr-later", [failing("s/tp2-pp1")], gate="pr", started=3000), history)
    # Rebuilt after a later run exists, a run still compares with what came before it.
    meta = report(make_run(tmp_path, "pr-new", [failing("s/tp2-pp1")], gate="pr", started=2000), history)
    assert meta["changes"]["previous_run"] == "pr-old"
    assert meta["changes"]["new_failures"] == ["s/tp2-pp1"]


def test_a_scenario_missing_from_the_previous_run_compares_with_its_last_result(tmp_path):
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp1-pp1"), passing("s/tp2-pp1")], started=1000), history)
    report(make_run(tmp_path, "r2", [passing("s/tp1-pp1")], started=2000), history)  # a shard without tp2-pp1
    meta = report(make_run(tmp_path, "r3", [passing("s/tp1-pp1"), crashed("s/tp2-pp1")], started=3000), history)
    assert meta["changes"]["previous_run"] == "r2" and meta["changes"]["new_failures"] == ["s/tp2-pp1"]


def test_metric_that_leaves_its_noise_band_while_passing_is_drift(tmp_path):
    history = tmp_path / "history"
    for i, value in enumerate([1.0e-5, 1.1e-5, 0.9e-5, 1.0e-5]):
        report(make_run(tmp_path, f"r{i}", [passing("s/tp2-pp1", value), passing("s/tp1-pp1", 0.0)], started=1000 + i), history)
    steady = report(
        make_run(tmp_path, "steady", [passing("s/tp2-pp1", 1.05e-5), passing("s/tp1-pp1", 0.0)], started=2000), history
    )
    assert steady["changes"]["drifted"] == []

    moved = report(make_run(tmp_path, "moved", [passing("s/tp2-pp1", 9e-5), passing("s/tp1-pp1", 0.0)], started=3000), history)
    (drift,) = moved["changes"]["drifted"]
    assert (
        drift["scenario"] == "s/tp2-pp1"
        and drift["metric"] == "logits.max_abs_dlogprob"
        and drift["value"] == pytest.approx(9e-5)
    )
    low, high = drift["band"]
    assert low < 1e-5 < high < 9e-5 and drift["samples"] == 5
    assert "Drifted beyond the noise band (still passing): 1" in (tmp_path / "moved" / "summary.md").read_text()


def test_failing_runs_do_not_widen_the_band_and_failures_are_not_drift(tmp_path):
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp2-pp1", 1e-5)], started=1000), history)
    report(make_run(tmp_path, "r2", [failing("s/tp2-pp1", 0.5)], started=2000), history)
    meta = report(make_run(tmp_path, "r3", [passing("s/tp2-pp1", 5e-5)], started=3000), history)
    assert meta["changes"]["fixed"] == ["s/tp2-pp1"]
    assert [d["metric"] for d in meta["changes"]["drifted"]] == ["logits.max_abs_dlogprob"]  # band from r1 only


def test_noise_band_is_robust_with_floors():
    band = noise_band(pd.Series([1.0, 1.0, 1.0, 1.0, 50.0]))  # one outlier does not widen it
    assert band.center == 1.0 and band.half_width == pytest.approx(0.1)  # the relative floor
    zero = noise_band(pd.Series([0.0, 0.0]))
    assert zero.half_width == BAND_ABS_FLOOR and zero.contains(5e-7) and not zero.contains(2e-6)
    spread = noise_band(pd.Series([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert spread.half_width == pytest.approx(4 * 1.4826 * 1.0)


def test_histories_of_several_machines_merge_by_copying(tmp_path):
    a, b = tmp_path / "a" / "history", tmp_path / "b" / "history"
    report(make_run(tmp_path / "a", "night-1", [passing("s/tp1-pp1")], gate="nightly", started=1000), a)
    report(make_run(tmp_path / "b", "night-2", [passing("s/tp1-pp1")], gate="nightly", started=2000), b)
    report(
        make_run(tmp_path / "b", "night-1", [passing("s/tp1-pp1")], gate="nightly", started=1000), b
    )  # the same run seen twice
    shutil.copytree(b, a / "machine-b")
    rows = load_history(a)
    assert sorted(rows["run_id"]) == ["night-1", "night-2"]


def test_a_merged_run_replaces_its_shards_in_the_history(tmp_path):
    history = tmp_path / "history"
    report(make_run(tmp_path, "shard0", [passing("s/tp1-pp1")], gate="nightly", started=1000), history)
    report(make_run(tmp_path, "shard1", [failing("s/tp2-pp1")], gate="nightly", started=1001), history)
    merged = make_run(
        tmp_path,
        "merged",
        [passing("s/tp1-pp1"), failing("s/tp2-pp1")],
        gate="nightly",
        started=1000,
        merged_from=["shard0", "shard1"],
    )
    meta = report(merged, history)
    assert meta["changes"]["previous_run"] is None  # its own shards are not its past
    assert sorted(load_history(history)["run_id"]) == ["merged", "merged"]
    assert json.loads((merged / "run.json").read_text())["changes"]["first_seen_failing"] == ["s/tp2-pp1"]


def test_an_unreadable_history_file_is_skipped_and_named_and_the_comparison_says_it_is_partial(tmp_path):
    """One bad history file must not stop a run: a half-copied file (histories merge by copying
    directories) used to stop every run with pyarrow's ArrowInvalid traceback before any
    scenario ran."""
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp1-pp1")], started=1000), history)
    runs = history / "runs"
    whole = (runs / "r1.parquet").read_bytes()
    (runs / "truncated-copy.parquet").write_bytes(whole[: len(whole) // 2])
    (runs / "empty.parquet").write_bytes(b"")
    pd.DataFrame({"x": [1]}).to_parquet(runs / "foreign.parquet")  # Parquet, but not the history's

    meta = report(make_run(tmp_path, "r2", [failing("s/tp1-pp1")], started=2000), history)
    skipped = sorted(meta["history_unreadable"])
    assert [s.split(" (")[0] for s in skipped] == [
        str(runs / n) for n in ("empty.parquet", "foreign.parquet", "truncated-copy.parquet")
    ]
    assert "not a history file: no column run_id" in skipped[1]
    assert "Parquet" in skipped[2]  # pyarrow's own words on what is wrong with it
    assert meta["changes"]["previous_run"] == "r1"  # the readable runs are still compared with
    assert meta["changes"]["new_failures"] == ["s/tp1-pp1"]
    text = (tmp_path / "r2" / "summary.md").read_text()
    assert "**History comparison partial:** 3 file(s)" in text and "truncated-copy.parquet" in text
    assert "History comparison partial" in (tmp_path / "r2" / "pr-comment.md").read_text()
    assert 'id="history-partial"' in (tmp_path / "r2" / "report.html").read_text()
    assert sorted(load_history(history)["run_id"]) == ["r1", "r2"]  # r2 was recorded beside the bad files


def test_a_history_file_of_another_schema_is_skipped_and_named(tmp_path):
    """A file with every column but `started` a string (written by another tool, or by hand)
    used to end every run and report on that store in a TypeError traceback from earlier_rows."""
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp1-pp1")], started=1000), history)
    runs = history / "runs"
    rows = pd.read_parquet(runs / "r1.parquet").assign(run_id="hand-made", started="2026-11-01 10:00")
    rows.to_parquet(runs / "hand-made.parquet", index=False)
    meta = report(make_run(tmp_path, "r2", [failing("s/tp1-pp1")], started=2000), history)
    (skipped,) = meta["history_unreadable"]
    assert skipped.startswith(f"{runs / 'hand-made.parquet'} (not the history's schema: started is ")
    assert skipped.endswith(", not a timestamp)")
    assert meta["changes"]["previous_run"] == "r1" and meta["changes"]["new_failures"] == ["s/tp1-pp1"]


@pytest.mark.parametrize(
    "column, value, problem",
    [
        ("metric.logits.max_abs_dlogprob", "big", "metric.logits.max_abs_dlogprob holds 'big', not a number"),
        ("duration_s", "3s", "duration_s holds '3s', not a number"),
        ("complete", "yes", "complete holds 'yes', not true/false"),
        ("as_expected", 1, "as_expected holds 1, not true/false"),
        ("gate", 7, "gate holds 7, not text"),
        ("verdict", "ok", "verdict holds 'ok', not a verdict"),
    ],
)
def test_a_history_file_with_a_bad_value_in_any_column_is_skipped_and_named(tmp_path, column, value, problem):
    """A string in `metric.logits.max_abs_dlogprob` stopped every run in
    trend_plot's `could not convert string to float`, and `complete: "yes"` was taken for a
    complete run. Every column read back from the history is checked as `started` was."""
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp1-pp1")], started=1000), history)
    runs = history / "runs"
    rows = pd.read_parquet(runs / "r1.parquet").assign(run_id="hand-made")
    rows[column] = pd.Series([value] * len(rows), dtype=object)
    rows.to_parquet(runs / "hand-made.parquet", index=False)
    meta = report(make_run(tmp_path, "r2", [failing("s/tp1-pp1")], started=2000), history)
    (skipped,) = meta["history_unreadable"]
    assert skipped == f"{runs / 'hand-made.parquet'} (not the history's schema: {problem})"
    assert meta["changes"]["previous_run"] == "r1" and meta["changes"]["new_failures"] == ["s/tp1-pp1"]
    assert sorted(set(load_history(history)["run_id"])) == ["r1", "r2"]


def test_a_metric_no_row_of_a_file_had_reads_as_numbers(tmp_path):
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp1-pp1")], started=1000), history)
    runs = history / "runs"
    rows = pd.read_parquet(runs / "r1.parquet").assign(run_id="r0")
    rows["metric.logits.kl"] = pd.Series([None] * len(rows), dtype=object)
    rows.to_parquet(runs / "r0.parquet", index=False)
    meta = report(make_run(tmp_path, "r2", [passing("s/tp1-pp1")], started=2000), history)
    assert meta["history_unreadable"] == []
    assert load_history(history)["metric.logits.kl"].dtype == float


def test_a_history_that_reads_whole_says_nothing_of_a_partial_comparison(tmp_path):
    history = tmp_path / "history"
    report(make_run(tmp_path, "r1", [passing("s/tp1-pp1")], started=1000), history)
    meta = report(make_run(tmp_path, "r2", [passing("s/tp1-pp1")], started=2000), history)
    assert meta["history_unreadable"] == []
    assert "partial" not in (tmp_path / "r2" / "summary.md").read_text()


@pytest.mark.e2e
def test_a_run_and_a_rebuilt_report_go_on_past_unreadable_history_files_and_name_each(tmp_path):
    """The same failures with the real commands, one real run for both kinds of bad file: a
    cut-off copy of a run's rows (`harness run` and `harness report` used to stop with
    ArrowInvalid) and a copy whose metric column holds a string (`harness run` ended in
    `ValueError: could not convert string to float` before any scenario ran, and `harness
    report` exited 2 without naming the file). The earlier run is hand-made: the history's
    files are what matter here, not how the first one was produced."""
    history = tmp_path / "history"
    report(make_run(tmp_path, "first", [passing("llama-tiny/tp1-pp1")], started=1000), history)
    runs = history / "runs"
    truncated = runs / "truncated-copy.parquet"
    truncated.write_bytes((runs / "first.parquet").read_bytes()[:1000])
    edited = runs / "edited.parquet"
    rows = pd.read_parquet(runs / "first.parquet").assign(run_id="edited")
    rows["metric.logits.max_abs_dlogprob"] = "big"
    rows.to_parquet(edited, index=False)
    string_metric = f"warning: history file skipped, unreadable: {edited} (not the history's schema: metric.logits.max_abs_dlogprob holds 'big'"
    second = harness_cli("run", "llama-tiny/tp1-pp1", "--report-dir", str(tmp_path), "--run-id", "second")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"harness: warning: history file skipped, unreadable: {truncated} (" in second.stderr
    assert f"harness: {string_metric}" in second.stderr
    assert "**History comparison partial:** 2 file(s)" in summary(tmp_path / "second")
    assert json.loads((tmp_path / "second" / "run.json").read_text()).get("finished")
    rebuilt = harness_cli("report", str(tmp_path / "second"))
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert f"harness report: warning: history file skipped, unreadable: {truncated} (" in rebuilt.stderr
    assert f"harness report: {string_metric}" in rebuilt.stderr
    assert sorted(set(load_history(history)["run_id"])) == ["first", "second"]
