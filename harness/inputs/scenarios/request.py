"""What a user asked a run to do, as one frozen object: `RunConfig`.

Every option of a run is declared once, here, as a field: its type and default, and in
its `Option` how it is given (the flag of `harness run`, the pytest plugin's option, the
Python API's keyword argument) with its help text. The CLI's and the pytest plugin's
options are made from these declarations (harness/cli/options.py, harness/pytest_plugin.py),
the API's keyword arguments are checked against them (tests/test_run_config.py), and the
stages read a run's options from a RunConfig (harness/run/stages/context.py pairs it with the
run-time objects a session makes: the device pool, the nodes, the cancel switch). The
hidden `bisect-step` receives one whole, as JSON (to_json / from_json).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.contract.roots import reports_dir
from harness.contract.settings.variables import DEVICE


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
    # harness.api's calls take it as a keyword argument of the field's name
    api: bool = False
    value: str | None = None
    # given once per value (argparse's action="append")
    repeat: bool = False
    # a flag without a value (action="store_true")
    switch: bool = False
    short: str | None = None  # "-x"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    # the CLI's default, read when its parser is made
    cli_default: Callable[[], Any] | None = None

    @property
    def dest(self) -> str:
        """The attribute argparse gives the flag's value ("--changed-files" -> changed_files)."""
        assert self.flag is not None
        return self.flag.lstrip("-").replace("-", "_")


def _option(default: Any, **how: Any) -> Any:
    return field(default=default, metadata={"option": Option(**how)})


def option_of(f: dataclasses.Field) -> Option:
    return f.metadata["option"]


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
        api=True,
        help="per-scenario timeout in seconds (overrides the scenario file)",
        pytest_help="per-scenario timeout in seconds",
    )
    faults: tuple[str, ...] = _option(
        (), flag="--fault", repeat=True, pytest="--harness-fault", api=True, help="switch on an engine fault (repeatable)"
    )
    env: tuple[tuple[str, str], ...] = _option(
        (), flag="--env", value="env", repeat=True, api=True, help="KEY=VALUE for every rank (repeatable)"
    )
    device: str = _option(
        "cpu",
        flag="--device",
        choices=("cpu", "cuda"),
        api=True,
        cli_default=DEVICE.text,
        help=f"where the ranks run (default: ${DEVICE.name}, else cpu)",
    )
    # where it is written
    report_dir: Path | None = _option(
        None,
        flag="--report-dir",
        value="path",
        pytest="--harness-report-dir",
        api=True,
        cli_default=reports_dir,
        help="where runs are written (default: $HARNESS_REPORTS_DIR, else the project's reports/)",
        pytest_help="where the run directory goes (default: reports/)",
    )
    run_id: str | None = _option(None, flag="--run-id", value="run-id", help="name of the run directory (default: time and gate)")
    history: Path | None = _option(
        None, flag="--history", value="path", help="history store (default: $HARNESS_HISTORY_DIR or <report-dir>/history)"
    )
    # where it runs
    jobs: int | None = _option(
        None, flag="--jobs", value="count", help="scenarios at once, packed onto the devices (default: $HARNESS_JOBS or 1)"
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
        value="int",
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
        """Lists and mappings as given (argparse's, an API caller's) kept as tuples: frozen all through."""
        set_ = object.__setattr__
        set_(self, "ids", tuple(self.ids))
        set_(self, "faults", tuple(self.faults))
        set_(self, "engine_envs", tuple(self.engine_envs))
        env = self.env.items() if isinstance(self.env, Mapping) else self.env
        set_(self, "env", tuple((str(k), str(v)) for k, v in env))
        set_(self, "interaction_trials", max(0, self.interaction_trials))  # a negative count narrows nothing

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


def _given(found: dict[str, Any]) -> dict[str, Any]:
    """An option left out (None) keeps the field's default."""
    return {k: v for k, v in found.items() if v is not None}
