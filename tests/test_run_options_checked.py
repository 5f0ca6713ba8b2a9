"""A run option is checked once, by RunConfig (harness/run/request.py), whichever way
it is given: `harness run`'s flags, the pytest plugin's `--harness-*` options and harness.api's
keyword arguments refuse the same values with the same words. The API used
to take them unchecked: `timeout_s=-5` ended `hang` blamed on the engine, `timeout_s=nan` ran
with no timeout, `timeout_s="5"` was an `error` with a TypeError inside, `device="tpu"` an engine
`crash`, `faults="pp-buffer-missing-key"` was split into characters; pytest's `--harness-fault
nosuch` was an `error` per scenario (exit 1), and `--interaction-trials -1` was silently 0."""

from __future__ import annotations

import pytest

from harness import api
from harness.cli import build_parser
from harness.contract.verdict import Verdict
from harness.run.request import RunConfig, RunOptionError
from tests.kit import pytest_cli
from tests.test_pytest_plugin import PLUGIN, demo, plugin_imports_loaded, runner  # noqa: F401 - fixtures

pytest_plugins = ["pytester"]

# (keyword, a value the API used to take, the words every way in refuses it with)
BAD_API_VALUES = [
    ("timeout_s", -5, "timeout_s (--timeout, --harness-timeout): expected a number of seconds > 0, got -5"),
    ("timeout_s", 0, "expected a number of seconds > 0, got 0"),
    ("timeout_s", float("nan"), "expected a number of seconds > 0, got nan"),
    ("timeout_s", float("inf"), "expected a number of seconds > 0, got inf"),
    ("timeout_s", "5", "expected a number of seconds > 0, got '5'"),
    ("timeout_s", True, "expected a number of seconds > 0, got True"),
    ("device", "tpu", "device (--device): expected one of cpu, cuda, got 'tpu'"),
    ("faults", ["rank-raise@1", ""], "faults (--fault, --harness-fault): expected a non-empty string, got ''"),
    ("faults", 3, "faults (--fault, --harness-fault): expected a list of values, got 3"),
]


@pytest.mark.parametrize("keyword, value, message", BAD_API_VALUES)
def test_the_api_refuses_a_run_option_before_anything_is_written(tmp_path, keyword, value, message):
    for call in (
        lambda: api.run_setting("tiny-llama", {"tp": 1}, work_dir=tmp_path / "work", **{keyword: value}),
        lambda: api.assert_matches_golden("llama-tiny/tp1-pp1", report_dir=tmp_path / "reports", **{keyword: value}),
    ):
        with pytest.raises(RunOptionError, match="run option .*") as refused:
            call()
        assert message in str(refused.value)
        assert isinstance(refused.value, ValueError)  # what docs/API.md says a bad input raises
    assert not tmp_path.joinpath("work").exists() and not tmp_path.joinpath("reports").exists()


def test_a_fault_no_engine_of_the_scenario_takes_is_refused_as_harness_run_refuses_it(tmp_path):
    with pytest.raises(RunOptionError, match="faults for engine 'reference': unknown fault 'nosuch'; the reference engine knows"):
        api.assert_matches_golden("llama-tiny/tp1-pp1", faults=["nosuch"], report_dir=tmp_path / "reports")
    assert not tmp_path.joinpath("reports").exists()  # refused before the run directory was claimed


def test_one_fault_given_as_a_string_is_that_fault_never_its_characters(tmp_path, monkeypatch):
    assert RunConfig(faults="pp-buffer-missing-key").faults == ("pp-buffer-missing-key",)  # type: ignore[arg-type]
    given = []

    def stand_in(scenario, run_dir, ctx, lease=None):
        given.append(ctx.config.faults)
        return Verdict(scenario.id, "pass", "ok")

    monkeypatch.setattr("harness.api.run_scenario", stand_in)
    api.assert_matches_golden("llama-tiny/tp1-pp2", faults="pp-buffer-missing-key", work_dir=tmp_path)  # type: ignore[arg-type]
    assert given == [("pp-buffer-missing-key",)]


