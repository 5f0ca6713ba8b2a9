"""Fault switches are checked before launch, by the engine that owns them: an unknown
name, a malformed parameter (`rank-raise@x`) or a rank the scenario does not have
(`rank-raise@9` on one rank) is an `error` that lists the engine's faults, never a
`crash` of rank 0 (the engine choking on its own input) or a clean run that passes."""

from __future__ import annotations

import json

import pytest

from harness.contract import rundir
from harness.engines import get_engine
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.scenarios.schema import ScenarioError
from tests.kit import harness_cli
from tests.kit.present import present

ONE_RANK = {"tp": 1, "pp": 1, "sp": False, "compile": False}
FOUR_RANKS = {"tp": 2, "pp": 2, "sp": False, "compile": False}


@pytest.mark.parametrize(
    "faults, problem",
    [
        (["nosuch"], "unknown fault 'nosuch'"),
        (["rank-raise@x"], "fault 'rank-raise' needs a global rank: rank-raise@N"),
        (["rank-raise"], "fault 'rank-raise' needs a global rank: rank-raise@N"),
        (["pp-buffer-missing-key@1"], "takes no parameter"),
        (["rank-raise@9"], "rank-raise@9 targets global rank 9, but these settings have 1 rank (0..0)"),
    ],
)
def test_reference_engine_rejects_bad_faults_listing_its_faults(faults, problem):
    found = get_engine("reference").fault_problem(faults, ONE_RANK)
    assert found and problem in found
    assert "rank-raise@N" in found and "pp-buffer-missing-key" in found  # the known faults


def test_reference_engine_accepts_faults_that_can_act():
    engine = get_engine("reference")
    assert engine.fault_problem(["rank-raise@3", "pp-buffer-missing-key"], FOUR_RANKS) is None
    assert engine.fault_problem([], ONE_RANK) is None
    assert engine.fault_problem(["rank-raise@9"]) is None  # no settings: names and parameters only


def test_vllm_engine_checks_its_faults_against_the_pp_ranks():
    engine = get_engine("vllm")
    assert engine.fault_problem(["pp-drop-residual@1"], {"tp": 1, "pp": 2}) is None
    problem = engine.fault_problem(["pp-drop-residual@1"], {"tp": 2, "pp": 1})
    assert problem is not None
    assert "pp-drop-residual@1 targets PP rank 1, but these settings have 1 PP rank" in problem
    assert "worker-exit@<pp rank>" in present(engine.fault_problem(["rank-raise@0"], {"tp": 1, "pp": 1}))


def test_an_engine_without_fault_switches_takes_none():
    assert "engine 'hf' has no fault switches" in present(get_engine("hf").fault_problem(["rank-raise@0"], ONE_RANK))


def test_faults_of_a_scenario_file_are_checked_at_load_time(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(
        "suite: demo\nmodel: tiny-llama\nworkloads: [{name: logits, kind: logprobs}]\n"
        "golden: {tp: 1}\nmatrix: {tp: [1, 2]}\nfaults: [rank-riase@1]\n"
    )
    with pytest.raises(ScenarioError) as err:
        load_suite(path)
    assert str(path) in str(err.value) and "faults: unknown fault 'rank-riase@1'" in str(err.value)
    assert "rank-raise@N" in str(err.value)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "fault, problem",
    [
        ("nosuch", "unknown fault 'nosuch'"),
        ("rank-raise@x", "needs a global rank"),
    ],
)
def test_harness_run_with_a_fault_no_engine_knows_is_a_usage_error(tmp_path, fault, problem):
    """A --fault typo stops the run before anything starts (exit 2), with one message, not
    one `error` verdict per scenario."""
    done = harness_cli("run", "llama-tiny", "--fault", fault, "--report-dir", str(tmp_path / "reports"), "--run-id", "bad-fault")
    assert done.returncode == 2, done.stdout + done.stderr
    assert problem in done.stderr and "the reference engine knows" in done.stderr
    assert done.stderr.count(problem) == 1
    assert not (tmp_path / "reports" / "bad-fault").exists()  # nothing ran, no run directory


@pytest.mark.e2e
def test_harness_run_with_a_fault_aimed_at_a_missing_rank_is_an_error_before_launch(tmp_path):
    """Through the real CLI, on a shipped scenario and its golden: the rank exists in
    some settings, so the scenarios without it end `error`, with no rank started."""
    problem = "targets global rank 9, but these settings have 1 rank"
    done = harness_cli(
        "run", "llama-tiny/tp1-pp1", "--fault", "rank-raise@9", "--report-dir", str(tmp_path / "reports"), "--run-id", "bad-fault"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    scenario_dir = rundir.scenario_dir(tmp_path / "reports" / "bad-fault", "llama-tiny/tp1-pp1")
    verdict = json.loads((scenario_dir / rundir.VERDICT).read_text())
    assert verdict["verdict"] == "error" and problem in verdict["reason"], verdict["reason"]
    assert "the reference engine knows" in verdict["reason"]
    assert problem in done.stdout + done.stderr  # on the console too
    assert not (scenario_dir / rundir.LOGS).exists()  # no rank was started
