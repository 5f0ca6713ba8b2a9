"""A run's results are its own, complete or said to be incomplete, and stored or said
not to be: run directories no two runs share, reports of killed and interrupted runs
that name what never ran, exit codes CI can tell apart, provenance that is really the
harness's own (issue 12, items 1, 2, 4, 5 and 15)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import harness
from harness import exit_codes
from harness.cli import harness_versions, main
from harness.report.history import load_history

ROOT = Path(__file__).resolve().parent.parent

# A scenario that needs 2 devices, run with --devices 1: it ends `unsupported` (as
# expected) without launching a rank, so a whole `harness run` costs seconds.
CHEAP = """
suite: cheap
model: tiny-llama
workloads:
  - {name: logits, kind: logprobs, num_prompts: 1, max_prompt_tokens: 8, top_k: 5}
golden: {tp: 1, pp: 1}
matrix: {tp: [2], pp: [1]}
"""


@pytest.fixture
def cheap(tmp_path) -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "cheap.yaml").write_text(CHEAP)
    return tmp_path


def cheap_run_args(root: Path, *extra: str) -> list[str]:
    return ["--scenarios", str(root / "scenarios"), "run", "cheap/tp2-pp1", "--devices", "1",
            "--report-dir", str(root / "reports"), *extra]


def harness_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The real `harness` command, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "harness", *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def run_dirs(reports: Path) -> list[Path]:
    return sorted(p for p in reports.iterdir() if p.name != "history")


def summary(run_dir: Path) -> str:
    return (run_dir / "summary.md").read_text()


# 1. Run directories -----------------------------------------------------------------

def test_two_runs_started_in_the_same_second_get_a_directory_each(cheap, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda *a: "20260101-000000")  # both runs start "in the same second"
    assert main(cheap_run_args(cheap)) == exit_codes.OK
    assert main(cheap_run_args(cheap)) == exit_codes.OK
    first, second = run_dirs(cheap / "reports")  # two directories, not one shared
    for run_dir in (first, second):
        meta = json.loads((run_dir / "run.json").read_text())
        assert meta["run_id"] == run_dir.name and meta["scenarios"] == ["cheap/tp2-pp1"]
        assert meta["counts"] == {"unsupported": 1}
    assert len(load_history(cheap / "reports" / "history")) == 2  # each run's row kept


def test_a_run_refuses_the_directory_another_run_owns(cheap):
    first = harness_cli(*cheap_run_args(cheap, "--run-id", "same"))
    assert first.returncode == exit_codes.OK, first.stderr
    run_dir = cheap / "reports" / "same"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    second = harness_cli(*cheap_run_args(cheap, "--run-id", "same"))
    assert second.returncode == exit_codes.USAGE
    assert "already in use" in second.stderr and "--run-id" in second.stderr and "Traceback" not in second.stderr
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before  # the first run's results are untouched


def test_of_runs_racing_for_one_run_id_exactly_one_gets_it(tmp_path):
    from harness.rundir import RunDirTaken, claim_run_dir

    won, refused = [], []
    start = threading.Barrier(8)

    def claim(i):
        start.wait()
        try:
            won.append(claim_run_dir(tmp_path, "same", {"scenarios": [f"s/{i}"]}))
        except RunDirTaken:
            refused.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7


# 15. Provenance ---------------------------------------------------------------------

def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_copy_inside_another_git_repository_records_no_commit(tmp_path):
    outer = tmp_path / "monorepo"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "README").write_text("another project")
    git(outer, "add", "README")
    git(outer, "commit", "-q", "-m", "another project's commit")
    outer_commit = git(outer, "rev-parse", "--short", "HEAD")
    copy = outer / "vendor" / "harness-copy"  # the project copied in, no .git of its own
    shutil.copytree(ROOT / "harness", copy / "harness", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    code = "import json; from harness.cli import harness_versions; print(json.dumps(harness_versions()))"
    result = subprocess.run([sys.executable, "-c", code], cwd=copy, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(copy)}, check=True)
    versions = json.loads(result.stdout)
    assert versions["harness_commit"] == "unknown" and outer_commit not in result.stdout
    assert versions["harness_version"] == harness.__version__


def test_the_projects_own_checkout_records_its_commit_and_version():
    toplevel = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=False, cwd=ROOT, capture_output=True, text=True)
    if toplevel.returncode != 0 or Path(toplevel.stdout.strip()).resolve() != ROOT.resolve():
        pytest.skip("this copy of the project is not a git checkout of its own")
    versions = harness_versions()
    assert versions["harness_commit"] == git(ROOT, "rev-parse", "--short", "HEAD")
    assert versions["harness_version"] == harness.__version__
