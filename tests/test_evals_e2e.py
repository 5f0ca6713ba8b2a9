"""Task evals end to end: real ranks of the reference engine, lm-eval scoring in this
process, the repository's llama-evals suite and its committed golden.

The accuracy half of the compile bug class (vLLM PR 43617): with the compile capture
made without images, the Geo3K-format score drops under compile only, the paired test
flags it and names the flipped items, and the GSM8K-format score does not move."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from harness.inputs.scenarios.loading import load_scenarios
from harness.run import golden as goldens
from harness.run.request import RunConfig
from harness.run.runner import RunContext, run_scenario

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
FAULT = "compile-warmup-without-images"


def scenario(sid: str):
    suite = sid.split("/")[0]
    return next(s for s in load_scenarios([ROOT / "scenarios" / f"{suite}.yaml"]) if s.id == sid)


def with_pr_items(s, **pr_items: int):
    """The scenario with a smaller PR slice of its evals (the first N items, paired with the
    same golden): where a test's claim holds on a few items, generating them all is its cost."""
    evals = [e.model_copy(update={"pr_items": pr_items.get(e.name, e.pr_items)}) for e in s.suite.evals]
    return dataclasses.replace(s, suite=s.suite.model_copy(update={"evals": evals}))


def checks(v) -> dict[str, dict]:
    return {c["name"]: c for c in v.checks}


def test_compile_capture_without_images_drops_the_image_task_only(tmp_path):
    v = run_scenario(scenario("llama-evals/tp1-pp1-compile"), tmp_path / "run", RunContext(RunConfig(faults=(FAULT,), gate="pr")))
    assert v.verdict == "fail", v.reason
    geo, arith = checks(v)["eval:geo"], checks(v)["eval:arith"]
    assert not geo["passed"] and geo["metrics"]["p_value"] < 0.05, geo["summary"]
    assert geo["metrics"]["delta"] < 0 and geo["metrics"]["flipped_to_wrong"] > geo["metrics"]["flipped_to_right"]
    assert geo["metrics"]["n"] == scenario("llama-evals/tp1-pp1").suite.evals[1].pr_items  # the PR slice
    assert {r["flipped"] for r in geo["flipped"]} >= {"to wrong"} and "eval:geo: items" in _where(tmp_path, v)
    assert arith["passed"] and arith["metrics"]["delta"] == 0 and arith["metrics"]["flipped_to_wrong"] == 0, arith["summary"]


def test_eager_serves_the_same_fault_correctly(tmp_path):
    # a slice of the PR slice: the fault, were it applied under eager, would take the label
    # (only in the image) from every geo item, not from a few; the generation of the whole
    # PR slice (112 requests, 5-shot arith prompts) was most of this test's time
    eager = with_pr_items(scenario("llama-evals/tp1-pp1"), geo=24, arith=12)
    v = run_scenario(eager, tmp_path / "run", RunContext(RunConfig(faults=(FAULT,), gate="pr")))
    assert v.verdict == "pass", v.reason
    for name, n in (("eval:geo", 24), ("eval:arith", 12)):
        m = checks(v)[name]["metrics"]
        assert m["n"] == n and m["flipped_to_wrong"] == m["flipped_to_right"] == 0 and m["score"] == m["golden_score"]
    # the models score well above chance (random weights would pass this check vacuously)
    assert checks(v)["eval:geo"]["metrics"]["score"] > 0.5 and checks(v)["eval:arith"]["metrics"]["score"] > 0.3


def test_items_that_no_longer_pair_with_the_golden_are_an_error_not_a_verdict(tmp_path, monkeypatch):
    golden = tmp_path / "golden"
    shutil.copytree(ROOT / "golden" / "llama-evals", golden / "llama-evals")
    evals_file = golden / "llama-evals" / "evals.json"
    stored = json.loads(evals_file.read_text())
    stored["arith"]["items"][0]["prompt_sha256"] = "0" * 64  # as if the few-shot examples had changed
    evals_file.write_text(json.dumps(stored))
    goldens.record_digests(golden / "llama-evals")  # a golden regenerated since, not a damaged one
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(golden))
    v = run_scenario(scenario("llama-evals/tp1-pp1"), tmp_path / "run", RunContext(RunConfig(gate="pr")))
    assert v.verdict == "error" and "another prompt than in the golden" in v.reason and "harness golden llama-evals" in v.reason


def _where(tmp_path: Path, v) -> str:
    from harness.run.report.markdown import where_diverged

    return where_diverged(v)


def test_a_golden_made_with_evals_stores_per_item_results_and_scenarios_pair_with_it(tmp_path, monkeypatch):
    from harness.contract.outputs import EngineOutputs
    from harness.inputs.scenarios.loading import load_suite
    from harness.run.runner import make_golden

    suite_file = tmp_path / "mini.yaml"
    suite_file.write_text("""
suite: mini-evals
model: tiny-llama-arith
evals:
  - {name: arith, task: gsm8k-arith, items: 6, pr_items: 3, max_new_tokens: 24,
     score_cannot_fail: "this test is of the pairing with the golden, not of the slice's power"}
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2], pp: [1]}
""")
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    by_id = {s.id: s for s in load_scenarios([suite_file])}
    golden = make_golden(by_id["mini-evals/tp1-pp1"], tmp_path / "work")
    stored = json.loads((golden / "evals.json").read_text())["arith"]
    assert stored["task"] == "gsm8k-arith" and stored["n"] == 6  # all items, whatever the gate
    assert all(set(it) >= {"doc_id", "prompt_sha256", "correct", "response"} for it in stored["items"])
    assert not any(k.startswith("eval_") for k in EngineOutputs.load(golden).tensors)  # results kept, not tokens
    assert load_suite(suite_file).evals[0].pr_items == 3
    v = run_scenario(by_id["mini-evals/tp2-pp1"], tmp_path / "run", RunContext(RunConfig(gate="pr")))
    assert v.verdict == "pass", v.reason
    m = checks(v)["eval:arith"]["metrics"]
    assert m["n"] == 3 and m["score"] == m["golden_score"] > 0  # the PR slice, paired with the full golden
