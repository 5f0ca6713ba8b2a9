"""One run configuration (harness/run/request.py RunConfig): the options of `harness run`,
the pytest plugin's `--harness-*` options and the Python API's keyword arguments are its
fields, and the hidden `bisect-step` receives it whole."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from harness import api, pytest_plugin
from harness.cli import build_parser
from harness.run import session
from harness.run.bisect import StepOrder, step_command
from harness.run.request import RunConfig, RunOptionError, option_of

FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}

# each API call that runs, the typed dict of the run options it takes, and how it is called
API_RUNS: dict[Callable[..., object], tuple[Any, tuple]] = {
    api.run_setting: (api.RunOptions, ("tiny-llama", {"tp": 1})),
    api.assert_settings_agree: (api.ReportedRunOptions, ("tiny-llama", {"tp": 1}, {"tp": 2})),
    api.assert_matches_golden: (api.ReportedRunOptions, ("llama-tiny/tp1-pp1",)),
}


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
        # none read when the parser is made: a default of where the run is comes from the RunConfig
        assert action.default == (list(f.default) if isinstance(f.default, tuple) else f.default), flag


DEFAULTS_OF_WHERE_THE_RUN_IS = {"HARNESS_DEVICE": "cuda", "HARNESS_JOBS": "3"}


def _the_defaults_of_where_the_run_is(config: RunConfig, reports: Path) -> None:
    assert (config.device, config.jobs, config.report_dir) == ("cuda", 3, reports)


def test_a_default_of_where_the_run_is_is_declared_once_and_read_by_every_way_in(tmp_path, monkeypatch):
    """$HARNESS_DEVICE, $HARNESS_JOBS and $HARNESS_REPORTS_DIR are read by the RunConfig's
    declaration (Option.default_from), so `harness run`, pytest and code made configs agree:
    `--jobs`'s default was filled in by cli/run.py, the report dir's in four places."""
    for name, value in DEFAULTS_OF_WHERE_THE_RUN_IS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARNESS_REPORTS_DIR", str(tmp_path))
    declared = {name for name, f in FIELDS.items() if option_of(f).default_from}
    assert declared == {"device", "jobs", "report_dir"}
    _the_defaults_of_where_the_run_is(RunConfig(), tmp_path)
    _the_defaults_of_where_the_run_is(RunConfig.from_cli(build_parser().parse_args(["run"])), tmp_path)
    _the_defaults_of_where_the_run_is(RunConfig.from_pytest(lambda option: None), tmp_path)
    given = RunConfig.from_cli(build_parser().parse_args(["run", "--jobs", "2", "--device", "cpu", "--report-dir", "r"]))
    assert (given.device, given.jobs, given.report_dir) == ("cpu", 2, Path("r"))


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
            "4",
        ]
    )
    config = RunConfig.from_cli(args)
    assert (config.ids, config.gate, config.timeout_s, config.faults) == (("llama-tiny/tp1-pp1",), "pr", 2.5, ("a@1", "b@2"))
    assert (config.env, config.jobs, config.exitfirst, config.interaction_trials) == ((("A", "1"),), 3, True, 4)
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
    pytest_plugin.pytest_addoption(cast(pytest.Parser, parser))  # a stand-in with what the hook uses
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


def test_the_plugin_reads_its_options_through_the_run_config_never_by_their_flags():
    """The session's options come from its RunConfig (`_run_config`), and a message names an
    option as its declaration does: no `--harness-*` flag is written out as a string in the
    plugin, so renaming one in RunConfig cannot leave a lookup of the old name behind."""
    source = Path(pytest_plugin.__file__).read_text()
    flags = sorted(flag for f in FIELDS.values() if (flag := option_of(f).pytest))
    assert not [flag for flag in flags if f'"{flag}"' in source or f"'{flag}'" in source]


def test_the_api_takes_its_run_options_once_through_a_typed_dict_of_config_fields():
    """The run calls repeated the run options' keyword list each (and the planner a third
    time); now each takes `**options: Unpack[<typed dict>]`, whose names are RunConfig's."""
    for call, (options, _) in API_RUNS.items():
        parameters = inspect.signature(call).parameters
        assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
        assert str(parameters["options"].annotation) == f"Unpack[{options.__name__}]", call.__name__
        assert options.__optional_keys__ <= set(FIELDS), f"{options.__name__}: {sorted(options.__optional_keys__ - set(FIELDS))}"
        assert not set(parameters) & set(FIELDS), f"{call.__name__} writes out a run option beside its typed dict"


@pytest.mark.parametrize("call", list(API_RUNS), ids=lambda call: call.__name__)
def test_every_run_option_an_api_call_takes_reaches_the_run_config(call, tmp_path):
    """Derived from the typed dict, not listed: each of its names is checked by RunConfig
    (RunOptionError naming the field), and any other field of the config is refused as
    Python refuses a keyword its signature lacks, before anything is written."""
    options, arguments = API_RUNS[call]
    work = {"work_dir": tmp_path / "work"}
    for name in options.__optional_keys__:
        with pytest.raises(RunOptionError, match=f"run option {name}\\b"):
            call(*arguments, **work, **{name: object()})
    for name in set(FIELDS) - options.__optional_keys__:
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            call(*arguments, **work, **{name: getattr(RunConfig(), name)})
    assert not tmp_path.joinpath("work").exists()


@pytest.mark.parametrize("call", list(API_RUNS), ids=lambda call: call.__name__)
def test_a_keyword_an_api_call_lacks_is_refused_naming_every_one_it_takes(call, tmp_path):
    """A typo of one of the call's own arguments lands in `**options` too: the error names the
    call's arguments beside its run options, so it does not read as if `work_dir` were refused."""
    options, arguments = API_RUNS[call]
    with pytest.raises(TypeError, match="unexpected keyword argument 'work_dri'") as refused:
        call(*arguments, work_dri=tmp_path)
    said = str(refused.value)
    assert "work_dir" in said and all(name in said for name in options.__optional_keys__), said
    named = said.split("its arguments: ")[1].split(";")[0].split(", ")
    assert "options" not in named, "the **options catch-all is not an argument"


def test_a_session_reads_its_options_from_the_run_s_config_only():
    """--jobs and --exitfirst travelled twice, in the config and as run_session's keyword
    arguments: now the session takes the context alone (tests/test_first_failure_order.py and
    tests/test_schedule.py run it so)."""
    calls: list[Callable[..., object]] = [session.run_session, session._run_packed]
    for call in calls:
        beside = set(inspect.signature(call).parameters) & set(FIELDS)
        assert not beside, f"{call.__name__} takes {sorted(beside)} beside the run's config"


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
