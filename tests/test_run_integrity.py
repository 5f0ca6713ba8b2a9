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
from pathlib import Path

import pytest

import harness
from harness.cli import harness_versions

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
