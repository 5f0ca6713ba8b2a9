"""The tests' own wall-clock budgets: scaled by HARNESS_TEST_TIME_SCALE, and running out
of one says it was a timeout (tests/kit/timing.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.kit.timing import TIME_SCALE_ENV, communicate, run_process, scaled, wait_until


def test_budgets_scale_with_the_documented_factor(monkeypatch):
    monkeypatch.delenv(TIME_SCALE_ENV, raising=False)  # unset: the load per core, at least 1
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert scaled(60) == 60
    monkeypatch.setattr(os, "getloadavg", lambda: (15.0, 9.0, 6.0))
    assert scaled(60) == 450
    monkeypatch.setenv(TIME_SCALE_ENV, "2.5")
    assert scaled(60) == 150
    monkeypatch.setenv(TIME_SCALE_ENV, "-1")
    with pytest.raises(ValueError, match="must be > 0"):
        scaled(60)


@pytest.mark.e2e  # starts sleeper processes
def test_running_out_of_a_budget_says_it_was_a_timeout(monkeypatch):
    monkeypatch.setenv(TIME_SCALE_ENV, "0.01")
    with pytest.raises(pytest.fail.Exception, match=r"timed out after 1s waiting for the flag \(HARNESS_TEST_TIME_SCALE=0.01;"):
        wait_until(lambda: False, 100, "the flag")
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    with pytest.raises(pytest.fail.Exception, match="timed out after 1s waiting for a sleeper") as failed:
        run_process(sleeper, 100, "a sleeper", capture_output=True, text=True)
    assert "started" in str(failed.value)  # what the process wrote before it was stopped
    proc = subprocess.Popen(sleeper, stdout=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception, match="timed out after 1s waiting for the sleeper to end"):
        communicate(proc, 100, "the sleeper to end")
    assert proc.poll() is not None  # stopped, not left behind
