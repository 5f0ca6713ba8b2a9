"""What several subcommands take, declared once: value types that make a bad value a
usage error (argparse's exit 2 with the option named), and the options of a run, made
from the fields of RunConfig (harness/run/request.py) that declare them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.inputs.scenarios.schema import ScenarioError
from harness.run.request import (
    NotTaken,
    RunConfig,
    count,
    count_or_none,
    env_pair,
    option_of,
    revision,
    run_id,
    seconds,
)


def key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    key, value = text.split("=", 1)
    return key, value


def from_text(check: Callable[[Any], Any], parse: Callable[[str], Any] = str) -> Callable[[str], Any]:
    """A value type: the text parsed, then held to the run option's own check (the one a
    RunConfig made in code is held to, harness/run/request.py VALUE_CHECKS), so
    both refuse the same values with the same words. A text that does not even parse is
    held to the check as it is: the check says what it expects."""

    def value_type(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            value = text
        try:
            return check(value)
        except NotTaken as exc:
            raise argparse.ArgumentTypeError(exc.said_of(f"'{text}'")) from None

    return value_type


def env_assignment(text: str) -> tuple[str, str]:
    """--env NAME=VALUE: one the OS takes into a process's environment."""
    try:
        return env_pair(key_value(text))
    except NotTaken as exc:
        raise argparse.ArgumentTypeError(exc.said_of(f"'{text}'")) from None


positive_seconds = from_text(seconds, float)
positive_int = from_text(count, int)


def shard_arg(text: str) -> str:
    """I/N, checked here so a bad shard is a usage error; planning parses it again."""
    from harness.run.plan.schedule import parse_shard

    try:
        parse_shard(text)
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# -- options made from the run configuration (harness/run/request.py) -----------------

# how a text becomes a RunConfig field's value (Option.value), on the command line and in pytest
VALUE_TYPES: dict[str, Callable[[str], Any]] = {
    "seconds": positive_seconds,
    "count": positive_int,
    "count-or-none": from_text(count_or_none, int),
    "path": Path,
    "env": env_assignment,
    "run-id": from_text(run_id),
    "shard": shard_arg,
    "revision": from_text(revision),
}


def argument_of(name: str, pytest: bool = False, resolved: bool = False, **override: Any) -> tuple[list[str], dict[str, Any]]:
    """(names, keyword arguments) of add_argument / addoption for the RunConfig field `name`:
    its `harness run` flag, or with `pytest` the plugin's option. An option not given is None
    and the RunConfig made from it reads its declared default (Option.default_from); with
    `resolved` (a subcommand that reads its namespace, never a RunConfig) the parser reads it."""
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
        kwargs["default"] = how.default_from() if resolved and how.default_from else f.default
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
    add_config_option(p, "device", resolved=True)


def add_report_dir(p: argparse.ArgumentParser) -> None:
    add_config_option(p, "report_dir", resolved=True)


def add_timeout(p: argparse.ArgumentParser, what: str) -> None:
    add_config_option(p, "timeout_s", help=f"{what} timeout in seconds (overrides the scenario file)")


def add_selection(p: argparse.ArgumentParser) -> None:
    """Which scenarios: ids, glob patterns or suite names, and/or a gate."""
    add_config_option(p, "ids")
    add_config_option(p, "gate")


def add_history(p: argparse.ArgumentParser, default: str) -> None:
    add_config_option(p, "history", help=f"history store (default: $HARNESS_HISTORY_DIR or {default})")
