"""An eval check must be able to fail, or it proves nothing when it passes.

The llama-gsm8k PR slice scored 0.000 against a golden of 0.000 on 16 items: no score
drop was possible, so it could only pass. Each item's response is now compared with
the golden's too, and a check that cannot fail either way is refused before launch.
The end-to-end tests run the real CLI on the llama-gsm8k suite and its committed
golden, with a 2-item PR slice to stay cheap."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.contract.jsonfile import read_json
from harness.contract.roots import builtin_scenarios, golden_dir
from harness.contract.rundir import logs_dir, verdict_path
from harness.inputs.scenarios.loading import load_catalog, load_suite
from harness.run import golden as goldens
from harness.run.evals import paired
from tests.kit import ROOT, harness_cli, verdict_of

SCENARIO = "llama-gsm8k/tp1-pp1"


def gsm8k_suite(tmp_path: Path, **eval_fields) -> Path:
    """A scenarios dir holding llama-gsm8k.yaml with its eval's fields replaced, and its
    cheapest scenario as the PR gate."""
    text = (ROOT / "scenarios" / "llama-gsm8k.yaml").read_text()
    text, found = re.subn(r"^gates:$", "gates:\n  pr: [tp1-pp1]", text, flags=re.M)
    assert found == 1
    for key, value in eval_fields.items():
        line = f"    {key}: {value}"
        text, found = re.subn(rf"^    {key}: .*$", line, text, flags=re.M)
        if not found:
            text = text.replace("    task: gsm8k\n", f"    task: gsm8k\n{line}\n")
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "llama-gsm8k.yaml").write_text(text)
    return scenarios


def run_pr_gate(scenarios: Path, golden: Path, tmp_path: Path) -> tuple[dict, subprocess.CompletedProcess]:
    result = harness_cli(
        "run",
        "--gate",
        "pr",
        "--report-dir",
        str(tmp_path / "reports"),
        "--run-id",
        "r",
        scenarios=scenarios,
        env={"HARNESS_GOLDEN_DIR": str(golden)},
        timeout=900,
    )
    assert verdict_path(tmp_path / "reports" / "r", SCENARIO).exists(), result.stdout + result.stderr
    return verdict_of(tmp_path / "reports" / "r", SCENARIO), result


@pytest.mark.e2e
def test_a_response_that_differs_from_the_golden_fails_the_gsm8k_slice(tmp_path):
    golden = tmp_path / "golden"
    shutil.copytree(ROOT / "golden" / "llama-gsm8k", golden / "llama-gsm8k")
    evals_file = golden / "llama-gsm8k" / "evals.json"
    stored = json.loads(evals_file.read_text())
    item = stored["gsm8k"]["items"][1]
    assert item["correct"] == {"flexible-extract": 0, "strict-match": 0}  # wrong both times: the score cannot move
    item["response"] = " 12 - 3 = 9\n#### 9\n\n"  # as if the engine had answered otherwise when the golden was made
    evals_file.write_text(json.dumps(stored))
    goldens.record_digests(golden / "llama-gsm8k")
    # a score at the floor, in a gate only as its eval says why: its responses
    marked = gsm8k_suite(tmp_path, pr_items=2, score_cannot_fail="'the tiny model scores 0 on GSM8K: its responses are held'")
    v, result = run_pr_gate(marked, golden, tmp_path)
    assert v["verdict"] == "fail", v["reason"]
    check = next(c for c in v["checks"] if c["name"] == "eval:gsm8k")
    assert check["metrics"]["score"] == check["metrics"]["golden_score"] == 0.0
    assert check["metrics"]["differing_responses"] == 1 and [r["doc_id"] for r in check["differing_responses"]] == [1]
    assert "1 of 2 responses differ from the golden's (items 1; at most 0 allowed)" in v["reason"]
    assert "responses differ" in result.stdout  # on the console too


@pytest.mark.e2e
def test_an_eval_check_that_cannot_fail_is_refused_before_launch(tmp_path):
    # that PR slice (16 items, golden 0.000: no room to drop) with every response allowed to differ
    scenarios = gsm8k_suite(tmp_path, pr_items=16, max_differing_responses=16)
    v, result = run_pr_gate(scenarios, ROOT / "golden", tmp_path)
    assert v["verdict"] == "error", v["reason"]
    assert "eval 'gsm8k' cannot fail on these 16 items" in v["reason"] and "floor" in v["reason"]
    assert "max_differing_responses" in v["reason"] and "out of this gate" in v["reason"]
    assert not logs_dir(tmp_path / "reports" / "r", "llama-gsm8k/tp1-pp1").exists()
    assert "cannot fail" in result.stdout


def test_no_gate_of_the_built_in_suites_holds_an_eval_that_cannot_fail():
    """The built-in PR gate scored GSM8K 0.000 on 16 items with a model that never answers
    right there: a score that cannot drop. Every gate's eval slice can fail now."""
    checked = []
    for scenario in load_catalog([builtin_scenarios()]).scenarios:
        for gate in sorted(scenario.gates & {"pr", "nightly"}):
            golden = read_json(golden_dir(scenario.golden_key) / goldens.EVALS_FILE) if scenario.suite.evals else {}
            for e in scenario.suite.evals:
                items = golden[e.name]["items"][: e.item_count(gate)]
                paired.refuse_powerless(e, items, gate)  # raises when that gate's slice cannot fail
                checked.append((scenario.suite.suite, gate))
    assert {("llama-evals", "pr"), ("llama-gsm8k", "nightly")} <= set(checked), checked


def test_a_gate_refuses_a_score_that_cannot_fail_unless_its_eval_says_why():
    e = load_suite(ROOT / "scenarios" / "llama-gsm8k.yaml").evals[0]
    at_floor = [{"correct": {e.filter: 0}}] * 16
    paired.refuse_powerless(e, at_floor)  # a run of named ids: the report names the powerless score
    with pytest.raises(paired.PowerlessCheckError, match="is in the pr gate, and its score cannot fail on these 16 items"):
        paired.refuse_powerless(e, at_floor, "pr")
    paired.refuse_powerless(e.model_copy(update={"score_cannot_fail": "held for its responses"}), at_floor, "pr")


def test_refusal_needs_both_the_score_and_the_responses_to_be_powerless():
    suite = load_suite(ROOT / "scenarios" / "llama-gsm8k.yaml")
    e = suite.evals[0]
    at_floor = [{"correct": {e.filter: 0}}] * 16
    paired.refuse_powerless(e, at_floor)  # the responses can still fail it
    with pytest.raises(paired.PowerlessCheckError, match="cannot fail on these 16 items"):
        paired.refuse_powerless(e.model_copy(update={"max_differing_responses": 16}), at_floor)
    scoring = [{"correct": {e.filter: 1}}] * 16
    paired.refuse_powerless(e.model_copy(update={"max_differing_responses": 16}), scoring)  # the score can drop
