"""The example of docs/API.md: an engine developer's own pytest tests, written against the
harness's Python API only. Both tests start real ranks of the built-in reference engine
on the tiny zoo Llama (gloo on CPU): one setting must agree with another, and a broken
all-reduce must be caught, with the harness saying where it first diverged.

Copy this file next to your engine's tests and change the model, the engine and the
settings; `pytest -m e2e` (or no marker at all) runs it.
"""

from __future__ import annotations

import pytest

from harness.api import CheckFailed, SettingUnsupported, assert_settings_agree

pytestmark = pytest.mark.e2e  # starts rank processes (make test-fast leaves these out)


def test_tp2_agrees_with_tp1(tmp_path):
    """TP2 against TP1 eager, the way a golden is made: logprobs of every position, greedy
    decoding through the KV cache, with the float32 tolerances of docs/TOLERANCES.md."""
    try:
        verdict = assert_settings_agree("tiny-llama", a={"tp": 1}, b={"tp": 2}, work_dir=tmp_path)
    except SettingUnsupported as exc:  # e.g. a machine with fewer devices than ranks
        pytest.skip(str(exc))
    assert verdict.verdict == "pass"
    assert {c["name"] for c in verdict.checks} == {"logits", "greedy"}


def test_a_broken_all_reduce_is_caught_and_located(tmp_path):
    """The reference engine's tp-allreduce-perturb fault: TP rank 1 adds 1e-3 to every
    all-reduce result, the embedding's first. The call raises an AssertionError whose
    text names the failing check, its bound, the measured value and the first diverging
    place; `report_dir` also writes the harness's report of it."""
    with pytest.raises(CheckFailed) as caught:
        assert_settings_agree(
            "tiny-llama",
            a={"tp": 1},
            b={"tp": 2},
            faults=["tp-allreduce-perturb@1e-3"],
            work_dir=tmp_path,
            report_dir=tmp_path / "reports",
        )
    failure = caught.value
    text = str(failure)
    assert text.startswith("tiny-llama/tp2 does not agree with tiny-llama/tp1 (the reference):"), text
    assert "first diverging place: the embedding (before layer 0) (pp stage 0), replica of tp rank 1" in text, text
    assert "tolerance: |dlogprob|<=0.0002" in text and "[FAIL] logits (logprobs): max|dlogprob|=" in text, text
    assert failure.verdict.localization is not None
    assert failure.verdict.verdict == "fail" and failure.verdict.localization["tp_rank"] == 1
    assert failure.report is not None
    assert (failure.report / "summary.md").exists() and (failure.report / "report.html").exists()
