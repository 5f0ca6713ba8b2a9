"""What several subcommands take, declared once: value types that make a bad value a
usage error (argparse's exit 2 with the option named), and the options of a run, made
from the fields of RunConfig (harness/inputs/scenarios/request.py) that declare them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.contract.rundir import run_id_problem
from harness.inputs.scenarios.request import RunConfig, option_of
from harness.inputs.scenarios.schema import ScenarioError, env_problem


def key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    key, value = text.split("=", 1)
    return key, value


def env_assignment(text: str) -> tuple[str, str]:
    """--env NAME=VALUE: one the OS takes into a process's environment."""
    name, value = key_value(text)
    problem = env_problem(name, value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}: {text!r} (expected NAME=VALUE, an environment variable)")
    return name, value


def run_id(text: str) -> str:
    """--run-id: one directory under --report-dir, never a path that leads out of it."""
    problem = run_id_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def positive_seconds(text: str) -> float:
    """A timeout: a finite number of seconds > 0 (0 or a negative one cannot be waited for)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got '{text}'")
    return seconds


def positive_int(text: str) -> int:
    """A count of jobs or devices: an integer >= 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got '{text}'")
    return count


def shard_arg(text: str) -> str:
    """I/N, checked here so a bad shard is a usage error; planning parses it again."""
    from harness.run.plan.schedule import parse_shard

    try:
        parse_shard(text)
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def git_revision(text: str) -> str:
    """A branch, tag or commit for --changed-since; never something git reads as an option."""
    if not text or text.startswith("-"):
        raise argparse.ArgumentTypeError(f"expected a branch, tag or commit (e.g. origin/main), got '{text}'")
    return text


# -- options made from the run configuration (harness/inputs/scenarios/request.py) -----------------

# how a text becomes a RunConfig field's value (Option.value), on the command line and in pytest
VALUE_TYPES: dict[str, Callable[[str], Any]] = {
    "seconds": positive_seconds,
    "count": positive_int,
    "int": int,
    "path": Path,
    "env": env_assignment,
    "run-id": run_id,
    "shard": shard_arg,
    "revision": git_revision,
}


def argument_of(name: str, pytest: bool = False, **override: Any) -> tuple[list[str], dict[str, Any]]:
    """(names, keyword arguments) of add_argument / addoption for the RunConfig field `name`:
    its `harness run` flag, or with `pytest` the plugin's option."""
    f = next(f for f in fields(RunConfig) if f.name == name)
    how = option_of(f)
    kwargs: dict[str, Any] = {"help": (how.pytest_help or how.help) if pytest else how.help}
    if how.switch:
        kwargs["action"] = "store_true"
    elif how.repeat:
        kwargs["default"] = []
        if how.flag and not how.flag.startswith("-") and not pytest:
            kwargs["nargs"] = "*"
        else:
            kwargs["action"] = "append"
    else:
        kwargs["default"] = how.cli_default() if how.cli_default and not pytest else f.default
    if how.value:
        kwargs["type"] = VALUE_TYPES[how.value]
    if how.choices:
        kwargs["choices"] = list(how.choices)
    if how.metavar:
        kwargs["metavar"] = how.metavar
    kwargs.update(override)
    if pytest:
        assert how.pytest, f"RunConfig.{name} has no pytest option"
        return [how.pytest], kwargs
    assert how.flag, f"RunConfig.{name} has no flag"
    return [n for n in (how.short, how.flag) if n], kwargs


def add_config_option(p: argparse.ArgumentParser, name: str, **override: Any) -> None:
    names, kwargs = argument_of(name, **override)
    p.add_argument(*names, **kwargs)


def add_device(p: argparse.ArgumentParser) -> None:
    add_config_option(p, "device")


def add_report_dir(p: argparse.ArgumentParser) -> None:
    add_config_option(p, "report_dir")


def add_timeout(p: argparse.ArgumentParser, what: str) -> None:
    add_config_option(p, "timeout_s", help=f"{what} timeout in seconds (overrides the scenario file)")


def add_selection(p: argparse.ArgumentParser) -> None:
    """Which scenarios: ids, glob patterns or suite names, and/or a gate."""
    add_config_option(p, "ids")
    add_config_option(p, "gate")


def add_history(p: argparse.ArgumentParser, default: str) -> None:
    add_config_option(p, "history", help=f"history store (default: $HARNESS_HISTORY_DIR or {default})")
