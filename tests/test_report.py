"""Reports from verdict files: JUnit, Markdown, and which verdicts stop a gate."""

import json
import xml.etree.ElementTree as ET

from harness.report import write_report
from harness.verdict import Verdict


def save(run_dir, v: Verdict):
    v.save(run_dir / "scenarios" / v.scenario.replace("/", "__") / "verdict.json")


def test_report_files_and_expectations(tmp_path):
    check = {"name": "logits", "kind": "logprobs", "passed": False, "summary": "max|dlogprob|=1.2e-01",
             "metrics": {"max_abs_dlogprob": 0.12}, "tolerance": "t", "first_divergence": {"prompt": 1, "position": 7}, "per_position": []}
    save(tmp_path, Verdict("s/tp1", "pass", "ok", duration_s=1.5))
    save(tmp_path, Verdict("s/tp2", "fail", "logits: diverged", checks=[check], reproduce="make s/tp2"))
    save(tmp_path, Verdict("s/tp2-pp2", "crash", "rank 3 crashed: KeyError: 'residual'",
                           crash={"rank": 3, "exception": "KeyError: 'residual'", "traceback": "Traceback ...\nKeyError: 'residual'", "log": "r3.log"}))
    save(tmp_path, Verdict("s/sp", "unsupported", "needs tp>=2"))
    save(tmp_path, Verdict("s/xf", "expected-failure", "crash as expected", expected_failure="bug 1", observed="crash"))
    save(tmp_path, Verdict("s/fixed", "pass", "ok", expected_failure="bug 2"))
    meta = write_report(tmp_path, {"run_id": "r1"})

    assert meta["counts"] == {"pass": 2, "fail": 1, "crash": 1, "unsupported": 1, "expected-failure": 1}
    assert sorted(meta["not_as_expected"]) == ["s/fixed", "s/tp2", "s/tp2-pp2"]
    assert json.loads((tmp_path / "run.json").read_text())["run_id"] == "r1"

    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("6", "3", "2")
    crash = suite.find("testcase[@name='tp2-pp2']/failure")
    assert "rank 3" in crash.get("message") and "KeyError" in crash.text

    md = (tmp_path / "summary.md").read_text()
    assert "**FAILED**" in md
    assert "| `s/tp2` | ❌ fail | max\\|dlogprob\\| 1.2e-01 | logits: prompt 1 position 7 |" in md
    assert "pass (unexpected)" in md
    assert "KeyError: 'residual'" in md and "Reproduce: `make s/tp2`" in md


def test_all_passing_run_is_ok(tmp_path):
    save(tmp_path, Verdict("s/tp1", "pass", "ok"))
    meta = write_report(tmp_path)
    assert meta["not_as_expected"] == [] and "**OK**" in (tmp_path / "summary.md").read_text()
