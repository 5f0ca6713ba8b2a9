"""`harness init`: make a directory a harness project (its config and a first scenario file)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import exit_codes

HELP = "make this directory a harness project: its config and a first scenario file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a checkpoint directory, arch:CLASS (tiny random), ORG/NAME@REVISION "
                   "(hub) or a zoo model (`harness list --models`)")
    p.add_argument("--engine", default="reference", help="the engine the scenarios run on (default: reference)")
    p.add_argument("--suite", help="the suite's name, the first part of every scenario id (default: from the model)")
    p.add_argument("--dir", type=Path, default=Path("."), help="the project's directory (default: here)")


def run(args) -> int:
    from harness.project_init import InitError, init_project
    from harness.settings.project import ProjectConfigError

    try:
        done = init_project(args.dir, args.model, args.engine, args.suite)
    except (InitError, ProjectConfigError) as exc:
        print(f"harness init: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    if done.config:
        print(f"wrote the project config: {done.config}")
    print(f"wrote {done.scenario_file}")
    print(f"next: `harness golden {done.suite}` (commit golden/{done.suite}), then `harness run {done.suite}` "
          f"or `pytest {done.scenario_file.parent.name}/`")
    return exit_codes.OK
