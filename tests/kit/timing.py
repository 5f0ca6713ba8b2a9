"""Wall-clock budgets of the harness's own tests, scaled for the machine they run on.

A test must not fail because the machine is slow or loaded. Where a test needs a
deadline (a launcher's timeout, a wait for a process or a file), it asks for
`scaled(seconds)`: a generous budget for an unloaded 2-core machine, multiplied by
HARNESS_TEST_TIME_SCALE (e.g. 3 on a slow CI agent). Unset, the factor follows the
machine's load when the budget is asked for: the 1-minute load average per core, at least
1 (a machine loaded 15 on 2 cores runs each process about 7x slower). Running out of a
budget fails with a message that says it was a timeout, of what, and how to give more
time, never as an anonymous kill.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

import pytest

TIME_SCALE_ENV = "HARNESS_TEST_TIME_SCALE"


def time_scale() -> float:
    raw = os.environ.get(TIME_SCALE_ENV)
    if raw is None:
        return load_factor()
    try:
        scale = float(raw)
    except ValueError:
        raise ValueError(f"{TIME_SCALE_ENV}={raw!r} is not a number") from None
    if scale <= 0:
        raise ValueError(f"{TIME_SCALE_ENV}={raw!r} must be > 0")
    return scale


def load_factor() -> float:
    """How much slower than an idle machine this one runs now: load per core, at least 1."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:  # no load average on this platform
        return 1.0


def scaled(seconds: float) -> float:
    """`seconds` (the budget on an unloaded machine) times HARNESS_TEST_TIME_SCALE."""
    return seconds * time_scale()


def timeout_message(what: str, budget_s: float) -> str:
    return (
        f"timed out after {budget_s:.0f}s waiting for {what} "
        f"({TIME_SCALE_ENV}={os.environ.get(TIME_SCALE_ENV, f'unset: x{load_factor():.1f}, the load per core')}; "
        "set it higher on a slow machine)"
    )


def wait_until(
    ready: Callable[[], bool], seconds: float, what: str, poll_s: float = 0.1, proc: subprocess.Popen | None = None
) -> None:
    """The readiness wait: poll `ready` until it holds; fail as a timeout after
    scaled(seconds). With `proc` (the process that is to make `ready` hold), its
    ending first fails the wait at once, with its exit code and output."""
    budget = scaled(seconds)
    deadline = time.monotonic() + budget
    while not ready():
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout is not None else ""
            pytest.fail(f"the process ended (exit code {proc.returncode}) before {what}\n--- output\n{_tail(out)}")
        if time.monotonic() > deadline:
            pytest.fail(timeout_message(what, budget))
        time.sleep(poll_s)


def run_process(cmd: list[str], seconds: float, what: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with a scaled timeout; running out fails as a timeout, with the
    output the process had written so far."""
    budget = scaled(seconds)
    try:
        check = kwargs.pop("check", False)
        return subprocess.run(cmd, check=check, timeout=budget, **kwargs)
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"{timeout_message(what or ' '.join(map(str, cmd[:4])), budget)}\n"
            f"--- stdout\n{_tail(e.stdout)}\n--- stderr\n{_tail(e.stderr)}"
        )


def communicate(proc: subprocess.Popen, seconds: float, what: str) -> tuple:
    """proc.communicate with a scaled timeout; running out kills `proc` and fails as a timeout."""
    budget = scaled(seconds)
    try:
        return proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{timeout_message(what, budget)}\n--- stdout\n{_tail(out)}\n--- stderr\n{_tail(err)}")


def wait_process(proc: subprocess.Popen, seconds: float, what: str) -> int:
    """proc.wait with a scaled timeout; running out kills `proc` and fails as a timeout."""
    budget = scaled(seconds)
    try:
        return proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(timeout_message(what, budget))


def _tail(text, chars: int = 3000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-chars:]
