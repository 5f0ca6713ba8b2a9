"""The Python API (harness/api.py) without ranks: comparisons of outputs a test already
has (the stored llama-tiny golden, and copies of it made to diverge), the failure text
it raises, its report, and the refusals that come before any launch. The runs for real
are in test_api_example.py, the documented example (docs/API.md)."""

from __future__ import annotations

import copy

import pytest

from harness import api
from harness.api import CheckFailed, SettingUnsupported, assert_outputs_match, compare_outputs
from harness.contract.outputs import EngineOutputs
from tests.kit import ROOT, summary, verdicts
from tests.kit.present import present

GOLDEN = ROOT / "golden" / "llama-tiny"


@pytest.fixture(scope="module")
def golden() -> EngineOutputs:
    return EngineOutputs.load(GOLDEN)


def diverged(golden: EngineOutputs, layer: int = 2, row: int = 30, by: float = 0.01) -> EngineOutputs:
    """The golden as an engine whose layer `layer` went wrong would have written it: the
    stream after that layer moved, and the logprobs of one position with it."""
    out = copy.deepcopy(golden)
    out.tensors["logits.hidden_states"][layer:] *= 1 + by
    out.tensors["logits.topk_logprobs"][row] -= 10 * by
    out.meta["scenario_id"] = "mine/tp2"
    return out


def test_outputs_equal_to_the_golden_pass_from_a_directory_or_in_memory(golden):
    for reference in (GOLDEN, str(GOLDEN), golden):
        v = compare_outputs(golden, reference)
        assert v.verdict == "pass", v.reason
        assert {c["name"] for c in v.checks} == {"logits", "greedy"}
        assert v.tolerance == "|dlogprob|<=0.0002, KL<=1e-06, top1>=1, near-tie<=0.001"  # float32, from the outputs' dtype
        assert v.localization is None


def test_a_divergence_fails_with_the_check_its_bound_and_the_first_diverging_layer(golden):
    v = compare_outputs(diverged(golden), GOLDEN)
    assert v.verdict == "fail" and v.scenario == "mine/tp2"
    assert v.localization is not None
    assert v.localization["layer"] == 2 and v.localization["workload"] == "logits"
    assert v.reason.startswith("first diverging layer 2 (pp stage 0) [logits: token row 0"), v.reason
    logits = next(c for c in v.checks if c["name"] == "logits")
    assert not logits["passed"] and logits["bound"] == 2e-4
    assert logits["first_divergence"]["prompt"] == 0 and logits["metrics"]["max_abs_dlogprob"] == pytest.approx(0.1, abs=1e-6)
    assert v.golden["dir"] == str(GOLDEN)


def test_the_assertion_says_what_broke_where_and_against_what(golden, tmp_path):
    with pytest.raises(CheckFailed) as caught:
        assert_outputs_match(diverged(golden), GOLDEN, report_dir=tmp_path)
    text = str(caught.value)
    assert isinstance(caught.value, AssertionError)  # pytest shows it as a plain assertion failure
    assert text.startswith(f"mine/tp2 does not match {GOLDEN}:\nmine/tp2: fail - first diverging layer 2"), text
    assert "tolerance: |dlogprob|<=0.0002" in text
    assert "[FAIL] logits (logprobs): max|dlogprob|=1.00e-01" in text and "first diverged at prompt 0 position 30" in text
    assert "[ok] greedy (greedy)" in text
    run_dir = present(caught.value.report)
    assert f"report: {run_dir / 'summary.md'}" in text
    assert list(verdicts(run_dir)) == ["mine/tp2"] and "**FAILED**" in summary(run_dir)
    assert (run_dir / "report.html").exists() and (run_dir / "junit.xml").exists()


def test_tolerances_and_workloads_can_be_narrowed_or_loosened(golden):
    moved = diverged(golden)
    assert compare_outputs(moved, GOLDEN, workloads=["greedy"]).verdict == "pass"
    loose = compare_outputs(moved, GOLDEN, tolerances={"logprob_atol": 0.2, "kl_max": 1.0})
    assert loose.verdict == "pass" and "|dlogprob|<=0.2" in loose.tolerance
    assert compare_outputs(moved, GOLDEN, dtype="bfloat16").tolerance.startswith("|dlogprob|<=0.15")
    with pytest.raises(ValueError, match="no workload 'nope'"):
        compare_outputs(moved, GOLDEN, workloads=["nope"])
    with pytest.raises(ValueError, match="bad tolerances"):
        compare_outputs(moved, GOLDEN, tolerances={"logprob_tol": 1})


