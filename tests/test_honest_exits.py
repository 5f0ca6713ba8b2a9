"""The exit codes README.md promises, with the real command: 2 for bad input, 3 for files
the harness could not write, with a message naming what; never a traceback (exit 1), never
silence (exit 0) (docs/RELIABILITY.md, "Bad input and faults, third probe")."""

from __future__ import annotations

import json

import pytest

from tests.kit import harness_cli, pytest_cli
from tests.kit.cli import environment, harness_command
from tests.kit.timing import run_process


def said(result) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result.stderr


def test_a_golden_whose_cache_is_a_file_is_exit_3_naming_it(tmp_path):
    """`HARNESS_CACHE=/some/file harness golden SUITE` ended in a
    NotADirectoryError traceback from the zoo's model_dir, exit 1. The variable is refused at
    the start now (test_a_bad_variable_stops_a_run_before_anything_starts); the project
    config's `cache` is a file here, which only writing finds: exit 3 naming the path."""
    (tmp_path / "harness.toml").write_text('cache = "a-file"\n')
    (tmp_path / "a-file").write_text("")
    result = run_process(
        harness_command("golden", "llama-tiny"),
        600,
        "harness golden",
        cwd=tmp_path,
        env=environment({"HARNESS_CACHE": None, "HARNESS_GOLDEN_DIR": None}),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    err = said(result)
    assert (
        f"golden llama-tiny not made: the harness could not write its files: [Errno 20] Not a directory: '{tmp_path / 'a-file'}/"
        in err
    )


@pytest.mark.parametrize("out", ["/dev/full", "missing/dir/x.json"])
def test_durations_that_cannot_be_written_are_exit_3_naming_the_file(tmp_path, out):
    """`harness durations --out /dev/full` (or into a missing directory)
    ended in an OSError / FileNotFoundError traceback, exit 1."""
    target = out if out.startswith("/") else str(tmp_path / out)
    (tmp_path / "reports").mkdir()
    result = harness_cli("durations", "--report-dir", str(tmp_path / "reports"), "--out", target)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"harness: could not write the durations file {target}: " in said(result)


def test_durations_are_written_as_before(tmp_path):
    (tmp_path / "reports").mkdir()
    result = harness_cli("durations", "--report-dir", str(tmp_path / "reports"), "--out", str(tmp_path / "d.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "d.json").read_text()) == {}


def test_durations_of_a_report_dir_that_does_not_exist_are_exit_2(tmp_path):
    """`harness durations --report-dir /nonexistent` said "0 scenario
    durations", wrote `{}` and exited 0: a typo in the path was silence."""
    out = tmp_path / "d.json"
    result = harness_cli("durations", "--out", str(out), "--report-dir", str(tmp_path / "nonexistent"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"harness: the report dir {tmp_path / 'nonexistent'} does not exist: no runs to read durations from" in said(result)
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("HARNESS_STALL_WINDOW_S", "abc", "HARNESS_STALL_WINDOW_S='abc': expected a number >= 0"),
        ("HARNESS_JOBS", "0", "HARNESS_JOBS='0': expected an integer >= 1"),
        ("HARNESS_DEVICE", "gpu", "HARNESS_DEVICE='gpu': expected one of cpu, cuda"),
        ("HARNESS_RANK_POOL", "false", "HARNESS_RANK_POOL='false': expected 0 (off) or 1 (on)"),
        ("HARNESS_CACHE", "{file}", "HARNESS_CACHE='{file}' is not a directory"),
    ],
)
def test_a_bad_variable_stops_a_run_before_anything_starts(tmp_path, name, value, message):
    """HARNESS_STALL_WINDOW_S=abc was found only as an `error` verdict once
    the ranks had started. Every registered variable's value is checked before the run
    directory is claimed: exit 2 naming it, nothing written."""
    (tmp_path / "file").write_text("")
    value, message = value.replace("{file}", str(tmp_path / "file")), message.replace("{file}", str(tmp_path / "file"))
    result = harness_cli("run", "llama-tiny/tp1-pp1", "--report-dir", str(tmp_path / "reports"), env={name: value})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"harness: {message}" in said(result)
    assert not (tmp_path / "reports").exists()


def test_harness_env_shows_what_is_wrong_with_a_value():
    result = harness_cli("env", env={"HARNESS_STALL_WINDOW_S": "abc"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WRONG: HARNESS_STALL_WINDOW_S='abc': expected a number >= 0" in result.stdout


def test_a_bad_variable_is_a_pytest_usage_error(tmp_path):
    """The same check where pytest is the way in: its usage error (4) before collection."""
    done = pytest_cli(
        "--collect-only",
        "-q",
        "scenarios/llama-tiny.yaml",
        "--harness-report-dir",
        str(tmp_path / "r"),
        env={"HARNESS_STALL_WINDOW_S": "abc"},
        timeout=120,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "HARNESS_STALL_WINDOW_S='abc': expected a number >= 0" in done.stderr


def harness_in(project_dir, *args):
    """`harness ARGS` run from `project_dir`, whose config it reads."""
    return run_process(
        harness_command(*args),
        600,
        f"harness {args[0]}",
        cwd=project_dir,
        env=environment({"HARNESS_CACHE": None, "HARNESS_GOLDEN_DIR": None, "HARNESS_REPORTS_DIR": None}),
        capture_output=True,
        text=True,
    )


def test_init_writes_the_scenario_file_where_the_project_config_reads(tmp_path):
    """With `scenarios = ["scen"]` and `builtin_suites = false`, `harness
    init` wrote scenarios/tiny-llama.yaml; `harness list` then printed nothing (exit 0) and the
    suggested `harness golden tiny-llama` said "unknown suites (known: )", exit 2."""
    (tmp_path / "harness.toml").write_text('scenarios = ["scen"]\ngolden = "g"\nbuiltin_suites = false\n')
    done = harness_in(tmp_path, "init", "--model", "tiny-llama")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"wrote {tmp_path / 'scen' / 'tiny-llama.yaml'}" in done.stdout
    assert "(commit g/tiny-llama)" in done.stdout and "`pytest scen/`" in done.stdout
    assert not (tmp_path / "scenarios").exists()
    listed = harness_in(tmp_path, "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "tiny-llama/tp1-pp1 " in listed.stdout


def test_init_in_a_project_that_reads_only_files_is_exit_2_writing_nothing(tmp_path):
    (tmp_path / "harness.toml").write_text('scenarios = ["a.yaml"]\nbuiltin_suites = false\n')
    (tmp_path / "a.yaml").write_text("")
    done = harness_in(tmp_path, "init", "--model", "tiny-llama")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"harness init: the project config {tmp_path / 'harness.toml'} reads scenario files only from a.yaml: "
        "a new file would never be read"
    ) in said(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "harness.toml"]
