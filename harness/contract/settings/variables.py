"""Every `HARNESS_*` environment variable: name, type, default and what it does.

This is the one place the harness reads them: a module that needs one asks its entry
(`GOLDEN_DIR.path()`, `JOBS.integer()`), so `harness env` can list them all and a
typo in a name is an AttributeError here, not a variable silently never read.

Values are read when asked, never cached at import: tests and the harness itself set
some of them for child processes, and ranks read theirs in the engine's interpreter.
Standard library only: rank-side code imports this module in an engine's environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack


class VariableValueError(ValueError):
    """A variable set to a value of the wrong kind; the message names it and what it takes."""


@dataclass(frozen=True)
class Variable:
    name: str
    # what its value is: path, int, number, switch (0 turns it off), text, fault (a fault name@rank: raise@1)
    kind: str
    # as the user would write it; None: unset means "not given"
    default: str | None
    doc: str
    # user: set by people and CI; internal: the harness sets it for its children; tests
    who: str = "user"
    minimum: float | None = None  # int, number: the least value it takes
    choices: tuple[str, ...] = ()  # text: the values it takes (empty: any)
    # path: a directory (made when missing); an existing non-directory is wrong
    directory: bool = False

    def problem(self) -> str | None:
        """What is wrong with the value as set (None: unset, or of its kind), in words that
        name the variable and what it takes: every one is checked before anything runs, so a
        bad value is refused at once (exit 2), not found as an `error` after the ranks start."""
        value = self.raw()
        if value is None:
            return None
        text = value.strip()
        if self.kind == "int":
            if not text.isdigit() or (self.minimum is not None and int(text) < self.minimum):
                return f"{self.name}={value!r}: expected an integer >= {self.minimum or 0:g}"
        elif self.kind == "number":
            try:
                number = float(text)
            except ValueError:
                number = float("nan")
            if (
                not number == number
                or number in (float("inf"), float("-inf"))
                or (self.minimum is not None and number < self.minimum)
            ):
                return f"{self.name}={value!r}: expected a number" + (f" >= {self.minimum:g}" if self.minimum is not None else "")
        elif self.kind == "switch":
            if text not in ("0", "1"):
                return f"{self.name}={value!r}: expected 0 (off) or 1 (on)"
        elif self.choices and text not in self.choices:
            return f"{self.name}={value!r}: expected one of {', '.join(self.choices)}"
        elif self.kind == "path" and self.directory and Path(value).exists() and not Path(value).is_dir():
            return f"{self.name}={value!r} is not a directory"
        return None

    def raw(self) -> str | None:
        """The value as set, or None when unset (an empty value counts as unset)."""
        value = os.environ.get(self.name)
        return value if value else None

    def text(self) -> str | None:
        return self.raw() if self.raw() is not None else self.default

    def path(self) -> Path | None:
        value = self.text()
        return Path(value) if value else None

    def on(self) -> bool:
        """A switch that is on unless set to 0."""
        return (self.raw() or self.default or "1").strip() != "0"

    def integer(self, minimum: int = 1) -> int | None:
        value = self.text()
        if value is None:
            return None
        if not value.strip().isdigit() or int(value) < minimum:
            raise VariableValueError(f"{self.name}={value!r}: expected an integer >= {minimum}")
        return int(value)

    def number(self) -> float | None:
        value = (self.text() or "").strip()
        if not value:
            return None
        try:
            return float(value)
        except ValueError:
            raise VariableValueError(f"{self.name}={value!r}: expected a number") from None

    def set(self, value: str) -> None:
        """For the children of this process (ranks, engine processes) to read."""
        os.environ[self.name] = value

    def set_default(self, value: str) -> None:
        os.environ.setdefault(self.name, value)

    def unset(self) -> None:
        os.environ.pop(self.name, None)


VARIABLES: dict[str, Variable] = {}


class _Check(TypedDict, total=False):
    """The checks a variable's value gets besides its kind (Variable's fields of the same names)."""

    minimum: float | None
    choices: tuple[str, ...]
    directory: bool


def _declare(name: str, kind: str, default: str | None, doc: str, who: str = "user", **check: Unpack[_Check]) -> Variable:
    variable = Variable(name, kind, default, doc, who, **check)
    VARIABLES[name] = variable
    return variable


def check_values(who: tuple[str, ...] = ("user",)) -> None:
    """Every variable set for people and CI, checked at once: VariableValueError naming each bad one."""
    problems = [p for v in VARIABLES.values() if v.who in who and (p := v.problem())]
    if problems:
        raise VariableValueError(
            "; ".join(problems)
            + ("" if len(problems) == 1 else f" ({len(problems)} variables)")
            + " (`harness env` lists them with what each takes)"
        )


# where things are
GOLDEN_DIR = _declare(
    "HARNESS_GOLDEN_DIR",
    "path",
    None,
    "where goldens are read and written (default: the project's golden/, then the built-in suites')",
    directory=True,
)
REPORTS_DIR = _declare(
    "HARNESS_REPORTS_DIR", "path", None, "where runs are written (default: the project's reports/)", directory=True
)
HISTORY_DIR = _declare("HARNESS_HISTORY_DIR", "path", None, "the history store (default: <reports>/history)", directory=True)
CACHE = _declare(
    "HARNESS_CACHE",
    "path",
    None,
    "built models, engine environments, probes (default: the project's cache, else ~/.cache/harness)",
    directory=True,
)
MAX_SCENARIOS = _declare(
    "HARNESS_MAX_SCENARIOS",
    "int",
    "10000",
    "the most scenarios one suite's matrix may expand to (larger ones are refused)",
    minimum=1,
)
# how a run uses the machine
DEVICE = _declare("HARNESS_DEVICE", "text", "cpu", "the default of --device: cpu or cuda", choices=("cpu", "cuda"))
DEVICES = _declare(
    "HARNESS_DEVICES",
    "int",
    None,
    "device slots of this machine (default: the GPU count on cuda, a CPU-based count on cpu)",
    minimum=1,
)
JOBS = _declare("HARNESS_JOBS", "int", "1", "scenarios at once, packed onto the devices (the default of --jobs)", minimum=1)
NODES = _declare("HARNESS_NODES", "path", None, "the nodes file for scenarios bigger than this machine (--nodes)")
CLUSTER = _declare(
    "HARNESS_CLUSTER", "text", None, "run every scenario on this Ray cluster: ray:local, auto, ray://HOST:PORT (--cluster)"
)
RAY_CONNECT_S = _declare(
    "HARNESS_RAY_CONNECT_S",
    "number",
    "20",
    "seconds a --cluster's head may take to answer before the run is refused (exit 2)",
    minimum=0.1,
)
DEVICE_LOCK_DIR = _declare(
    "HARNESS_DEVICE_LOCK_DIR",
    "path",
    None,
    "where the device slots' lock files live, one directory per machine (default: the temp dir)",
    directory=True,
)
LEASE_LOG = _declare("HARNESS_LEASE_LOG", "path", None, "append every device lease here, as JSON lines (for tests and audits)")
STALL_WINDOW_S = _declare(
    "HARNESS_STALL_WINDOW_S",
    "number",
    None,
    "seconds without progress on any rank before a run is a hang (0: the detector is off)",
    minimum=0,
)
RANK_POOL = _declare("HARNESS_RANK_POOL", "switch", "1", "0: start every rank afresh instead of forking a pre-imported one")
COMPILE_CACHE = _declare("HARNESS_COMPILE_CACHE", "switch", "1", "0: do not share torch.compile's caches between runs")
# engines
VLLM_PYTHON = _declare(
    "HARNESS_VLLM_PYTHON",
    "path",
    None,
    "the interpreter vLLM runs in (default: the project's .venv-vllm, see `harness install vllm`)",
)
HF_PYTHON = _declare("HARNESS_HF_PYTHON", "path", None, "the interpreter the transformers engine runs in (default: this one)")
VLLM_FORK = _declare("HARNESS_VLLM_FORK", "switch", "1", "0: vLLM's engine core and workers start with its own spawn")
VLLM_AOT_LOAD = _declare("HARNESS_VLLM_AOT_LOAD", "switch", "1", "0: do not load vLLM's ahead-of-time compile cache")
# set by the harness for the processes it starts
PYTEST_RUN_ID = _declare(
    "HARNESS_PYTEST_RUN_ID", "text", None, "the run directory of a pytest session (shared by its xdist workers)", "internal"
)
DEVICE_SLOTS = _declare("HARNESS_DEVICE_SLOTS", "text", None, "a rank's run's device slots, e.g. 0,3", "internal")
RANK_ERROR_FILE = _declare("HARNESS_RANK_ERROR_FILE", "path", None, "where a rank writes its exception", "internal")
RANK_HEARTBEAT_FILE = _declare("HARNESS_RANK_HEARTBEAT_FILE", "path", None, "a rank's heartbeat file", "internal")
RANK_OUTPUT_DIR = _declare(
    "HARNESS_RANK_OUTPUT_DIR",
    "path",
    None,
    "where an engine's own processes announce what they are doing (phases/doing-*.json)",
    "internal",
)
LAUNCHER_PID = _declare("HARNESS_LAUNCHER_PID", "int", None, "the launcher a rank dies with", "internal")
RANK_FAULT = _declare(
    "HARNESS_RANK_FAULT",
    "fault",
    None,
    "inject a failure into a rank, e.g. raise@1, hang@0 (the conformance kit's engine-agnostic fault)",
)
VLLM_FAULTS = _declare("HARNESS_VLLM_FAULTS", "text", None, "the vLLM fault switches a driver arms, comma-separated", "internal")
VLLM_COUNT_SP = _declare(
    "HARNESS_VLLM_COUNT_SP", "switch", None, "vLLM workers count what the sequence-parallel pass rewrote", "internal"
)
# the harness's own tests (tests/)
TEST_VLLM = _declare("HARNESS_TEST_VLLM", "switch", None, "1: run the tests that start real vLLM (make test-vllm)", "tests")
TEST_TIME_SCALE = _declare("HARNESS_TEST_TIME_SCALE", "number", "1", "multiply the tests' wall-clock budgets", "tests")
TEST_TOKEN = _declare("HARNESS_TEST_TOKEN", "text", None, "a marker the tests' probe scenarios pass to ranks", "tests")
SOAK_MARK = _declare("HARNESS_SOAK_MARK", "text", None, "tags the kill soak's processes, to find leftovers", "tests")


def listing(who: tuple[str, ...] = ("user",)) -> str:
    """One line per variable (for `harness env`): name, whether set, kind, default, doc."""
    lines = []
    for v in VARIABLES.values():
        if v.who not in who:
            continue
        now = v.raw()
        state = f"= {now}" if now is not None else f"(default {v.default})" if v.default is not None else "(unset)"
        lines.append(f"{v.name:28s} {v.kind:7s} {state}\n    {v.doc}")
        if v.problem():
            lines.append(f"    WRONG: {v.problem()}")
    return "\n".join(lines)
