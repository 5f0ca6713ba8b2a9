"""Expected failures name their bug, so a new bug never hides behind an old marker: an
expectation is for the engine versions it names, and only the failure it describes is
expected. No engine is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contract.expectations import apply_expectations as _apply_expectation
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios, load_suite
from harness.inputs.scenarios.schema import ExpectedFailure, ScenarioError

ROOT = Path(__file__).resolve().parent.parent
VLLM_032 = {"engine": "vllm", "vllm": "0.32.0", "torch": "2.13.0+cpu", "python": "3.11.7"}
VLLM_020 = {"engine": "vllm", "vllm": "0.20.2", "torch": "2.11.0+cpu", "python": "3.11.7"}
PP_ASSERT = ExpectedFailure(
    match={"pp": 2, "compile": False},
    verdict="crash",
    engine_version="vllm==0.32.*",
    exception="AssertionError",
    rank="Worker_PP1",
    traceback="sync_and_gather_intermediate_tensors",
    reason="vLLM 0.32 CPU: eager PP never allocates the PP rank>=1 buffer; AssertionError on Worker_PP1",
)


def crash(exception: str, rank="Worker_PP1 (vLLM worker: PP rank 1, pid 7)", versions=VLLM_032, tb="") -> Verdict:
    return Verdict(
        "vllm-gemma4/tp1-pp2",
        "crash",
        f"rank {rank} crashed: {exception}",
        versions=dict(versions),
        crash={"rank": rank, "exitcode": 1, "signal": None, "exception": exception, "traceback": tb, "log": "l"},
    )


def test_a_different_crash_is_not_the_expected_one():
    """vllm-gemma4/tp1-pp2 on vllm 0.20.2 crashed with an AttributeError; the marker is for
    an AssertionError: today it was reported 'crash as expected'."""
    v = _apply_expectation(
        crash("AttributeError: 'IntermediateTensors' object has no attribute 'get'", versions={**VLLM_020, "vllm": "0.32.1"}),
        (PP_ASSERT,),
    )
    assert v.expectation is not None
    assert v.verdict == "crash" and not v.as_expected
    assert "NOT the expected failure" in v.reason and "AssertionError" in v.reason and "AttributeError" in v.reason
    assert v.expectation["status"] == "mismatch" and "AttributeError" in v.expectation["happened"]
    assert v.expectation["expected"].startswith("crash AssertionError")


def test_the_named_crash_is_expected():
    tb = 'File "gpu_model_runner.py", line 3174, in sync_and_gather_intermediate_tensors\n    assert ...\nAssertionError'
    v = _apply_expectation(crash("AssertionError", tb=tb), (PP_ASSERT,))
    assert v.expectation is not None
    assert v.verdict == "expected-failure" and v.observed == "crash" and v.as_expected
    assert v.expectation["status"] == "matched" and v.expectation["ran_on"] == "vllm 0.32.0 (torch 2.13.0+cpu)"


def test_the_right_exception_on_the_wrong_worker_or_frame_is_not_expected():
    tb = "in sync_and_gather_intermediate_tensors"
    v = _apply_expectation(crash("AssertionError", rank="Worker_PP0 (vLLM worker: PP rank 0)", tb=tb), (PP_ASSERT,))
    assert v.verdict == "crash" and "expected rank Worker_PP1" in v.reason
    v = _apply_expectation(crash("AssertionError", tb="in some_other_function"), (PP_ASSERT,))
    assert v.expectation is not None
    assert v.verdict == "crash" and "traceback" in v.expectation["why"]


def test_an_expectation_for_other_versions_does_not_apply():
    v = _apply_expectation(
        crash("AttributeError: 'IntermediateTensors' object has no attribute 'get'", versions=VLLM_020), (PP_ASSERT,)
    )
    assert v.expectation is not None
    assert v.verdict == "crash" and v.expected_failure is None
    assert v.expectation["status"] == "not-applicable" and "vllm 0.20.2" in v.expectation["why"]
    ok = _apply_expectation(Verdict("s/x", "pass", "all held", versions=dict(VLLM_020)), (PP_ASSERT,))
    assert ok.verdict == "pass" and ok.as_expected and not ok.unexpected_pass  # eager PP works on 0.20.2


def test_an_expectation_that_no_longer_fires_names_the_version():
    v = _apply_expectation(Verdict("s/x", "pass", "all held", versions=dict(VLLM_032)), (PP_ASSERT,))
    assert v.expectation is not None
    assert v.unexpected_pass and not v.as_expected
    assert "did not happen on vllm 0.32.0" in v.reason and v.expectation["status"] == "not-fired"


def test_the_verdict_kind_must_match():
    """vllm-gemma4/tp1-pp2-compile: a numeric failure is expected; a crash is another bug."""
    x = ExpectedFailure(match={"pp": 2}, verdict="fail", check="logits", metric={"max_abs_dlogprob": ">=0.1"}, reason="pli")
    v = _apply_expectation(crash("AttributeError: 'IntermediateTensors' object has no attribute 'get'"), (x,))
    assert v.verdict == "crash" and "expected a fail, this is a crash" in v.reason


def fail(dlogprob: float, failed=("logits",)) -> Verdict:
    checks = [
        {
            "name": n,
            "kind": "logprobs",
            "passed": n not in failed,
            "summary": f"max|dlogprob|={dlogprob:.2e}",
            "metrics": {"max_abs_dlogprob": dlogprob},
        }
        for n in ("logits", "greedy")
    ]
    return Verdict("s/x", "fail", "logits: ...", checks=checks, versions=dict(VLLM_032))


def test_a_numeric_failure_names_its_check_and_metric():
    x = ExpectedFailure(match={"pp": 2}, check="logits", metric={"max_abs_dlogprob": ">=0.1"}, reason="pli")
    assert x.verdict == "fail"  # implied by the numeric fields
    assert _apply_expectation(fail(1.55), (x,)).verdict == "expected-failure"
    small = _apply_expectation(fail(3e-4), (x,))
    assert small.verdict == "fail" and "max_abs_dlogprob=0.0003 is not >=0.1" in small.reason
    other = _apply_expectation(fail(1.55, failed=("greedy",)), (x,))
    assert other.verdict == "fail" and "expected check logits to fail" in other.reason


def test_the_first_matching_expectation_of_several_wins():
    old = ExpectedFailure(match={"pp": 2}, engine_version="vllm<0.30", exception="AttributeError", reason="0.20 bug")
    v = _apply_expectation(crash("AttributeError: no get", versions=VLLM_020), (PP_ASSERT, old))
    assert v.verdict == "expected-failure" and "0.20 bug" in v.reason


def test_an_expectation_without_details_still_matches_any_failure():
    x = ExpectedFailure(match={"tp": 2}, reason="known bug")
    v = _apply_expectation(crash("RuntimeError: boom", versions={}), (x,))
    assert v.verdict == "expected-failure" and v.reason.startswith("crash as expected (known bug)")
    legacy = Verdict("s/x", "crash", "boom", expected_failure="known bug")  # no entries: the old rule
    assert _apply_expectation(legacy, ()).verdict == "expected-failure"


SUITE = """suite: demo
engine: reference
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 2}]
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2], pp: [1, 2]}
expected_failures:
  - match: {pp: 2}
    engine_version: "torch>=2.9"
    versions: {python: ">=3.10"}
    exception: KeyError
    message: "'residual'"
    rank: 1
    reason: "bug 1"
