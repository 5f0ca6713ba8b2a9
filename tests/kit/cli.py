"""The harness's command line and pytest, each in a process of its own, as a user runs them.

    result = harness_cli("run", "demo/tp1-pp1", "--report-dir", str(reports), scenarios=root / "scenarios",
                         env={"HARNESS_GOLDEN_DIR": str(golden)})

Runs from the repository root with this checkout first on PYTHONPATH, so the harness
under test (and the ranks it starts) is this one, never another installed copy. `env`
is laid over the test process's environment; a None value removes that variable. A
run that outlives scaled(timeout) fails the test saying it was a timeout, with the
output so far (tests/kit/timing.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.kit.harness_server import forked_harness
from tests.kit.procs import sigint_as_from_a_terminal
from tests.kit.timing import run_process, scaled, timeout_message

ROOT = Path(__file__).resolve().parents[2]


def environment(env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """os.environ with `env` laid over it (None: unset) and this checkout first on PYTHONPATH."""
    merged = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    merged["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), merged.get("PYTHONPATH")]))
    return merged


def harness_command(*args: str, scenarios: Path | None = None) -> list[str]:
    """`python -m harness [--scenarios DIR] ARGS`."""
    return [sys.executable, "-m", "harness", *(["--scenarios", str(scenarios)] if scenarios else []), *args]


def harness_cli(
    *args: str,
    scenarios: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 600,
    what: str | None = None,
) -> subprocess.CompletedProcess:
    """`harness ARGS` to its end, stdout and stderr captured as text, within scaled(timeout)
    seconds; forked from the kit's pre-imported server where it serves (harness_server.py)."""
    argv, merged, what = harness_command(*args, scenarios=scenarios), environment(env), what or f"harness {' '.join(args[:3])}"
    budget = scaled(timeout)  # once: the message names the budget the run had
    try:
        done = forked_harness(argv, merged, ROOT, budget)
    except subprocess.TimeoutExpired as exc:
        assert isinstance(exc.output, str) and isinstance(exc.stderr, str)  # forked_harness raises with the text so far
        pytest.fail(f"{timeout_message(what, budget)}\n--- stdout\n{exc.output[-3000:]}\n--- stderr\n{exc.stderr[-3000:]}")
    if done is not None:
        return done
    return run_process(argv, timeout, what, cwd=ROOT, env=merged, capture_output=True, text=True)


def start_harness(
    *args: str,
    scenarios: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
) -> subprocess.Popen:
    """`harness ARGS` started and left running (text output), with Ctrl-C as a terminal
    delivers it: for the tests that interrupt or kill a run. The caller waits for it
    (tests/kit/timing.py: communicate, wait_process) or kills it."""
    return subprocess.Popen(
        harness_command(*args, scenarios=scenarios),
        cwd=ROOT,
        env=environment(env),
        stdout=stdout,
        stderr=stderr,
        text=True,
        preexec_fn=sigint_as_from_a_terminal,
    )


def pytest_cli(
    *args: str, env: Mapping[str, str | None] | None = None, timeout: float = 600, what: str | None = None
) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` from the repository root (the scenario items of the
    harness's pytest plugin, or a usage error of its options), output captured."""
    return run_process(
        [sys.executable, "-m", "pytest", *args],
        timeout,
        what or f"pytest {' '.join(args[:3])}",
        cwd=ROOT,
        env=environment(env),
        capture_output=True,
        text=True,
    )
