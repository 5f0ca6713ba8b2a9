"""One run configuration (harness/inputs/scenarios/request.py RunConfig): the options of `harness run`,
the pytest plugin's `--harness-*` options and the Python API's keyword arguments are its
fields, and the hidden `bisect-step` receives it whole."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path

import pytest

from harness import api, pytest_plugin
from harness.cli import build_parser
from harness.inputs.scenarios.request import RunConfig, option_of
from harness.run.bisect import StepOrder, step_command

FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}

# the API's keyword arguments that say what to run, not how: a scenario's model, settings, workloads ...
API_SCENARIO_ARGUMENTS = {
    "model",
    "settings",
    "a",
    "b",
    "scenario_id",
    "scenarios",
    "engine",
    "workloads",
    "dtype",
    "tolerances",
    "engine_options",
    "work_dir",
}
API_RUNS = (api.run_setting, api.assert_settings_agree, api.assert_matches_golden)


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_harness_run_declares_exactly_the_config_s_options_with_its_defaults():
    actions = [a for a in _subparser("run")._actions if not isinstance(a, argparse._HelpAction)]
    declared = {(a.option_strings[-1] if a.option_strings else a.dest): a for a in actions}
    flags = {option_of(f).flag: f for f in FIELDS.values()}
    assert set(declared) == set(flags), "harness run's options are RunConfig's fields, no more, no fewer"
    for flag, action in declared.items():
        f = flags[flag]
        assert action.help == option_of(f).help
        if option_of(f).cli_default is None:  # else read when the parser is made ($HARNESS_DEVICE, the reports dir)
            assert action.default == (list(f.default) if isinstance(f.default, tuple) else f.default), flag


def test_a_parsed_command_line_is_a_run_config():
    args = build_parser().parse_args(
        [
            "run",
            "llama-tiny/tp1-pp1",
            "--gate",
            "pr",
            "--timeout",
            "2.5",
            "--fault",
            "a@1",
            "--fault",
            "b@2",
            "--env",
            "A=1",
            "--jobs",
            "3",
            "-x",
            "--interaction-trials",
            "-4",
        ]
    )
    config = RunConfig.from_cli(args)
    assert (config.ids, config.gate, config.timeout_s, config.faults) == (("llama-tiny/tp1-pp1",), "pr", 2.5, ("a@1", "b@2"))
    assert (config.env, config.jobs, config.exitfirst, config.interaction_trials) == ((("A", "1"),), 3, True, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.gate = "nightly"  # type: ignore[misc]


class _Group:
    def __init__(self) -> None:
        self.options: dict[str, dict] = {}

    def addoption(self, *names: str, **kwargs) -> None:
        self.options[names[0]] = kwargs


class _Parser:
    def __init__(self) -> None:
        self.group = _Group()

    def getgroup(self, name: str) -> _Group:
        assert name == "harness"
        return self.group


def test_the_pytest_options_are_the_config_s_fields_that_declare_one():
    parser = _Parser()
    pytest_plugin.pytest_addoption(parser)
    declared = parser.group.options
    wanted = {option_of(f).pytest: f for f in FIELDS.values() if option_of(f).pytest}
    assert set(declared) == set(wanted)
    for name, kwargs in declared.items():
        f = wanted[name]
        assert kwargs["help"] == (option_of(f).pytest_help or option_of(f).help)
        default = kwargs.get("default", False if kwargs.get("action") == "store_true" else None)
        assert default == (list(f.default) if isinstance(f.default, tuple) else f.default), name
    values = {
        "--harness-timeout": 3.0,
        "--harness-fault": ["x@1"],
        "--harness-devices": 2,
        "--harness-cluster": None,
        "--harness-interaction-trials": 10,
        "--harness-allow-empty": True,
        "--harness-no-localize": True,
        "--harness-report-dir": None,
    }
    config = RunConfig.from_pytest(values.__getitem__, gate="pr")
    assert (config.timeout_s, config.faults, config.devices, config.allow_empty, config.gate) == (3.0, ("x@1",), 2, True, "pr")
    assert config.no_localize


def test_the_api_s_run_arguments_are_config_fields():
    marked = {name for name, f in FIELDS.items() if option_of(f).api}
    taken: set[str] = set()
    for call in API_RUNS:
        keywords = {n for n, p in inspect.signature(call).parameters.items()}
        unknown = keywords - API_SCENARIO_ARGUMENTS - marked
        assert not unknown, f"{call.__name__}: {sorted(unknown)} are neither RunConfig fields (api=True) nor what to run"
        taken |= keywords & marked
    assert taken == marked, f"RunConfig fields marked api that no API call takes: {sorted(marked - taken)}"


def test_the_config_goes_whole_through_json():
    config = RunConfig(
        ids=("a/b",),
        timeout_s=5.0,
        faults=["f@1"],  # type: ignore[arg-type]  # a list and a dict: the config keeps them as tuples
        env={"A": "1"},  # type: ignore[arg-type]
        device="cuda",  # type: ignore[arg-type]
        report_dir=Path("/r"),
        nodes=Path("n.yaml"),
        interaction_trials=0,
        exitfirst=True,
    )
    assert RunConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="not options of a run: bogus"):
        RunConfig.from_json('{"bogus": 1}')


def test_bisect_step_receives_its_order_whole(tmp_path):
    order = StepOrder(
        "llama-tiny/tp1-pp1",
        tmp_path / "repo",
        tmp_path / "work",
        RunConfig(timeout_s=9.0, device="cpu", interaction_trials=0),
        at_good="pass",
        at_bad="fail",
        install="make",
        count_unsupported=True,
        fixed=True,
    )
    command = step_command(["--scenarios", "/s"], order)
    assert command[-2:-1] == ["bisect-step"] and command[3:5] == ["--scenarios", "/s"]
    args = build_parser().parse_args(command[3:])
    assert StepOrder.from_json(args.order) == order
    step_options = [a for a in _subparser("bisect-step")._actions if not isinstance(a, argparse._HelpAction)]
    assert [a.dest for a in step_options] == ["order"]
