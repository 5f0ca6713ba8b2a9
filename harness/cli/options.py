"""What several subcommands take, declared once: value types that make a bad value a
usage error (argparse's exit 2 with the option named), and the shared option groups."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from harness.config.schema import ScenarioError, env_problem
from harness.roots import reports_dir
from harness.rundir import run_id_problem
from harness.settings.env import DEVICE


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


def shard_spec(text: str) -> str:
    """I/N, checked here so a bad shard is a usage error; planning parses it again."""
    from harness.plan.schedule import parse_shard

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


# -- option groups ----------------------------------------------------------------------


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default=DEVICE.text(),
                   help=f"where the ranks run (default: ${DEVICE.name}, else cpu)")


def add_report_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-dir", type=Path, default=reports_dir(),
                   help="where runs are written (default: $HARNESS_REPORTS_DIR, else the project's reports/)")


def add_timeout(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--timeout", type=positive_seconds, help=f"{what} timeout in seconds (overrides the scenario file)")


def add_selection(p: argparse.ArgumentParser) -> None:
    """Which scenarios: ids, glob patterns or suite names, and/or a gate."""
    p.add_argument("ids", nargs="*", help="ids or glob patterns, or suite names")
    p.add_argument("--gate", help="only scenarios of this gate (pr, nightly, vllm, or one a scenario file defines)")


def add_history(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--history", type=Path, help=f"history store (default: $HARNESS_HISTORY_DIR or {default})")
