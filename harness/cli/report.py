"""`harness report`: rebuild a run's report, merge shard runs into one, or diff two runs.
It reads run directories only, never scenario files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.options import add_history
from harness.contract import exit_codes
from harness.contract.jsonfile import JSONObject

HELP = "rebuild a run's report, merge shard runs into one, or diff two runs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, nargs="?", help="the run directory whose report to rebuild")
    p.add_argument(
        "--merge", type=Path, nargs="+", metavar="DIR", help="run directories (shards of one run) to merge into -o OUT"
    )
    p.add_argument("-o", "--out", type=Path, help="the new run directory of --merge")
    p.add_argument("--diff", type=Path, nargs=2, metavar=("OLD", "NEW"), help="what changed from run OLD to run NEW")
    add_history(p, "history/ beside the run directory")


def run(args: argparse.Namespace) -> int:
    """Exits as `harness run` would have (harness/contract/exit_codes.py; diff: 1 on new regressions)."""
    from harness.run.report import write_report
    from harness.run.report.history import history_dir
    from harness.run.report.merge import ReportError, diff_runs, merge_runs, read_run

    modes = sum(x is not None for x in (args.run_dir, args.merge, args.diff))
    if modes != 1:
        print("harness report: give exactly one of RUN_DIR, --merge DIR... -o OUT, --diff OLD NEW", file=sys.stderr)
        return exit_codes.USAGE
    try:
        if args.diff:
            text, regressed = diff_runs(*args.diff)
            print(text)
            return exit_codes.NOT_AS_EXPECTED if regressed else exit_codes.OK
        if args.merge:
            if args.out is None:
                raise ReportError("--merge needs -o OUT, the new run directory")
            merge_runs(args.merge, args.out)
            run_dir = args.out
        else:
            run_dir = args.run_dir
            # a clear error for a directory that is not a run
            read_run(run_dir)
    except ReportError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    try:
        meta = write_report(run_dir, history_dir=history_dir(run_dir.resolve().parent, args.history))
    except OSError as exc:
        print(f"harness report: cannot write the report in {run_dir}: {exc.strerror or exc}; make it writable", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN
    except ValueError as exc:
        # a damaged verdict.json or run.json (harness/contract/jsonfile.py names it)
        print(f"harness report: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print((run_dir / "summary.md").read_text())
    print(f"harness: report: {run_dir / 'report.html'}")
    say_what_was_not_recorded(meta, "harness report")
    return exit_codes.of_run(meta)


def say_what_was_not_recorded(meta: JSONObject, who: str) -> None:  # run.json
    """The history's problems: files skipped as unreadable, results not stored."""
    for problem in meta.get("history_unreadable") or []:
        print(
            f"{who}: warning: history file skipped, unreadable: {problem}; the comparison with earlier runs is partial",
            file=sys.stderr,
        )
    if meta.get("history_error"):
        print(f"{who}: results not recorded: {meta['history_error']}", file=sys.stderr)
