"""The command line: `harness init | list | run | golden | report | repro | bisect | ...`.

One module per subcommand, each with HELP, add_arguments(parser) and run(args) -> exit
code (harness/contract/exit_codes.py); options several of them take are declared once, in
options.py. The scenario files are read by the subcommands that need them (suites.py),
each file on its own: one broken file never ends a command about the others.
`harness init` writes a project's config and first scenario file through project_init.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.cli import archs, bisect, conformance, docs, durations, golden, init, install, listing, report, repro, run, variables
from harness.contract import exit_codes
from harness.contract.roots import export_to_children
from harness.contract.settings.project import ProjectConfigError
from harness.contract.settings.variables import VariableValueError, check_values
from harness.engines.launch import SigtermAsInterrupt
from harness.inputs.scenarios.schema import ScenarioError
from harness.run.plan.devices import DeviceError
from harness.run.plan.nodes import NodesError
from harness.run.request import RunOptionError

# name -> the subcommand's module, in the order `harness --help` lists them
COMMANDS = {
    "init": init,
    "install": install,
    "list": listing,
    "run": run,
    "golden": golden,
    "report": report,
    "repro": repro,
    "bisect": bisect,
    "conformance": conformance,
    "durations": durations,
    "archs": archs,
    "env": variables,
    "docs": docs,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Distributed correctness harness for LLM inference engines.")
    p.add_argument(
        "--scenarios",
        type=Path,
        action="append",
        help="scenario file or directory (default: the project's, from its harness config, and the built-in suites)",
    )
    # the metavar lists the user's commands: bisect-step is the harness's own, for `git bisect run`
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, command in COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.HELP, description=command.HELP))
    # no help=: no line in --help; harness/run/bisect.py run_step
    bisect.add_step_arguments(sub.add_parser("bisect-step"))
    return p


def main(argv: list[str] | None = None) -> int:
    """The `harness` command. SIGTERM acts as Ctrl-C from its first line to its last
    (README, "Exit codes": 130, and a run's report covers what ended), not only while
    ranks run: a CI job cancelled while the harness plans, judges or reports still gets
    an interrupt report, never SIGTERM's silent default death (143)."""
    with SigtermAsInterrupt():
        try:
            return _main(argv)
        except KeyboardInterrupt:
            print("\nharness: interrupted", file=sys.stderr)
            return exit_codes.INTERRUPTED
        except BrokenPipeError:
            # the reader left early (`harness list | head`): nothing went wrong here
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            return exit_codes.OK


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)  # the defaults read the project config
        if args.command not in ("env", "docs"):  # `harness env` shows what is wrong with each
            # every HARNESS_* value as the user set it, before anything runs (not an `error` once
            # ranks start); before the export, which sets some for children
            check_values()
        export_to_children()
    except (ProjectConfigError, VariableValueError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    try:
        if args.command == "bisect-step":
            return bisect.run_step(args)
        code: int = COMMANDS[args.command].run(args)  # each module's run(args) -> int
        return code
    # RunOptionError: a run option the parser's value types let through (a default, a variable)
    except (ScenarioError, DeviceError, NodesError, VariableValueError, ProjectConfigError, RunOptionError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.USAGE
