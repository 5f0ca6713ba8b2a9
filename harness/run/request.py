"""What a user asked a run to do, as one frozen object: `RunConfig`.

Every option of a run is declared once, here, as a field: its type and default, and in
its `Option` how it is given (the flag of `harness run`, the pytest plugin's option) with
its help text. The CLI's and the pytest plugin's options are made from these declarations
(harness/cli/options.py, harness/pytest_plugin.py); the Python API's calls take the options
that concern them as keyword arguments of the fields' names and make a RunConfig of them
(harness/api.py RunOptions: the types a caller gives, a list where the config keeps a
tuple; a name that is no field cannot be made into one), and the stages read a run's
options from a RunConfig (harness/run/stages/context.py pairs it with the run-time objects
a session makes: the device pool, the nodes, the cancel switch). The hidden `bisect-step`
receives one whole, as JSON (to_json / from_json).

A RunConfig checks its values when it is made (RunOptionError), with the checks the CLI's and
the pytest plugin's value types call on the text they parsed (VALUE_CHECKS): one rule per
option, whichever way it was given, so the Python API refuses what `harness run` refuses.
A default that depends on where the run is ($HARNESS_DEVICE, $HARNESS_JOBS, the project's
reports/) is declared with its field too (Option.default_from) and read when the config is
made: every way in gets the same, and no caller fills it in.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.contract.roots import reports_dir
from harness.contract.rundir import run_id_problem
from harness.contract.settings.variables import DEVICE, JOBS
from harness.inputs.scenarios.schema import env_problem


class NotTaken(ValueError):
    """A value an option cannot take: what it takes instead ("expected an integer >= 1"),
    or, with `names_value`, a sentence that already quotes the value."""

    def __init__(self, problem: str, names_value: bool = False):
        super().__init__(problem)
        self.problem = problem
        self.names_value = names_value

    def said_of(self, shown: str) -> str:
        """The problem, with the value as the user gave it (`shown`: '-5' of a command line)."""
        return self.problem if self.names_value else f"{self.problem}, got {shown}"


class RunOptionError(ValueError):
    """An option of a run given a value it cannot take (a harness.api keyword argument, a
    RunConfig made in code): names the option (keyword, CLI flag, pytest option), what it
    takes and what it got. A ValueError, as the API's other refusals of its input."""


# -- what each kind of value takes (Option.value); the CLI parses a text, then checks it here ---


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def seconds(value: Any) -> float:
    """A timeout: a finite number of seconds > 0 (0 or a negative one cannot be waited for)."""
    if not (_is_number(value) and math.isfinite(value) and value > 0):
        raise NotTaken("expected a number of seconds > 0")
    return float(value)


def count(value: Any) -> int:
    """A count of jobs or devices: an integer >= 1."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise NotTaken("expected an integer >= 1")
    return value


def count_or_none(value: Any) -> int:
    """A bound that 0 switches off (--interaction-trials): an integer >= 0; a negative one
    is a typo, not a way to say 0."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise NotTaken("expected an integer >= 0 (0: none)")
    return value


