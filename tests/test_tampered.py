"""A verdict file edited after the harness wrote it is not believed (harness/contract/verdict.py):
`harness report` used to say OK, exit 0, and rewrite the history row to pass when a failing
run's verdict.json was edited to `"verdict": "pass"`. It is read as `error`, TAMPERED."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.contract.rundir import verdict_path
from harness.contract.verdict import Verdict
from harness.run.report.history import load_history
from tests.kit.handmade import crashed, failing, make_run, passing


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
    assert loaded.error is not None
    assert loaded.verdict == "error" and loaded.error["kind"] == "tampered"
    assert "its digest does not match its content" in loaded.reason and "it now says 'pass" in loaded.reason


def test_an_untouched_verdict_and_an_old_failure_without_digest_load_as_written(tmp_path):
    run_dir = make_run(tmp_path, "r1", [failing("s/tp2-pp1"), passing("s/tp1-pp1")])
    for scenario, expected in (("s/tp2-pp1", "fail"), ("s/tp1-pp1", "pass")):
        assert Verdict.load(verdict_path(run_dir, scenario)).verdict == expected
    path = verdict_path(run_dir, "s/tp2-pp1")
    data = json.loads(path.read_text())
    data.pop("digest")  # a failure without a digest stops the gate as it says: believed
    path.write_text(json.dumps(data))
    assert Verdict.load(path).verdict == "fail"


@pytest.mark.parametrize("digest", ["deleted", None])
def test_a_crash_edited_to_pass_without_its_digest_is_no_proof(tmp_path, capsys, digest):
    """A crash's verdict.json set to pass, as_expected true, crash null, and
    its digest deleted (or null) was read as a pass: `harness report` said OK, exit 0, and
    rewrote the history row to pass; `report --merge` said OK too."""
    run_dir = make_run(tmp_path, "r1", [crashed("s/tp1-pp1", rank=0), passing("s/tp2-pp1")])
    path = verdict_path(run_dir, "s/tp1-pp1")
    data = json.loads(path.read_text())
    data.update(verdict="pass", as_expected=True, crash=None)
    if digest == "deleted":
        del data["digest"]
    else:
        data["digest"] = None
    path.write_text(json.dumps(data))
    loaded = Verdict.load(path)
    assert loaded.error is not None
    assert loaded.verdict == "error" and loaded.error["kind"] == "tampered"
    assert "carries no digest" in loaded.reason
    assert main(["report", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED" in out and "OK" not in out.split("\n")[0]
    rows = load_history(tmp_path / "history").set_index("scenario")
    assert rows.loc["s/tp1-pp1", "verdict"] == "error" and rows.loc["s/tp2-pp1", "verdict"] == "pass"
    other = make_run(tmp_path, "r2", [passing("s/tp1-pp2")])  # the other shard of the run
    assert main(["report", "--merge", str(run_dir), str(other), "-o", str(tmp_path / "merged")]) == 1
    assert "TAMPERED" in capsys.readouterr().out
