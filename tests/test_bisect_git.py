"""`harness bisect --git`: a real bisect, end to end, over a git range of an engine
package made here (a copy of examples/engine-tp-plan): good commits, one that brings a
real numeric bug into the tensor-parallel load (a wrong shard scale on tp ranks), a
couple after it. The harness runs as a subprocess; `git bisect run` runs
`harness bisect-step` with the copy first on PYTHONPATH, and the ranks (which alone run
worker.py, where the bug is) inherit it: the bisect can only name the bug commit when
the ranks import the copy. No mocks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "engine-tp-plan"
SCENARIOS = EXAMPLE / "scenarios"

needs_tp_plan = pytest.mark.skipif(
    not any(ep.name == "tp-plan" for ep in entry_points(group="harness.engines")),
    reason="the example engine's entry point is not installed: pip install -e examples/engine-tp-plan (make install)",
)

# The bug: someone believed the all-reduce after a row-parallel linear averages, and
# pre-divided each rank's down_proj shard by tp. At tp=1 nothing changes; at tp=2 every
# MLP output is halved. A real numeric bug of the tp plan's load path.
GOOD_LOAD = "    return model.eval()\n"
BUGGY_LOAD = """    with torch.no_grad():  # the all-reduce of the row-parallel down_proj averages the shards (it does not: it sums)
        for name, param in model.named_parameters():
            if name.endswith("mlp.down_proj.weight"):
                param.to_local().div_(brief.axes.tp)
    return model.eval()
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def engine_repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "engine"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    git(repo, "init", "-q", "-b", "main")
    commits = {"first": commit(repo, "the tp-plan engine")}
    readme = repo / "README.md"
    readme.write_text(readme.read_text() + "\nA note.\n")
    commits["docs"] = commit(repo, "docs: a note")
    worker = repo / "harness_tp_plan" / "worker.py"
    source = worker.read_text()
    assert source.count(GOOD_LOAD) == 1
    worker.write_text(source.replace(GOOD_LOAD, BUGGY_LOAD))
    commits["bug"] = commit(repo, "load: scale the row-parallel shards for the all-reduce")
    readme.write_text(readme.read_text() + "\nAnother note.\n")
    commits["after"] = commit(repo, "docs: another note")
    init = repo / "harness_tp_plan" / "__init__.py"
    init.write_text(init.read_text() + "\n# the end\n")
    commits["last"] = commit(repo, "a comment")
    return repo, commits


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "harness", "--scenarios", str(SCENARIOS), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.e2e
@needs_tp_plan
def test_bisect_over_a_git_range_names_the_commit_that_brought_the_bug(tmp_path):
    repo, commits = engine_repo(tmp_path)
    start = time.monotonic()
    done = harness(
        "bisect",
        "tp-plan/tp2",
        "--git",
        str(repo),
        "--good",
        commits["first"],
        "--bad",
        commits["last"],
        "--work-dir",
        str(tmp_path / "work"),
        cwd=tmp_path,
    )
    took = time.monotonic() - start
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    steps = [line for line in out.splitlines() if line.startswith("bisect: ") and "->" in line]
    assert len(steps) >= 3, out  # good, bad, then git bisect run's own
    assert steps[0].split()[1] == commits["first"][:10] and " pass " in steps[0] and "-> good" in steps[0]
    assert steps[1].split()[1] == commits["last"][:10] and " fail " in steps[1] and "-> bad" in steps[1]
    assert f"first bad: {commits['bug'][:7]}" in out and "load: scale the row-parallel shards" in out, out
    assert "verdict fail" in out and "the one before it" in out
    # the bisect's end calls harness repro, which declines an engine without a repro hook
    assert "reproduction not written: engine 'tp-plan' cannot write a reproduction" in out, out
    # the checkout is left as it was: on its branch, no bisect under way, nothing changed
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == commits["last"]
    assert not (repo / ".git" / "BISECT_LOG").exists() and git(repo, "status", "--porcelain") == ""
    print(out + f"\nbisect of {len(steps)} steps took {took:.0f}s")


@pytest.mark.e2e
def test_bisect_refuses_when_good_and_bad_give_the_same_verdict(tmp_path):
    """The reference engine is built in: the checkout changes nothing, both ends pass."""
    repo = tmp_path / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("1\n")
    first = commit(repo, "one")
    (repo / "a.txt").write_text("2\n")
    last = commit(repo, "two")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "bisect",
            "llama-tiny/tp1-pp1",
            "--git",
            str(repo),
            "--good",
            first,
            "--bad",
            last,
            "--work-dir",
            str(tmp_path / "work"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the bad end" in done.stderr and "must end other than the good end (pass), and it ended pass too" in done.stderr
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main" and not (repo / ".git" / "BISECT_LOG").exists()


@pytest.mark.e2e
@pytest.mark.nightly_only  # 48 s; make test keeps the git-range bisect above and --fixed over releases
# (test_bisect.py::test_harness_bisect_fixed_finds_the_release_that_fixed_a_bug): this is their meeting
@needs_tp_plan
def test_bisect_fixed_over_a_git_range_names_the_commit_that_fixed_the_bug(tmp_path):
    """The same engine with the bug taken out again two commits later: --fixed, from the
    bug (bad, older) to the last commit (good, newer), names the commit that took it out."""
    repo, commits = engine_repo(tmp_path)
    worker = repo / "harness_tp_plan" / "worker.py"
    worker.write_text(worker.read_text().replace(BUGGY_LOAD, GOOD_LOAD))
    commits["fix"] = commit(repo, "load: the all-reduce sums the shards; do not scale them")
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA last note.\n")
    commits["end"] = commit(repo, "docs: a last note")
    done = harness(
        "bisect",
        "tp-plan/tp2",
        "--git",
        str(repo),
        "--fixed",
        "--bad",
        commits["bug"],
        "--good",
        commits["end"],
        "--work-dir",
        str(tmp_path / "work"),
        cwd=tmp_path,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert f"the next one, {commits['fix'][:7]} load: the all-reduce sums" in out, out
    assert f"(the change is in {commits['fix'][:7]}" in out and "last bad: " in out
    assert git(repo, "rev-parse", "HEAD") == commits["end"] and not (repo / ".git" / "BISECT_LOG").exists()


@pytest.mark.e2e
def test_a_git_bisect_whose_good_end_crashes_stops_at_once(tmp_path):
    """The reference engine with rank 0 made to raise ($HARNESS_RANK_FAULT, inherited by the
    steps and their ranks): the good end crashes, the bisect stops saying so, exit 2, with
    the bad end never run and the checkout as it was."""
    repo = tmp_path / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for n in (1, 2, 3):
        (repo / "a.txt").write_text(f"{n}\n")
        commit(repo, str(n))
    first, last = git(repo, "rev-list", "--max-parents=0", "HEAD"), git(repo, "rev-parse", "HEAD")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HARNESS_RANK_FAULT": "raise@0",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "bisect",
            "llama-tiny/tp1-pp1",
            "--git",
            str(repo),
            "--good",
            first,
            "--bad",
            last,
            "--work-dir",
            str(tmp_path / "work"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"the good end ({first[:10]}) must end pass, and it ended crash (RuntimeError), not pass" in done.stderr, done.stderr
    assert f"bad {last[:10]}: not run" in done.stderr and "--good-verdict crash" in done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("bisect: ") and "->" in line]
    assert len(steps) == 1 and "-> stop" in steps[0], done.stdout
    assert [p.name for p in (tmp_path / "work").iterdir()] == [first[:12]]  # only the good end ran
    assert git(repo, "rev-parse", "HEAD") == last and not (repo / ".git" / "BISECT_LOG").exists()
