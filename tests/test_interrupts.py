"""SIGTERM is Ctrl-C at every moment of `harness run`, not only while ranks run: exit 130,
and the report covers what ended. A CI system cancels a job with SIGTERM; before this, one
that landed while the harness planned, judged or reported killed it silently (exit 143)
and left the start-of-run summary ("N never ran") even where a scenario had passed.

Each test runs the real CLI in a process of its own and sends that process a real
SIGTERM at one chosen moment: a wrapper around the function that marks the moment
sends it (os.kill of its own pid), so the moment is exact, not a race with a timer.

The harness process is started fresh (it is what is signalled, to its interpreter's exit);
its ranks are forked, as those of the test kit's commands are (tests/kit/harness_child.py),
from a rank-pool zygote it forks from itself after importing what they import, instead
of a zygote that imports torch, Dynamo and inductor a second time (4 of the 25 CPU-seconds
of the after-verdict test, measured)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.contract import exit_codes
from tests.kit import ROOT, outcomes, run_meta, scaled, summary
from tests.kit.cli import environment
from tests.kit.harness_server import COMMAND_ENV, RANK_ENV, SERVER_ONLY_ENV

pytestmark = pytest.mark.e2e  # the harness CLI with real ranks

# Sends SIGTERM to this process when the function named by MOMENT runs (the Nth call),
# then runs `harness ARGS...`. With FORK_RANKS=1 it first imports what the kit's server
# imports and forks its ranks' zygote from itself (tests/kit/harness_server.py).
DRIVER = """
import atexit, importlib, os, runpy, signal, sys
if os.environ.pop("FORK_RANKS", "0") == "1":
    from tests.kit.harness_server import SERVER_PRELOAD, imports_as_rank
    for module in SERVER_PRELOAD:
        importlib.import_module(module)
    from harness.engines.launch.pool import fork_zygote_here
    fork_zygote_here(imports_as_rank)  # before any thread starts
import harness.run.plan.planning, harness.run.report, harness.run.session, harness.run.stages.judge

def sigterm_on_call(module, name, nth=1, after=False):
    original, calls = getattr(module, name), []
    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == nth and not after:
            os.kill(os.getpid(), signal.SIGTERM)
        result = original(*args, **kwargs)
        if len(calls) == nth and after:
            os.kill(os.getpid(), signal.SIGTERM)
        return result
    setattr(module, name, wrapper)

moment = sys.argv[1]
if moment == "planning":      # before the run directory exists
    sigterm_on_call(harness.run.plan.planning, "plan_run")
elif moment == "judging":     # the ranks exited; the harness compares their outputs
    sigterm_on_call(harness.run.stages.judge, "judge_outputs")
elif moment == "after-verdict":  # the first scenario's verdict is on disk, the second not started
    sigterm_on_call(harness.run.session, "run_scenario", after=True)
elif moment == "reporting":   # every scenario ended; the final report is being written
    sigterm_on_call(harness.run.report, "render", nth=2)  # each report file is rendered there (run/report/writers.py)
elif moment == "exiting":     # main returned; the interpreter shuts down (atexit: the rank pool)
    atexit.register(os.kill, os.getpid(), signal.SIGTERM)
sys.argv = ["harness", *sys.argv[2:]]
runpy.run_module("harness", run_name="__main__")  # `python -m harness ARGS`
"""

TWO = ["llama-tiny/tp1-pp1", "llama-tiny/tp1-pp2"]
# The environment the kit's server imports under: the reference engine's rank variables
# (so that its ranks' environment is the one their zygote imported under) and pyarrow
# without a background thread (a process with one must not fork).
FORKING_ENV = {**{k: v for k, v in RANK_ENV.items() if COMMAND_ENV.get(k) != v}, **SERVER_ONLY_ENV, "FORK_RANKS": "1"}


def run_with_sigterm(tmp_path: Path, moment: str, ids: list[str]) -> tuple[subprocess.CompletedProcess, Path]:
    reports = tmp_path / "reports"
    cmd = [sys.executable, "-c", DRIVER, moment, "run", *ids, "--jobs", "1", "--report-dir", str(reports), "--run-id", "r"]
    env = environment(None if moment == "planning" else FORKING_ENV)  # planning: no rank starts
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(600))
    return result, reports / "r"


def test_sigterm_while_planning_exits_130_before_any_run_directory(tmp_path):
    result, run_dir = run_with_sigterm(tmp_path, "planning", TWO)
    assert result.returncode == exit_codes.INTERRUPTED, result.stderr
    assert "harness: interrupted" in result.stderr and "Traceback" not in result.stderr
    assert not run_dir.exists()


def test_sigterm_while_judging_reports_the_scenario_as_never_ended(tmp_path):
    result, run_dir = run_with_sigterm(tmp_path, "judging", TWO[:1])
    assert result.returncode == exit_codes.INTERRUPTED, result.stderr
    assert "writing the report of what finished" in result.stderr
    assert outcomes(run_dir) == {}  # it was stopped before its verdict
    text = summary(run_dir)
    assert "**INCOMPLETE**" in text and "**OK**" not in text
    assert run_meta(run_dir)["interrupted"] is True


def test_sigterm_right_after_a_verdict_reports_it_and_what_never_ran(tmp_path):
    result, run_dir = run_with_sigterm(tmp_path, "after-verdict", TWO)
    assert result.returncode == exit_codes.INTERRUPTED, result.stderr
    assert outcomes(run_dir) == {TWO[0]: "pass"}
    text = summary(run_dir)  # not the start-of-run text: the pass is there, and what never ran
    assert "**INCOMPLETE**" in text and "**OK**" not in text and f"`{TWO[1]}`" in text
    meta = run_meta(run_dir)
    assert meta["counts"] == {"pass": 1} and meta["never_ran"] == [TWO[1]]


def test_sigterm_while_the_final_report_is_written_leaves_it_whole(tmp_path):
    result, run_dir = run_with_sigterm(tmp_path, "reporting", TWO[:1])
    assert result.returncode == exit_codes.INTERRUPTED, result.stderr
    assert run_meta(run_dir)["counts"] == {"pass": 1}  # the final report, not the start-of-run one
    assert "never ran" not in summary(run_dir)
    assert (run_dir / "report.html").read_text().rstrip().endswith("</html>")


def test_sigterm_while_the_harness_exits_after_its_report_is_130(tmp_path):
    result, run_dir = run_with_sigterm(tmp_path, "exiting", TWO[:1])
    assert result.returncode == exit_codes.INTERRUPTED, result.stderr
    assert "Traceback" not in result.stderr
    assert run_meta(run_dir)["counts"] == {"pass": 1}


def test_a_signal_held_while_a_report_is_written_comes_after_it():
    """DeferInterrupts: the work finishes, then the signal is raised as KeyboardInterrupt."""
    import os

    from harness.engines.launch import DeferInterrupts

    done = []
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), DeferInterrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("the rest of the work")
    assert done == ["the rest of the work"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back
