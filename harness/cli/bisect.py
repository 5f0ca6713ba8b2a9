"""`harness bisect`: the first engine release or commit where a scenario's verdict changes,
and `bisect-step`, one step of `git bisect run` (hidden: the bisect calls it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import suites
from harness.cli.options import add_device, add_report_dir, add_timeout
from harness.contract import exit_codes

GOOD_VERDICTS = ("pass", "fail", "crash", "hang", "unsupported")  # what --good-verdict may name

HELP = "find the first engine release or commit where a scenario's verdict changes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="one scenario id, e.g. vllm-llama/tp1-pp2")
    p.add_argument(
        "--good",
        required=True,
        help="a release (or with --git a commit) where it passes (or ends as "
        "--good-verdict says); it runs first, and the bisect stops at once if it does not",
    )
    p.add_argument(
        "--bad",
        required=True,
        help="a later release (or commit; with --fixed an earlier one) where it ends otherwise (fail, crash, hang)",
    )
    p.add_argument(
        "--good-verdict", choices=GOOD_VERDICTS, default="pass", help="what the scenario ends as at the good end (default: pass)"
    )
    p.add_argument(
        "--fixed",
        action="store_true",
        help="look for the change that fixed a bug: --bad is the older end (it fails), --good the newer (it passes)",
    )
    p.add_argument("--engine", help="the engine whose releases to bisect (default: the scenario's)")
    p.add_argument(
        "--git",
        type=Path,
        metavar="DIR",
        help="bisect commits of this engine checkout instead "
        "(git bisect run; the checkout first on PYTHONPATH, as an editable install)",
    )
    p.add_argument("--install", metavar="CMD", help="with --git: a shell command run in DIR before each step (a build)")
    p.add_argument(
        "--count-unsupported",
        action="store_true",
        help="count `unsupported` as a verdict (when did a setting stop or start being supported), not as a step to skip",
    )
    add_device(p)
    add_timeout(p, "per-step scenario")
    p.add_argument("--work-dir", type=Path, help="where the steps' runs go (default: <report-dir>/bisect/<time>-<scenario>)")
    add_report_dir(p)


def add_step_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("order", help="the step, whole, as JSON (harness/run/bisect.py StepOrder)")


def run(args: argparse.Namespace) -> int:
    """`harness bisect SCENARIO --good V1 --bad V2` over releases, or `--git DIR` over commits."""
    from harness.inputs.scenarios.schema import ScenarioError
    from harness.run.bisect import BisectError, bisect_git, bisect_releases, default_work_dir, repro_hook, scenario_args_of
    from harness.run.request import RunConfig
    from harness.run.runner import RunContext

    if args.install and not args.git:
        print("harness bisect: --install goes with --git DIR", file=sys.stderr)
        return exit_codes.USAGE
    try:
        scenario = suites.find_one_in(suites.load(args, "harness bisect"), args.scenario)
    except ScenarioError as exc:
        print(f"harness bisect: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    work_dir = (args.work_dir or default_work_dir(args.report_dir, scenario)).absolute()
    ctx = RunContext(RunConfig.from_cli(args, interaction_trials=0, no_localize=True))  # a step asks pass or fail
    try:
        if args.git:
            if args.engine and args.engine != scenario.suite.engine:
                raise BisectError(f"{scenario.id} runs on engine '{scenario.suite.engine}', not '{args.engine}'")
            result = bisect_git(
                scenario,
                scenario_args_of(args.scenarios),
                args.git,
                args.good,
                args.bad,
                work_dir,
                ctx,
                args.install,
                args.count_unsupported,
                good_verdict=args.good_verdict,
                fixed=args.fixed,
            )
        else:
            result = bisect_releases(
                scenario,
                args.good,
                args.bad,
                work_dir,
                ctx,
                args.engine,
                args.count_unsupported,
                good_verdict=args.good_verdict,
                fixed=args.fixed,
            )
    except BisectError as exc:
        print(f"harness bisect: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except KeyboardInterrupt:
        print("\nharness bisect: interrupted (the checkout is reset)", file=sys.stderr)
        return exit_codes.INTERRUPTED
    print(result.text())
    print(f"bisect: the steps' runs are in {work_dir}")
    # the repro of the first bad step, under --report-dir with the rest of what the bisect wrote
    repro_hook(result.scenario or scenario, result.run_dir, checkout=result.checkout, report_dir=args.report_dir)
    return exit_codes.OK


def run_step(args: argparse.Namespace) -> int:
    """One step of `git bisect run` (harness/run/bisect.py run_step): exit 0 good, 1 bad,
    125 skip, 128 the step could not run (git bisect stops)."""
    from harness.run.bisect import ABORT, StepOrder, run_step

    try:
        order = StepOrder.from_json(args.order)
        scenario = suites.find_one_in(suites.load(args, "bisect"), order.scenario)
        return run_step(scenario, order)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - exit 1 would read as "bad": a harness fault stops the bisect instead
        print(f"bisect: step could not run: {type(exc).__name__}: {exc}", flush=True)
        return ABORT