"""


def test_a_scenario_file_names_the_bug_and_every_matching_entry_reaches_the_scenario(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(SUITE)
    suite = load_suite(path)
    x = suite.expected_failures[0]
    assert x.verdict == "crash" and x.rank == 1
    scenarios = {s.id: s for s in load_scenarios([path])}
    assert scenarios["demo/tp1-pp2"].expectations == (x,) and scenarios["demo/tp1-pp2"].expected_failure == "bug 1"
    assert scenarios["demo/tp1-pp1"].expectations == ()


@pytest.mark.parametrize(
    "old, new, problem",
    [
        ('engine_version: "torch>=2.9"', 'engine_version: "torch>>2"', "is not '<package><PEP 440 specifier>'"),
        ('engine_version: "torch>=2.9"', 'engine_version: "torch"', "names no version range"),
        ('versions: {python: ">=3.10"}', 'versions: {python: "3.10"}', "is not a PEP 440 specifier"),
        ("message: \"'residual'\"", 'message: "(unclosed"', "not a regular expression"),
        ("rank: 1", "rank: 1\n    check: logits", "a crash's fields and a numeric failure's fields"),
        ("rank: 1", "rank: 1\n    verdict: fail", "describe a crash, but verdict is 'fail'"),
        ("rank: 1", "rank: 1\n    verdict: exploded", "verdict"),
    ],
)
def test_a_bad_expectation_is_rejected_with_its_problem(tmp_path, old, new, problem):
    assert old in SUITE
    path = tmp_path / "demo.yaml"
    path.write_text(SUITE.replace(old, new))
    with pytest.raises(ScenarioError, match="expected_failures") as info:
        load_suite(path)
    assert problem in str(info.value), str(info.value)


def test_the_shipped_vllm_suites_name_their_bugs():
    """Every expectation of the vLLM suites names its engine versions and the failure itself
    (a declared `unsupported`: the engine's reason)."""
    for path in sorted((ROOT / "scenarios").glob("vllm-*.yaml")):
        for x in load_suite(path).expected_failures:
            assert x.engine_version or x.versions, (path.name, x.reason)
            # a worker killed by a signal raised nothing: its message (the signal) names the crash
            named_by_message = x.verdict in ("unsupported", "crash") and x.message
            assert x.exception or x.check or named_by_message, (path.name, x.reason)


SP_REMOVED = ExpectedFailure(
    match={"sp": True},
    verdict="unsupported",
    engine_version="vllm>=0.32",
    message="SequenceParallelismPass|sp",
    reason="vLLM 0.32 removed its SP pass on CPU",
)


def unsupported(versions=VLLM_032, reason="the engine accepted but did not apply sp=True (0 SP passes ran)") -> Verdict:
    return Verdict("vllm-llama/tp2-pp1-sp", "unsupported", reason, versions=dict(versions))


def test_an_unsupported_declared_for_the_engine_version_is_matched():
    """What keeps a lost setting from being 'coverage lost' is an
    expectation scoped to the engine version that declares it unsupported."""
    from harness.contract.expectations import declares_unsupported

    v = _apply_expectation(unsupported(), (SP_REMOVED,))
    assert v.expectation is not None
    assert v.verdict == "unsupported" and v.as_expected and v.expectation["status"] == "matched"
    assert declares_unsupported(v)
    other_version = _apply_expectation(unsupported(versions=VLLM_020), (SP_REMOVED,))
    assert other_version.expectation is not None
    assert not declares_unsupported(other_version) and other_version.expectation["status"] == "not-applicable"
    other_reason = _apply_expectation(unsupported(reason="needs 4 devices, this machine has 2"), (SP_REMOVED,))
    assert other_reason.expectation is not None
    assert not declares_unsupported(other_reason) and "expected a reason matching" in other_reason.expectation["why"]
    assert not declares_unsupported(_apply_expectation(unsupported(), (PP_ASSERT,)))  # an expected crash declares nothing


def test_a_setting_declared_unsupported_that_passes_is_noticed():
    v = _apply_expectation(Verdict("vllm-llama/tp2-pp1-sp", "pass", "all held", versions=dict(VLLM_032)), (SP_REMOVED,))
    assert v.unexpected_pass and not v.as_expected


def test_an_expected_unsupported_takes_only_a_message():
    with pytest.raises(ValueError, match="matched on the engine's reason"):
        ExpectedFailure(match={"sp": True}, verdict="unsupported", exception="KeyError", reason="r")
