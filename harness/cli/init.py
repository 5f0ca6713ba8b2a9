"""`harness init`: make a directory a harness project (its config and a first scenario file)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.contract import exit_codes

HELP = "make this directory a harness project: its config and a first scenario file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="a checkpoint directory, arch:CLASS (tiny random), ORG/NAME@REVISION (hub) or a zoo model (`harness list --models`)",
    )
    p.add_argument("--engine", default="reference", help="the engine the scenarios run on (default: reference)")
    p.add_argument("--suite", help="the suite's name, the first part of every scenario id (default: from the model)")
    p.add_argument("--dir", type=Path, default=Path("."), help="the project's directory (default: here)")


def run(args: argparse.Namespace) -> int:
    from harness.cli.project_init import InitError, init_project
    from harness.contract.settings.project import ProjectConfigError, project

    try:
        done = init_project(args.dir, args.model, args.engine, args.suite, say=print)
    except (InitError, ProjectConfigError) as exc:
        print(f"harness init: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    if done.config:
        print(f"wrote the project config: {done.config}")
        if done.config_why:
            print(f"  {done.config_why}")
    print(f"wrote {done.scenario_file}")
    # what the installed engine cannot run is not planned
    for axis, why in (done.left_out or {}).items():
        print(f"left out {axis}: {why}")
    # kept out of `git add .`: run output, the engine's environment (GBs)
    if done.gitignore:
        print(f"added to {done.gitignore}: {', '.join(done.ignored)}")
    root = args.dir.resolve()
    golden = project(root).golden / done.suite  # as the config says, not a fixed golden/
    print(
        f"next: `harness golden {done.suite}` (commit {_shown(golden, root)}), then the PR gate: `harness run --gate pr` "
        f"or `pytest -m pr` (the same scenarios; `harness run {done.suite}` or `pytest {_shown(done.scenario_file.parent, root)}/`: all of them)"
    )
    return exit_codes.OK


def _shown(path: Path, root: Path) -> str:
    """`path` as the user would type it from the project's directory."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
