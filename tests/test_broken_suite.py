"""One broken scenario file fails alone (harness/inputs/scenarios/loading.py): beside it every other
suite lists and runs; the broken one is named with its file and field, counts as `error`
wherever a request could have picked it, and the exit code says something was wrong."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract.roots import builtin_scenarios
from harness.inputs.scenarios.loading import load_catalog

BROKEN = """suite: typo-suite
model: tiny-lama
workloads: [{name: logits, kind: logprobs}]
golden: {tp: 1}
matrix: {tp: [1, 2]}
gates: {pr: ["*"]}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose scenario directory holds llama-tiny.yaml and a file with a typo'd model."""
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_HISTORY_DIR"):
        monkeypatch.delenv(name, raising=False)
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(builtin_scenarios() / "llama-tiny.yaml", scenarios)
    (scenarios / "typo.yaml").write_text(BROKEN)
    (scenarios / "not-yaml.yaml").write_text("suite: [unclosed\n")
    (tmp_path / "harness.toml").write_text('scenarios = "scenarios"\nbuiltin_suites = false\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_catalog_keeps_every_good_suite_and_names_each_broken_file(project):
    catalog = load_catalog()
    assert {s.suite.suite for s in catalog.scenarios} == {"llama-tiny"}
    broken = {b.path.name: b for b in catalog.broken}
    assert set(broken) == {"typo.yaml", "not-yaml.yaml"}
    typo = broken["typo.yaml"]
    assert typo.suite == "typo-suite" and typo.gates == frozenset({"pr"})
    assert "model: unknown model 'tiny-lama'" in typo.problem and str(typo.path) in typo.problem
    assert broken["not-yaml.yaml"].suite == "not-yaml" and broken["not-yaml.yaml"].gates is None
    assert "not valid YAML" in broken["not-yaml.yaml"].problem
    # who could have picked it: its suite, a glob over ids, a gate it is in; not another suite's id
    assert typo.could_be_in(["typo-suite/tp2"], None) and typo.could_be_in(["*tp1*"], None)
    assert typo.could_be_in(None, "pr") and not typo.could_be_in(None, "vllm")
    assert not typo.could_be_in(["llama-tiny/tp1-pp1"], None) and not typo.could_be_in(["llama-tiny"], "pr")


def test_list_shows_the_good_suites_and_says_what_is_wrong_with_the_other(project, capsys):
    assert main(["list"]) == 2  # the listing is not the whole answer
    out, err = capsys.readouterr()
    assert "llama-tiny/tp1-pp1 " in out and "typo-suite" not in out
    assert "typo.yaml: invalid scenario file:\n  model: unknown model 'tiny-lama'" in err
    assert "not-yaml.yaml: not valid YAML" in err
    assert main(["list", "llama-tiny/*", "--ids-only"]) == 0  # nothing broken was asked for
    assert "llama-tiny/tp1-pp1\n" in capsys.readouterr().out
    # an id of the broken suite is not "no such scenario": it says the file's problem
    assert main(["repro", "typo-suite/tp1"]) == 2
    assert "whose file cannot be used" in capsys.readouterr().err


@pytest.mark.e2e  # real ranks
def test_run_of_a_good_scenario_works_and_a_broken_suite_asked_for_is_an_error(project, capsys):
    assert main(["run", "llama-tiny/tp1-pp1", "--run-id", "good"]) == 0
    verdicts = sorted(p.parent.name for p in (project / "reports" / "good").rglob("verdict.json"))
    assert verdicts == ["llama-tiny__tp1-pp1"]

    assert main(["run", "llama-tiny/tp1-pp1", "typo-*", "--run-id", "both"]) == 1
    run_dir = project / "reports" / "both"
    error = json.loads(next(run_dir.rglob("typo-suite__scenario-file/verdict.json")).read_text())
    assert error["verdict"] == "error" and "unknown model 'tiny-lama'" in error["reason"]
    assert json.loads((run_dir / "scenarios" / "llama-tiny__tp1-pp1" / "verdict.json").read_text())["verdict"] == "pass"
    assert "typo-suite/scenario-file" in (run_dir / "summary.md").read_text()


def test_report_of_a_run_needs_no_scenario_file(project, tmp_path, capsys):
    """`harness report RUN_DIR` reads the run directory only: a broken file does not stop it."""
    run_dir = project / "reports" / "r1"
    (run_dir / "scenarios").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": "r1", "scenarios": [], "started": 0.0}))
    code = main(["report", str(run_dir)])
    err = capsys.readouterr().err
    assert "scenario file" not in err and code == 0


@pytest.mark.e2e  # the harness CLI as a process
def test_make_keeps_the_targets_of_the_good_suites(project):
    """The Makefile reads the ids with `harness list --ids-only`: a broken file beside
    llama-tiny.yaml leaves llama-tiny's ids on stdout and its error on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--ids-only"],
        capture_output=True,
        text=True,
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert "llama-tiny/tp2-pp2" in done.stdout.split() and "unknown model 'tiny-lama'" in done.stderr
