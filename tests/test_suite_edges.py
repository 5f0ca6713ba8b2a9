"""Edges of a suite as a user writes and runs it: a suite that plans no scenario is an error,
never an absence (harness/inputs/scenarios/scenario.py expand, loading.py Catalog.pick); a gate
pattern that matches nothing is a typo refused like a change rule's; an axis value is read as
the file wrote it (`1.0` is not `true`); a command from a deleted working directory says so
(harness/contract/settings/project.py); and a failure whose narrowing is interrupted keeps
its verdict (harness/run/runner.py), so the report never says it did not run."""

from __future__ import annotations

import shutil

import pytest

from harness.cli import main
from harness.contract.roots import builtin_scenarios
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_catalog, load_scenarios
from harness.inputs.scenarios.scenario import select
from harness.run import runner
from harness.run.report import write_report
from harness.run.runner import RunContext, run_scenario
from tests.kit import outcomes, run_meta, verdict_of

SUITE = """model: tiny-llama
workloads: [{name: logits, kind: logprobs}]
"""
# every setting excluded by the file
ALL_EXCLUDED = (
    """suite: all-excluded
golden: {tp: 1}
matrix: {tp: [1, 2]}
exclude: [{tp: 1}, {tp: 2}]
gates: {pr: ["*"]}
"""
    + SUITE
)
# every row of the covering array breaks a rule of the axes (sp needs tp >= 2)
NO_ROW = (
    """suite: cov
golden: {tp: 1, sp: false}
matrix: {tp: [1], sp: [true]}
covering: 2
gates: {pr: ["*"]}
"""
    + SUITE
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project of llama-tiny.yaml and the files a test adds."""
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_HISTORY_DIR"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "scenarios").mkdir()
    shutil.copy(builtin_scenarios() / "llama-tiny.yaml", tmp_path / "scenarios")
    (tmp_path / "harness.toml").write_text('scenarios = "scenarios"\nbuiltin_suites = false\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def add_suite(project, name: str, text: str) -> None:
    (project / "scenarios" / f"{name}.yaml").write_text(text)


# ---- a suite that plans no scenario ----


def test_a_suite_that_plans_no_scenario_is_a_broken_suite_with_the_reason(project):
    add_suite(project, "all-excluded", ALL_EXCLUDED)
    add_suite(project, "cov", NO_ROW)
    broken = {b.suite: b for b in load_catalog().broken}
    assert set(broken) == {"all-excluded", "cov"}
    excluded = broken["all-excluded"].problem
    assert "all-excluded.yaml: invalid scenario file:\n  exclude: every setting of the matrix is ruled out" in excluded
    assert excluded.endswith("would plan no scenario: exclude {tp: 1}; exclude {tp: 2}")
    assert "covering: every setting" in broken["cov"].problem and "sp requires tp>=2" in broken["cov"].problem


def test_the_pr_gate_and_the_suite_by_name_pick_the_empty_suite_as_an_error(project):
    """Before, the suite vanished: the gate held llama-tiny's scenarios only and said OK."""
    add_suite(project, "all-excluded", ALL_EXCLUDED)
    chosen, broken = load_catalog().pick(None, "pr")
    assert chosen and {s.suite.suite for s in chosen} == {"llama-tiny"}
    assert [b.error_id for b in broken] == ["all-excluded/scenario-file"]
    assert [b.suite for b in load_catalog().pick(["all-excluded"], None)[1]] == ["all-excluded"]


def test_list_shows_the_empty_suite_as_an_error(project, capsys):
    add_suite(project, "cov", NO_ROW)
    assert main(["list"]) == 2
    out, err = capsys.readouterr()
    assert "llama-tiny/tp1-pp1 " in out and "cov/" not in out
    assert "cov.yaml: invalid scenario file:\n  covering: every setting of the matrix is ruled out" in err


@pytest.mark.parametrize("asked", [["cov"], ["--gate", "pr"]])
def test_a_run_that_could_pick_the_empty_suite_ends_in_its_error(project, asked, capsys):
    """llama-tiny is in no gate `pr` here: the run has only the empty suite's error (no ranks
    start), where it said "no gate 'pr'" or "no scenario matches 'cov'" or OK."""
    llama = project / "scenarios" / "llama-tiny.yaml"
    text = llama.read_text()
    llama.write_text(text[: text.index("gates:")] + "gates: {nightly: ['*']}\n")
    add_suite(project, "cov", NO_ROW)
    assert main(["run", *asked, "--run-id", "r"]) == 1
    run_dir = project / "reports" / "r"
    assert outcomes(run_dir) == {"cov/scenario-file": "error"}
    assert "sp requires tp>=2" in verdict_of(run_dir, "cov/scenario-file")["reason"]
    assert "not as expected: cov/scenario-file" in capsys.readouterr().err


# ---- a gate pattern that matches nothing ----


def test_a_gate_pattern_that_matches_nothing_is_refused(project):
    llama = project / "scenarios" / "llama-tiny.yaml"
    llama.write_text(llama.read_text().replace("tp2-pp2-sp]", "tp2-pp2-compille]"))
    (broken,) = load_catalog().broken
    assert "gates.pr: pattern 'tp2-pp2-compille' matches no scenario of suite 'llama-tiny'" in broken.problem
    assert "tp2-pp2-compile" in broken.problem  # the names it could have meant


# ---- axis values as the file wrote them ----


@pytest.mark.parametrize(
    ("matrix", "golden", "said"),
    [
        ("{tp: [1.0, 2]}", "{tp: 1}", "matrix: axis 'tp' value 1.0: tp is a parallel size, an integer >= 1"),
        ("{tp: [1], compile: [false, 1.0]}", "{tp: 1, compile: false}", "matrix: axis 'compile' value 1.0: compile is a switch"),
        ("{tp: [1, 2]}", "{tp: 1.0}", "golden.tp: 1.0 is not an axis value: write an integer, true or false"),
    ],
)
def test_a_float_axis_value_is_refused_as_written(project, matrix, golden, said):
    """YAML's 1.0 became `true` (refused naming "value True", or silently a switch on)."""
    add_suite(project, "floats", f"suite: floats\ngolden: {golden}\nmatrix: {matrix}\n" + SUITE)
    (broken,) = load_catalog().broken
    assert said in broken.problem and "True" not in broken.problem
    assert len(broken.problem.splitlines()) == 2  # one line: the type errors of the union said once


# ---- a deleted working directory ----


def test_a_command_from_a_deleted_working_directory_says_so(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    monkeypatch.setenv("PWD", str(gone))
    gone.rmdir()
    for command in (["list"], ["run", "llama-tiny/tp1-pp1"], ["durations"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"the working directory {gone} no longer exists" in err and "Traceback" not in err


# ---- Ctrl-C while a failure is narrowed ----


def test_an_interrupted_narrowing_keeps_the_failure_for_the_report(tmp_path, monkeypatch):
    scenario = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]
    monkeypatch.setattr(runner, "_run", lambda s, *rest, **kw: Verdict(s.id, "fail", "logprobs differ"))

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "minimal_interaction", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path, RunContext())
    written = verdict_of(tmp_path, scenario.id)
    assert written["verdict"] == "fail"
    assert written["reason"].startswith("logprobs differ; interaction: interrupted before it named")
    write_report(tmp_path, {"scenarios": [scenario.id], "interrupted": True})
    assert run_meta(tmp_path)["never_ran"] == [] and run_meta(tmp_path)["counts"] == {"fail": 1}


def test_a_narrowing_that_breaks_keeps_the_engines_failure_and_says_the_harness_fault(tmp_path, monkeypatch):
    """A harness fault while narrowing (not a trial's: those keep their value in) turned the
    engine's `fail` into the harness's `error`: the failure was lost."""
    scenario = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]
    monkeypatch.setattr(runner, "_run", lambda s, *rest, **kw: Verdict(s.id, "fail", "logprobs differ"))

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(runner, "minimal_interaction", broken)
    verdict = run_scenario(scenario, tmp_path, RunContext())
    assert verdict.verdict == "fail" and verdict_of(tmp_path, scenario.id)["verdict"] == "fail"
    assert verdict.reason == f"logprobs differ; interaction: {runner.NARROWING_FAILED}: RuntimeError: planted"