def path(value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise NotTaken("expected a path")
    return Path(value)


def run_id(value: Any) -> str:
    """--run-id: one directory under --report-dir, never a path that leads out of it."""
    if not isinstance(value, str):
        raise NotTaken("expected a run id (letters, digits, '.', '_' and '-')")
    problem = run_id_problem(value)
    if problem:
        raise NotTaken(problem, names_value=True)
    return value


def revision(value: Any) -> str:
    """A branch, tag or commit for --changed-since; never something git reads as an option."""
    if not isinstance(value, str) or not value or value.startswith("-"):
        raise NotTaken("expected a branch, tag or commit (e.g. origin/main)")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise NotTaken("expected a non-empty string")
    return value


def switch(value: Any) -> bool:
    if not isinstance(value, bool):
        raise NotTaken("expected True or False")
    return value


def env_pair(value: Any) -> tuple[str, str]:
    """NAME=VALUE as a pair: one the OS takes into a process's environment."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise NotTaken("expected NAME=VALUE, an environment variable")
    name, val = str(value[0]), str(value[1])
    problem = env_problem(name, val)
    if problem:
        raise NotTaken(f"{problem}: {name + '=' + val!r} (expected NAME=VALUE, an environment variable)", names_value=True)
    return name, val


# Option.value -> its check; an option without one takes a non-empty string. The shard's I/N
# form is checked by the CLI (harness/run/plan/schedule.py parses it, a layer above this one).
VALUE_CHECKS: dict[str, Callable[[Any], Any]] = {
    "seconds": seconds,
    "count": count,
    "count-or-none": count_or_none,
    "path": path,
    "env": env_pair,
    "run-id": run_id,
    "shard": text,
    "revision": revision,
}


@dataclass(frozen=True)
class Option:
    """How a RunConfig field is given. `value` names how a text becomes the value (the
    CLI's value types, harness/cli/options.py VALUE_TYPES: a bad one is a usage error)."""

    # `harness run`'s flag ("--timeout"), or its positional's name ("ids")
    flag: str | None = None
    help: str = ""
    # the pytest plugin's option ("--harness-timeout")
    pytest: str | None = None
    # where pytest's help says it otherwise (None: as `help`)
    pytest_help: str | None = None
    value: str | None = None
    # given once per value (argparse's action="append")
    repeat: bool = False
    # a flag without a value (action="store_true")
    switch: bool = False
    short: str | None = None  # "-x"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    # the default when the option is not given (None), read when a RunConfig is made: the one
    # place it is set, whichever way in (a HARNESS_* variable, the project's reports/)
    default_from: Callable[[], Any] | None = None

    @property
    def dest(self) -> str:
        """The attribute argparse gives the flag's value ("--changed-files" -> changed_files)."""
        assert self.flag is not None
        return self.flag.lstrip("-").replace("-", "_")


def _option(default: Any, **how: Any) -> Any:
    return field(default=default, metadata={"option": Option(**how)})


def option_of(f: dataclasses.Field[object]) -> Option:
    how: Option = f.metadata["option"]
    return how


@dataclass(frozen=True)
class RunConfig:
    # which scenarios
    ids: tuple[str, ...] = _option((), flag="ids", repeat=True, help="ids or glob patterns, or suite names")
    gate: str | None = _option(
        None, flag="--gate", help="only scenarios of this gate (pr, nightly, vllm, or one a scenario file defines)"
    )
    # how each runs
    timeout_s: float | None = _option(
        None,
        flag="--timeout",
        value="seconds",
        pytest="--harness-timeout",
        help="per-scenario timeout in seconds (overrides the scenario file)",
        pytest_help="per-scenario timeout in seconds",
    )
    faults: tuple[str, ...] = _option(
        (), flag="--fault", repeat=True, pytest="--harness-fault", help="switch on an engine fault (repeatable)"
    )
    env: tuple[tuple[str, str], ...] = _option(
        (), flag="--env", value="env", repeat=True, help="KEY=VALUE for every rank (repeatable)"
    )
    device: str = _option(
        None,
        flag="--device",
        choices=("cpu", "cuda"),
        default_from=DEVICE.text,
        help=f"where the ranks run (default: ${DEVICE.name}, else cpu)",
    )
    # where it is written
    report_dir: Path = _option(
        None,
        flag="--report-dir",
        value="path",
        pytest="--harness-report-dir",
        default_from=reports_dir,
        help="where runs are written (default: $HARNESS_REPORTS_DIR, else the project's reports/)",
        pytest_help="where the run directory goes (default: reports/)",
    )
    run_id: str | None = _option(None, flag="--run-id", value="run-id", help="name of the run directory (default: time and gate)")
    history: Path | None = _option(
        None, flag="--history", value="path", help="history store (default: $HARNESS_HISTORY_DIR or <report-dir>/history)"
    )
    # where it runs
    jobs: int = _option(
        None,
        flag="--jobs",
        value="count",
        default_from=JOBS.integer,
        help="scenarios at once, packed onto the devices (default: $HARNESS_JOBS or 1)",
    )
    devices: int | None = _option(
        None,
        flag="--devices",
        value="count",
        pytest="--harness-devices",
        help="device slots of this machine (default: $HARNESS_DEVICES, else the GPU count on cuda, a CPU-based count on cpu)",
        pytest_help="device slots of this machine (default: $HARNESS_DEVICES)",
    )
    nodes: Path | None = _option(
        None, flag="--nodes", value="path", help="nodes file for scenarios bigger than this machine (default: $HARNESS_NODES)"
    )
    cluster: str | None = _option(
        None,
        flag="--cluster",
        metavar="RAY",
        pytest="--harness-cluster",
        help="run every scenario on a Ray cluster: ray:local (one started for the run), "
        "auto, ray://HOST:PORT or HOST:PORT (default: $HARNESS_CLUSTER; needs harness[ray]; "
        "docs/SCALE.md)",
        pytest_help="run each scenario on a Ray cluster: ray:local, auto, HOST:PORT (default: $HARNESS_CLUSTER; docs/SCALE.md)",
    )
    # which share of the gate
    shard: str | None = _option(
        None, flag="--shard", value="shard", help="run shard I of N (I/N, 1-based), balanced by recorded durations"
    )
    durations: Path | None = _option(
        None,
        flag="--durations",
        value="path",
        help="JSON {scenario id: seconds} to balance shards and pack by (default: past verdicts under --report-dir)",
    )
    changed_files: Path | None = _option(
        None,
        flag="--changed-files",
        value="path",
        help="with --gate pr: run what these files (one per line) can break, plus the smoke set",
    )
    engine_envs: tuple[str, ...] = _option(
        (),
        flag="--engine-env",
        repeat=True,
        metavar="ENGINE_ENV",
        help="run every chosen scenario in this engine environment (repeatable: once "
        "per environment, the engine version in the id): a Python interpreter or "
        "venv path, or a release ENGINE==VERSION that the harness installs once "
        "into a cached venv (`harness docs engine-versions`)",
    )
    exitfirst: bool = _option(
        False,
        flag="--exitfirst",
        short="-x",
        switch=True,
        help="stop after the first scenario that ends not as expected (fail, crash, hang, error): "
        "start no other, stop the running ones' ranks; the report lists the rest as not run",
    )
    interaction_trials: int = _option(
        10,
        flag="--interaction-trials",
        value="count-or-none",
        metavar="N",
        pytest="--harness-interaction-trials",
        help="a failure of several axis values off the golden's is narrowed to the values "
        "it needs by at most N trial runs (README 'The failing interaction, named'); "
        "0: not narrowed (default: 10)",
        pytest_help="trial runs that narrow a failure of several axis values to the ones it needs (0: none)",
    )
    no_localize: bool = _option(
        False,
        flag="--no-localize",
        switch=True,
        pytest="--harness-no-localize",
        help="a numeric failure on an engine whose workers record hidden states (vLLM) is not "
        "run again to name its first diverging layer, module and rank (docs/VLLM.md 'Localization')",
        pytest_help="do not run a numeric vLLM failure again to name its first diverging module",
    )
    allow_empty: bool = _option(
        False,
        flag="--allow-empty",
        switch=True,
        pytest="--harness-allow-empty",
        help="exit 0 even when every scenario ended unsupported (nothing was tested; by default "
        "that is exit 5, as pytest's when it collects nothing)",
        pytest_help="end 0 even when every scenario ended unsupported (by default the session "
        "ends 5, nothing tested, as `harness run` does)",
    )
    changed_since: str | None = _option(
        None,
        flag="--changed-since",
        value="revision",
        metavar="BASE",
        help="with --gate pr: as --changed-files, with the files of `git diff --name-only BASE...HEAD`",
    )

    def __post_init__(self) -> None:
        """Every value checked, as the CLI checks its text (RunOptionError names the option), an
        option not given (None) at its declared default; lists and mappings as given (argparse's,
        an API caller's) kept as tuples: frozen all through."""
        for f in fields(self):
            object.__setattr__(self, f.name, _checked(f, getattr(self, f.name)))

    @property
    def env_vars(self) -> dict[str, str]:
        return dict(self.env)

    # -- made from the ways in -------------------------------------------------------

    @classmethod
    def from_cli(cls, args: Any, **given: Any) -> RunConfig:
        """From an argparse Namespace: every field whose flag the parser declared, then `given`."""
        found = {
            f.name: getattr(args, option_of(f).dest)
            for f in fields(cls)
            if option_of(f).flag and hasattr(args, option_of(f).dest)
        }
        return cls(**{**_given(found), **given})

    @classmethod
    def from_pytest(cls, getoption: Callable[[str], Any], **given: Any) -> RunConfig:
        """From the pytest plugin's options (config.getoption), then `given`."""
        declared = {f.name: option_of(f).pytest for f in fields(cls)}
        found = {name: getoption(flag) for name, flag in declared.items() if flag}
        return cls(**{**_given(found), **given})

    # -- whole, as JSON (the hidden bisect-step) ---------------------------------------

    def to_json(self) -> str:
        def plain(value: Any) -> Any:
            if isinstance(value, Path):
                return str(value)
            if isinstance(value, tuple):
                return [plain(v) for v in value]
            return value

        return json.dumps({f.name: plain(getattr(self, f.name)) for f in fields(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        raw = json.loads(text)
        unknown = set(raw) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"not options of a run: {', '.join(sorted(unknown))}")
        paths = {f.name for f in fields(cls) if option_of(f).value == "path"}
        values: dict[str, Any] = {k: (Path(v) if k in paths and v is not None else v) for k, v in raw.items()}
        return cls(**values)


def unknown_faults(faults: Iterable[str], engines: Iterable[str], option: str) -> str | None:
    """Fault switches that no engine of the chosen scenarios takes (a typo): refused once, by
    every way in (`option` names how they were given: --fault, --harness-fault, faults=),
    before anything runs, not as one `error` verdict per scenario. A fault that only some of
    the engines take is left to each scenario (the others end `error`, naming their faults)."""
    from harness.engines import get_engine

    faults = list(faults)
    if not faults:
        return None
    problems = {}
    for name in sorted(set(engines)):
        try:
            problems[name] = get_engine(name).fault_problem(faults)
        except Exception:  # noqa: BLE001 - an engine that does not load says so in its scenarios
            return None
    if problems and all(problems.values()):
        return "; ".join(f"{option} for engine '{name}': {p}" for name, p in problems.items())
    return None


def option_names(f: dataclasses.Field[object]) -> str:
    """How a field is named wherever it is given: "timeout_s (--timeout, --harness-timeout)"."""
    how = option_of(f)
    flags = [n for n in (how.flag if how.flag and how.flag.startswith("-") else None, how.pytest) if n]
    return f"{f.name} ({', '.join(flags)})" if flags else f.name


def _checked(f: dataclasses.Field[object], value: Any) -> Any:
    """The field's value as the config keeps it, or RunOptionError naming the option."""
    try:
        return _value_of(f, value)
    except NotTaken as exc:
        raise RunOptionError(f"run option {option_names(f)}: {exc.said_of(repr(value))}") from None


def _value_of(f: dataclasses.Field[object], value: Any) -> Any:
    how = option_of(f)
    if value is None and how.default_from is not None:
        value = how.default_from()
    if value is None and f.default is None:
        return None
    if how.switch:
        return switch(value)
    check: Callable[[Any], Any] = VALUE_CHECKS.get(how.value or "", text)
    if how.repeat:
        return tuple(_each(check, _items(f, value)))
    if how.choices and value not in how.choices:
        raise NotTaken(f"expected one of {', '.join(how.choices)}")
    return check(value)


def _items(f: dataclasses.Field[object], value: Any) -> Iterable[Any]:
    """A repeated option's values: one string is one value (faults="pp-buffer-missing-key" is
    that fault, never its characters); a mapping's items for env."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return value.items()
    if not isinstance(value, Iterable):
        raise NotTaken("expected a list of values" if f.name != "env" else "expected a mapping NAME -> VALUE")
    return value


def _each(check: Callable[[Any], Any], values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        try:
            yield check(value)
        except NotTaken as exc:
            raise NotTaken(f"{exc.said_of(repr(value))} (one of the values given)", names_value=True) from None


def _given(found: dict[str, Any]) -> dict[str, Any]:
    """An option left out (None) keeps the field's default."""
    return {k: v for k, v in found.items() if v is not None}
