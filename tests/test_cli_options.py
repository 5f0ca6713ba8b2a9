"""Command-line options that cannot mean anything are usage errors (exit code 2 with
argparse's message), never a run that ends as a misleading verdict: `--timeout -5`
used to end as `hang`, `--timeout 0` was silently ignored, `--jobs -1` was accepted."""

import pytest

from harness.cli import build_parser
from tests.kit import harness_cli, pytest_cli


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--timeout", "-5", "a number of seconds > 0"),
        ("--timeout", "0", "a number of seconds > 0"),
        ("--timeout", "nan", "a number of seconds > 0"),
        ("--timeout", "inf", "a number of seconds > 0"),
        ("--timeout", "soon", "a number of seconds > 0"),
        ("--jobs", "-1", "an integer >= 1"),
        ("--jobs", "0", "an integer >= 1"),
        ("--devices", "0", "an integer >= 1"),
        ("--devices", "two", "an integer >= 1"),
        ("--shard", "0/4", "I/N with 1 <= I <= N"),
        ("--shard", "5/4", "I/N with 1 <= I <= N"),
        ("--shard", "1/0", "I/N with 1 <= I <= N"),
        # what the OS refuses as an environment variable: the rank used to die before its log opened
        ("--env", "=x", "the name is empty"),
        ("--env", "A\0B=1", "the name 'A\\x00B' contains a NUL byte"),
        ("--env", "A=b\0c", "the value of A contains a NUL byte"),
        ("--env", "NOVALUE", "expected KEY=VALUE"),
        # a run id names one directory under --report-dir: it used to be put wherever the path led
        ("--run-id", "../escaped", "'../escaped' is not a run id"),
        ("--run-id", "/tmp/elsewhere", "'/tmp/elsewhere' is not a run id"),
        ("--run-id", "a/b", "'a/b' is not a run id"),
        ("--run-id", "..", "'..' is not a run id"),
        ("--run-id", ".", "'.' is not a run id"),
        ("--run-id", "", "'' is not a run id"),
        ("--run-id", "nightly\n", "'nightly\\n' is not a run id"),
    ],
)
def test_invalid_run_options_are_usage_errors(capsys, option, value, message):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", option, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and message in err


def test_valid_run_options_parse_to_numbers():
    args = build_parser().parse_args(["run", "--timeout", "2.5", "--jobs", "3", "--devices", "4", "--shard", "2/4"])
    assert (args.timeout, args.jobs, args.devices, args.shard) == (2.5, 3, 4, "2/4")
    args = build_parser().parse_args(["run", "--env", "A=b=c", "--env", "EMPTY="])
    assert args.env == [("A", "b=c"), ("EMPTY", "")]
    assert build_parser().parse_args(["run", "--run-id", "Nightly_42-shard1.retry"]).run_id == "Nightly_42-shard1.retry"


@pytest.mark.e2e
def test_an_env_the_os_refuses_stops_the_run_before_anything_starts(tmp_path):
    done = harness_cli(
        "run", "llama-tiny/tp1-pp1", "--env", "=x", "--report-dir", str(tmp_path), "--run-id", "bad-env", timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "argument --env: the name is empty" in done.stderr
    assert not (tmp_path / "bad-env").exists()


@pytest.mark.e2e
def test_a_run_id_that_is_a_path_is_refused_and_nothing_is_written_outside_the_report_dir(tmp_path):
    reports = tmp_path / "reports"
    done = harness_cli("run", "llama-tiny/tp1-pp1", "--report-dir", str(reports), "--run-id", "../escaped", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "argument --run-id: '../escaped' is not a run id" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_a_pytest_run_id_that_is_a_path_is_a_usage_error(tmp_path):
    """The run id pytest's controller hands its xdist workers; set from outside, it is checked as --run-id is."""
    done = pytest_cli(
        "--collect-only",
        "-q",
        "scenarios/llama-tiny.yaml",
        "--harness-report-dir",
        str(tmp_path / "r"),
        env={"HARNESS_PYTEST_RUN_ID": "../escaped"},
        timeout=120,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "HARNESS_PYTEST_RUN_ID: '../escaped' is not a run id" in done.stderr


@pytest.mark.parametrize("option", ["--harness-timeout=-5", "--harness-timeout=0", "--harness-devices=0"])
@pytest.mark.e2e
def test_invalid_pytest_plugin_options_are_usage_errors(option):
    """pytest's exit code for a usage error is 4; collection never starts."""
    done = pytest_cli(option, "--collect-only", "-q", "scenarios/llama-tiny.yaml", timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert option.split("=")[0] in done.stderr
