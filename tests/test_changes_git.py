"""`--changed-since BASE` hands BASE to git: an option-like value must never reach git
as an option (`--output=FILE` made git write a file), and a BASE that is not a commit
is an error that says so."""

import subprocess

import pytest

from harness.cli import build_parser
from harness.inputs.scenarios.schema import ScenarioError
from harness.run.plan.changes import changed_files_since


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    git(repo, "branch", "base")
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "add", "a.py")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "change")
    return repo


def test_changed_files_since_a_branch(repo):
    assert changed_files_since("base", repo) == ["a.py"]


def test_an_option_like_base_never_reaches_git_as_an_option(repo, tmp_path):
    written = tmp_path / "written-by-git"
    with pytest.raises(ScenarioError, match="not a commit"):
        changed_files_since(f"--output={written}", repo)
    assert not written.exists()


def test_a_base_that_is_not_a_commit_is_a_clear_error(repo):
    with pytest.raises(ScenarioError, match="--changed-since no-such-branch: not a commit"):
        changed_files_since("no-such-branch", repo)


def test_the_cli_rejects_an_option_like_base(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--gate", "pr", "--changed-since=--output=x"])
    assert exit_.value.code == 2 and "argument --changed-since" in capsys.readouterr().err
