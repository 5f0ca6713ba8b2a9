"""`harness durations`: the recorded duration of every scenario, for --durations."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import exit_codes
from harness.cli.options import add_report_dir

HELP = "write the recorded duration of every scenario (for --durations)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_report_dir(p)
    p.add_argument("--out", type=Path, required=True)


def run(args) -> int:
    from harness.plan.schedule import recorded_durations, write_durations

    durations = recorded_durations(args.report_dir)
    write_durations(args.out, durations)
    print(f"harness: {len(durations)} scenario durations from {args.report_dir} -> {args.out}")
    return exit_codes.OK