def test_outputs_without_workload_kinds_are_read_from_their_fields(golden):
    bare = EngineOutputs(dict(golden.tensors), {})
    v = compare_outputs(bare, bare)
    assert v.verdict == "pass" and {(c["name"], c["kind"]) for c in v.checks} == {("logits", "logprobs"), ("greedy", "greedy")}


def test_a_missing_workload_is_a_failure_not_a_pass(golden):
    partial = EngineOutputs({k: v for k, v in golden.tensors.items() if k.startswith("logits.")}, dict(golden.meta))
    v = compare_outputs(partial, golden)
    assert v.verdict == "fail" and "engine wrote no tokens, topk_ids, topk_logprobs for workload 'greedy'" in v.reason


# --- refused before any rank starts ----------------------------------------------------


def test_a_setting_the_engine_does_not_have_is_refused(tmp_path):
    with pytest.raises(ValueError, match="axis 'batch_invariant' is not an axis of engine 'reference'"):
        api.run_setting("tiny-llama", {"batch_invariant": True}, work_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown model 'tiny-lama'"):
        api.run_setting("tiny-lama", {"tp": 2}, work_dir=tmp_path)


def test_a_setting_that_cannot_run_here_is_unsupported_with_the_reason(tmp_path, monkeypatch):
    with pytest.raises(SettingUnsupported, match="tiny-llama/tp3: unsupported - .*num_attention_heads"):
        api.run_setting("tiny-llama", {"tp": 3}, work_dir=tmp_path)
    monkeypatch.setenv("HARNESS_DEVICES", "2")
    with pytest.raises(SettingUnsupported, match="needs 4 devices, this machine has 2"):
        api.assert_settings_agree("tiny-llama", a={"tp": 1}, b={"tp": 2, "pp": 2}, work_dir=tmp_path)
    assert not list(tmp_path.rglob("rank*.log"))  # nothing was launched


def test_a_bad_fault_switch_is_refused_before_launch(tmp_path):
    with pytest.raises(ValueError, match="bad fault switch: .*targets global rank 3, but these settings have 2 ranks"):
        api.run_setting("tiny-llama", {"tp": 2}, faults=["rank-raise@3"], work_dir=tmp_path)
    assert not list(tmp_path.rglob("rank*.log"))


def test_a_scenario_of_the_scenario_files_runs_as_harness_run_does(tmp_path, monkeypatch):
    """A scenario bigger than this machine ends `unsupported` before launch: as expected,
    so the call returns its verdict, and the report says so."""
    monkeypatch.setenv("HARNESS_DEVICES", "1")
    v = api.assert_matches_golden("llama-tiny/tp2-pp1", report_dir=tmp_path)
    assert v.verdict == "unsupported" and "needs 2 devices, this machine has 1" in v.reason
    (run_dir,) = tmp_path.glob("*-api")
    # as expected, and the report says what it is: nothing was tested
    assert "**NOTHING TESTED**" in summary(run_dir) and list(verdicts(run_dir)) == ["llama-tiny/tp2-pp1"]
    with pytest.raises(ValueError, match="names 4 scenarios .*give one id"):
        api.assert_matches_golden("llama-tiny/tp2-pp1*", work_dir=tmp_path)
    with pytest.raises(ValueError, match="no scenario matches 'llama-tiny/tp9'"):
        api.assert_matches_golden("llama-tiny/tp9", work_dir=tmp_path)


def test_a_verdict_that_is_not_as_expected_raises_with_the_runners_text(tmp_path, monkeypatch):
    """The scenario's verdict is the runner's own: here an `error` (no golden), raised."""
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "no-goldens"))
    with pytest.raises(CheckFailed) as caught:
        api.assert_matches_golden("llama-tiny/tp1-pp1", work_dir=tmp_path)
    assert caught.value.verdict.verdict == "error"
    assert "llama-tiny/tp1-pp1 did not end as expected against its golden:" in str(caught.value)
    assert "harness golden llama-tiny" in str(caught.value)
