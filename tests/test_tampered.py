"""A verdict file edited after the harness wrote it is not believed (harness/verdict.py):
`harness report` used to say OK, exit 0, and rewrite the history row to pass when a failing
run's verdict.json was edited to `"verdict": "pass"`. It is read as `error`, TAMPERED."""

from __future__ import annotations

import json

from harness.cli import main
from harness.report.history import load_history
from harness.rundir import verdict_path
from harness.verdict import Verdict
from tests.kit.handmade import failing, make_run, passing


def _edit(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_a_failure_edited_to_pass_is_reported_tampered(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r1", [failing("s/tp2-pp1"), passing("s/tp1-pp1")])
    _edit(verdict_path(run_dir, "s/tp2-pp1"), verdict="pass", reason="all good")
    assert main(["report", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED" in out and "OK" not in out.split("\n")[0]
    rows = load_history(tmp_path / "history").set_index("scenario")
    assert rows.loc["s/tp2-pp1", "verdict"] == "error" and rows.loc["s/tp1-pp1", "verdict"] == "pass"


def test_an_edit_the_checks_agree_with_is_caught_by_the_digest(tmp_path):
    run_dir = make_run(tmp_path, "r1", [failing("s/tp2-pp1")])
    path = verdict_path(run_dir, "s/tp2-pp1")
    data = json.loads(path.read_text())
    _edit(path, verdict="pass", checks=[{**c, "passed": True} for c in data["checks"]])
    loaded = Verdict.load(path)
    assert loaded.verdict == "error" and loaded.error["kind"] == "tampered"
    assert "its digest does not match its content" in loaded.reason and "it now says 'pass" in loaded.reason


def test_an_untouched_verdict_and_an_old_one_without_digest_load_as_written(tmp_path):
    run_dir = make_run(tmp_path, "r1", [failing("s/tp2-pp1"), passing("s/tp1-pp1")])
    for scenario, expected in (("s/tp2-pp1", "fail"), ("s/tp1-pp1", "pass")):
        path = verdict_path(run_dir, scenario)
        assert Verdict.load(path).verdict == expected
        data = json.loads(path.read_text())
        data.pop("digest")  # written before verdicts carried one: still checked for contradictions
        path.write_text(json.dumps(data))
        assert Verdict.load(path).verdict == expected
