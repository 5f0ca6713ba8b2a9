"""`harness durations`: the recorded duration of every scenario, for --durations."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.options import add_report_dir
from harness.contract import exit_codes

HELP = "write the recorded duration of every scenario (for --durations)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_report_dir(p)
    p.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from harness.run.plan.schedule import recorded_durations, write_durations

    # nothing to read is not "0 durations": a typo would write {} silently
    if not args.report_dir.is_dir():
        what = "does not exist" if not args.report_dir.exists() else "is not a directory"
        print(
            f"harness: the report dir {args.report_dir} {what}: no runs to read durations from "
            "(give --report-dir, or $HARNESS_REPORTS_DIR, the directory that holds the run directories)",
            file=sys.stderr,
        )
        return exit_codes.USAGE
    durations = recorded_durations(args.report_dir)
    try:
        write_durations(args.out, durations)
    except OSError as exc:
        print(f"harness: could not write the durations file {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN
    print(f"harness: {len(durations)} scenario durations from {args.report_dir} -> {args.out}")
    return exit_codes.OK
