"""The first failure first, end to end with real ranks on llama-tiny and its stored golden:
a PR gate starts with what failed in its history, prints the failing verdict with the
command that reproduces it as soon as it is known, and `--exitfirst` stops there: the
rest is listed as not run, the exit code says failure, no process is left."""

from __future__ import annotations

import json

import pytest

from harness.run.report import write_report
from tests.kit import ROOT, harness_cli, outcomes, run_meta, summary, survivors
from tests.kit.handmade import failing, make_run

pytestmark = pytest.mark.e2e
FAULT = "sp-residual-first-shard"  # fails only the SP scenario of the gate below
FAILED_BEFORE = "llama-tiny/tp2-pp1-sp"
GATE = ["llama-tiny/tp2-pp2", "llama-tiny/tp1-pp2", "llama-tiny/tp2-pp1-sp", "llama-tiny/tp1-pp1"]
LONG = "llama-evals/tp1-pp1-compile"


@pytest.fixture
def gate(tmp_path):
    """llama-tiny (its golden, its workloads) with a PR gate of four eager scenarios, and a
    history in which the SP one failed: without it, it would run third (largest first)."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    text = (ROOT / "scenarios" / "llama-tiny.yaml").read_text()
    pr = "  pr: [tp1-pp1, tp2-pp1, tp1-pp2, tp2-pp2, tp2-pp1-sp, tp1-pp1-compile, tp2-pp2-sp]"
    assert pr in text
    (scenarios / "llama-tiny.yaml").write_text(text.replace(pr, "  pr: [tp1-pp1, tp1-pp2, tp2-pp2, tp2-pp1-sp]"))
    reports = tmp_path / "reports"
    write_report(make_run(reports, "before", [failing(FAILED_BEFORE)], gate="pr"), history_dir=reports / "history")
    return scenarios, reports


def run_gate(gate, *args):
    scenarios, reports = gate
    return harness_cli(
        "run", "--gate", "pr", "--fault", FAULT, "--exitfirst", "--report-dir", str(reports), *args, scenarios=scenarios
    )


def test_the_gate_starts_with_its_last_failure_and_exitfirst_stops_there(gate):
    result = run_gate(gate, "--run-id", "x")
    run_dir = gate[1] / "x"
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # a failure, not "incomplete" (4)
    assert f"harness: first, 1 failed before: {FAILED_BEFORE}" in result.stdout
    finished = [line for line in result.stdout.splitlines() if "failures so far" in line]
    assert len(finished) == 1 and finished[0].startswith("[1/4 ") and f"{FAILED_BEFORE}: fail" in finished[0]
    after = result.stdout.split(finished[0], 1)[1].splitlines()
    assert after[1] == f"    reproduce: harness run {FAILED_BEFORE} --fault {FAULT}"  # the very next line
    not_run = [sid for sid in GATE if sid != FAILED_BEFORE]
    assert outcomes(run_dir) == {FAILED_BEFORE: "fail"}
    meta = run_meta(run_dir)
    assert meta["scenarios"][0] == FAILED_BEFORE and meta["order"] == {"failed before": [FAILED_BEFORE]}
    assert meta["stopped_after"] == FAILED_BEFORE and sorted(meta["never_ran"]) == sorted(not_run)
    assert f"--exitfirst stopped the run after {FAILED_BEFORE}; not run: " in result.stderr
    text = summary(run_dir)
    assert text.splitlines()[2].startswith("**FAILED**")
    assert "**Not run: 3 planned scenario(s)** (--exitfirst stopped the run after" in text
    assert all(f"`{sid}`" in text for sid in not_run)
    junit = (run_dir / "junit.xml").read_text()
    assert junit.count('<error message="not run: --exitfirst stopped the run after') == 3
    assert not survivors(run_dir)


def test_exitfirst_with_jobs_stops_the_scenario_running_beside_the_failure(gate, tmp_path):
    # beside the failing SP scenario runs the longest one: llama-evals' compile scenario
    # (over a minute of answers), which --exitfirst must stop in the middle
    scenarios, reports = gate
    text = (ROOT / "scenarios" / "llama-evals.yaml").read_text()
    pr = "  pr: [tp1-pp1-compile, tp2-pp2]"
    assert pr in text
    (scenarios / "llama-evals.yaml").write_text(text.replace(pr, "  pr: [tp1-pp1-compile]"))
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({LONG: 140.0}))
    result = run_gate(gate, "--run-id", "packed", "--jobs", "2", "--devices", "6", "--durations", str(durations))
    run_dir = reports / "packed"
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert [line.split("] ", 1)[1] for line in result.stdout.splitlines() if "] start " in line] == [
        f"start {FAILED_BEFORE}",
        f"start {LONG}",
    ]
    assert outcomes(run_dir) == {FAILED_BEFORE: "fail"}  # the long one was stopped, not judged
    meta = run_meta(run_dir)
    assert set(meta["never_ran"]) == set(GATE + [LONG]) - {FAILED_BEFORE} and meta["stopped_after"] == FAILED_BEFORE
    assert not survivors(run_dir)  # the long scenario's ranks were stopped with it
