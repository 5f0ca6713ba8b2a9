"""Bugs where features meet: the reference engine's interaction faults fire only where two
features meet; no one-feature suite runs the two together, the covering array of
llama-interactions does, and a failure there is narrowed to exactly the planted pair
(harness/run/stages/interaction.py). The narrowing itself is unit-tested on a fake engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import select
from harness.run.stages.interaction import changed_values, minimal_interaction
from tests.kit import harness_cli, scaled, verdict_of

# fault -> the pair of axis values only where it fires
PLANTED = {
    "dp-replica-trusts-drafts": {"dp": 2, "spec": "ngram"},
    "spec-trusts-after-prefix-hit": {"prefix_cache": True, "spec": "ngram"},
}
# the one-feature suites' scenarios of each feature of the pairs: they pass under the fault
ONE_FEATURE = {
    "dp": ["llama-dp/tp1-pp1-dp2"],
    "spec": ["llama-spec/tp1-pp1-spec-ngram", "llama-spec/tp2-pp2-spec-ngram"],
    "prefix_cache": ["llama-features/tp1-pp1-prefix_cache", "llama-features/tp1-pp2-prefix_cache"],
}


def one_feature(pair: dict) -> list[str]:
    """The one-feature scenarios of the pair's own features (another feature's cannot meet the fault)."""
    return [sid for axis in pair for sid in ONE_FEATURE[axis]]


def holds(settings: dict, pair: dict) -> bool:
    return all(settings.get(a) == v for a, v in pair.items())


def reference_scenarios():
    return [s for s in load_scenarios() if s.suite.engine == "reference"]


@pytest.mark.parametrize("fault", list(PLANTED))
def test_no_one_feature_suite_runs_the_pair_and_the_covering_array_does(fault):
    pair = PLANTED[fault]
    meeting = sorted(s.id for s in reference_scenarios() if holds(s.settings, pair))
    assert meeting and all(i.startswith("llama-interactions/") for i in meeting), meeting


def test_the_covering_array_is_small_and_covers_every_pair():
    rows = select(load_scenarios(), ["llama-interactions"])
    assert 0 < len(rows) <= 10  # 2**9 = 512 settings in full


# ---- the narrowing, on a fake engine: a failure needs exactly the values `bug` names ----


def scenario_with(settings_id: str):
    return next(s for s in load_scenarios() if s.id == settings_id)


def fake_run(bug: dict, log: list):
    def run(scenario, directory: Path) -> Verdict:
        log.append(scenario.id)
        broken = holds(scenario.settings, bug)
        return Verdict(scenario.id, "fail" if broken else "pass", "planted" if broken else "clean")

    return run


def test_the_narrowing_keeps_exactly_the_values_the_failure_needs(tmp_path):
    scenario = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]
    assert len(changed_values(scenario)) > 2
    log: list[str] = []
    failed = Verdict(scenario.id, "fail", "planted")
    found = minimal_interaction(scenario, failed, tmp_path, 10, fake_run({"dp": 2, "spec": "ngram"}, log))
    assert found is not None
    assert found["needs"] == {"dp": 2, "spec": "ngram"} and found["complete"]
    assert found["text"].startswith("fails with dp=2 + spec=ngram; passes with either alone")
    assert len(log) == len(changed_values(scenario))  # one trial a value
    again: list[str] = []  # a second scenario of the run asking the same trials reads them
    minimal_interaction(scenario, failed, tmp_path, 10, fake_run({"dp": 2, "spec": "ngram"}, again))
    assert again == []


def test_a_bounded_narrowing_says_it_ran_out(tmp_path):
    scenario = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]
    found = minimal_interaction(
        scenario, Verdict(scenario.id, "fail", "x"), tmp_path, 1, fake_run({"dp": 2, "spec": "ngram"}, [])
    )
    assert found is not None
    assert not found["complete"] and "trials ran out" in found["text"] and len(found["trials"]) == 1


def test_a_different_failure_or_a_refusal_keeps_the_value_in(tmp_path):
    scenario = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]

    def run(trial, directory):  # without dp the run crashes instead: not the same failure
        return Verdict(trial.id, "crash" if trial.settings["dp"] == 1 else "fail", "other")

    found = minimal_interaction(scenario, Verdict(scenario.id, "fail", "x"), tmp_path, 10, run)
    assert found is not None
    assert found["needs"] == {"dp": 2} and found["text"] == "fails with dp=2 alone"
    assert [t["verdict"] for t in found["trials"] if t["without"] == "dp=2"] == ["crash"]


def test_nothing_to_narrow_for_one_changed_value_or_a_pass(tmp_path):
    one = scenario_with("llama-spec/tp1-pp1-spec-ngram")
    assert minimal_interaction(one, Verdict(one.id, "fail", "x"), tmp_path, 6, fake_run({}, [])) is None
    many = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]
    assert minimal_interaction(many, Verdict(many.id, "pass", "x"), tmp_path, 6, fake_run({}, [])) is None
    assert many.narrowed({"dp": 2}).settings["spec"] is False  # the rest at the golden's


# ---- real ranks: the whole covering array under each fault ----


@pytest.mark.e2e
@pytest.mark.parametrize("fault", list(PLANTED))
def test_the_covering_array_catches_the_fault_and_names_exactly_the_pair(fault, tmp_path):
    """The covering array's rows that hold the pair fail, each narrowed to exactly the pair
    (its other rows hold neither feature together: the clean nightly runs them); the
    one-feature suites' scenarios of the pair's features pass under the same fault."""
    pair = PLANTED[fault]
    rows = [s.id for s in select(load_scenarios(), ["llama-interactions"]) if holds(s.settings, pair)]
    run_dir = tmp_path / "run"
    result = harness_cli(
        "run",
        *rows,
        *one_feature(pair),
        "--fault",
        fault,
        "--report-dir",
        str(tmp_path),
        "--run-id",
        "run",
        "--timeout",
        f"{scaled(300):.0f}",
        timeout=1800,
        what=f"run --fault {fault}",
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    for sid in rows:
        v = verdict_of(run_dir, sid)
        assert v["verdict"] == "fail" and v["interaction"]["needs"] == pair, (sid, v["reason"])
        assert "passes with either alone" in v["reason"], v["reason"]
    for sid in one_feature(pair):
        v = verdict_of(run_dir, sid)
        assert v["verdict"] == "pass", (sid, v["reason"])


@pytest.mark.e2e
def test_interaction_trials_0_leaves_a_failure_as_it_is(tmp_path):
    sid = "llama-interactions/tp2-pp1-prefix_cache-spec-ngram"
    result = harness_cli(
        "run",
        sid,
        "--fault",
        "spec-trusts-after-prefix-hit",
        "--interaction-trials",
        "0",
        "--report-dir",
        str(tmp_path),
        "--run-id",
        "run",
        timeout=900,
        what="run --interaction-trials 0",
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    v = verdict_of(tmp_path / "run", sid)
    assert v["verdict"] == "fail" and v["interaction"] is None and "interaction:" not in v["reason"], v["reason"]
    assert not (tmp_path / "run" / "interaction").exists()  # no trial ran


def test_a_value_goes_with_the_values_that_require_it(tmp_path):
    """block_size requires prefix_cache (the reference engine's rule): the trial without the
    prefix cache drops its block size too, instead of a refused setting that proves nothing."""
    scenario = select(load_scenarios(), ["llama-interactions/*block_size8*spec-ngram"])[0]
    log: list[str] = []
    found = minimal_interaction(
        scenario, Verdict(scenario.id, "fail", "x"), tmp_path, 10, fake_run({"prefix_cache": True, "spec": "ngram"}, log)
    )
    assert found is not None
    assert found["needs"] == {"prefix_cache": True, "spec": "ngram"} and found["complete"], found
    assert "without prefix_cache=true + block_size=8: pass" in found["text"], found["text"]
    assert not any("block_size8" in i and "prefix_cache" not in i for i in log)  # never a refused setting


def test_a_long_reason_keeps_its_interaction_whole_in_one_line_lists():
    """The PR comment and the summary's change lists cut a reason at 200 characters; the
    narrowing at its end is what a reader acts on, so it is never cut."""
    from harness.run.report.markdown import brief

    reason = "greedy: " + "x" * 400 + "; interaction: fails with dp=2 + spec=ngram; passes with either alone"
    line = brief(reason)
    assert line.endswith("; interaction: fails with dp=2 + spec=ngram; passes with either alone")
    assert len(line) < 300 and "…" in line
    assert brief("short reason") == "short reason"


def test_a_trial_of_an_engine_version_keeps_its_tag():
    """Trials are shared by id within a run: a run of two engine versions (--engine-env twice)
    must not read one version's trial for the other."""
    from harness.inputs.scenarios.scenario import EngineVersion

    scenario = select(load_scenarios(), ["llama-interactions/*dp2*spec-ngram"])[0]
    versioned = scenario.with_version(EngineVersion("x==1", "reference-1", "/usr/bin/python"))
    assert versioned.narrowed({"dp": 2}).id == "llama-interactions/tp1-pp1-dp2@reference-1"
    assert scenario.narrowed({"dp": 2}).id == "llama-interactions/tp1-pp1-dp2"