def test_the_api_s_env_is_the_run_s_env_as_harness_run_env_is(tmp_path, monkeypatch):
    """env= travels as RunConfig.env (every rank's, over the scenario's), in every call that
    runs: assert_matches_golden did not take it, run_setting made it the scenario's."""
    given = []

    def stand_in(scenario, run_dir, ctx, lease=None):
        given.append(ctx.config.env_vars)
        return Verdict(scenario.id, "pass", "ok")

    monkeypatch.setattr("harness.api.run_scenario", stand_in)
    api.assert_matches_golden("llama-tiny/tp1-pp1", env={"A": "1"}, work_dir=tmp_path)
    assert given == [{"A": "1"}]
    with pytest.raises(RunOptionError, match="run option env \\(--env\\)"):
        api.run_setting("tiny-llama", {"tp": 1}, env={"": "x"}, work_dir=tmp_path / "work")


@pytest.mark.parametrize(
    "field, value, flag, text",
    [
        ("timeout_s", -5.0, "--timeout", "-5"),
        ("jobs", 0, "--jobs", "0"),
        ("devices", -1, "--devices", "-1"),
        ("interaction_trials", -1, "--interaction-trials", "-1"),
        ("run_id", "../escaped", "--run-id", "../escaped"),
        ("changed_since", "-x", "--changed-since", "-x"),
        ("env", [("", "x")], "--env", "=x"),
    ],
)
def test_the_cli_and_a_run_config_made_in_code_refuse_a_value_with_the_same_words(capsys, field, value, flag, text):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", f"{flag}={text}"])
    assert exit_.value.code == 2
    cli_said = capsys.readouterr().err.split(f"argument {flag}: ")[1].strip()
    with pytest.raises(RunOptionError) as refused:
        RunConfig(**{field: value})
    expected = cli_said.split(", got ")[0] if ", got " in cli_said else cli_said
    assert expected in str(refused.value) and flag in str(refused.value)


def test_a_negative_interaction_trials_is_refused_not_taken_for_0(demo):  # noqa: F811
    """--jobs -1 was refused and --interaction-trials -1 quietly meant 0."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--interaction-trials", "-1"])
    assert build_parser().parse_args(["run", "--interaction-trials", "0"]).interaction_trials == 0
    result = demo.runpytest_inprocess(*PLUGIN, "--harness-interaction-trials=-1", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--harness-interaction-trials*expected an integer >= 0*"])


def test_a_fault_no_collected_scenario_s_engine_takes_is_one_usage_error(demo, runner, tmp_path):  # noqa: F811
    """As `harness run --fault nosuch` (exit 2): pytest's usage error, once, and no item runs."""
    result = demo.runpytest_inprocess(*PLUGIN, "--harness-fault", "nosuch", f"--harness-report-dir={tmp_path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --harness-fault for engine 'reference': unknown fault 'nosuch'*"])
    assert runner.calls == [] and (result.stdout.str() + result.stderr.str()).count("unknown fault 'nosuch'") == 1


def test_a_fault_an_engine_takes_reaches_the_runner(demo, runner, tmp_path):  # noqa: F811
    runner.given["tp1-pp1"] = Verdict("", "pass", "ok")
    result = demo.runpytest_inprocess(
        *PLUGIN, "scenarios/demo.yaml::tp1-pp1", "--harness-fault", "rank-raise@1", f"--harness-report-dir={tmp_path}"
    )
    assert result.ret == pytest.ExitCode.OK
    assert [ctx.config.faults for _, _, ctx in runner.calls] == [("rank-raise@1",)]


@pytest.mark.e2e
def test_under_xdist_a_fault_no_engine_takes_is_one_usage_error(tmp_path):
    """xdist's workers collect; the controller refuses the fault once (a worker's usage error
    would be an INTERNALERROR of the session)."""
    done = pytest_cli(
        "-p",
        "xdist",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "scenarios/llama-tiny.yaml::tp1-pp1",
        "scenarios/llama-tiny.yaml::tp2-pp1",
        "--harness-fault",
        "nosuch",
        "--harness-report-dir",
        str(tmp_path / "r"),
        timeout=300,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--harness-fault for engine 'reference': unknown fault 'nosuch'" in done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
