"""Run reports: what a run leaves in reports/<run-id>/.

  run.json                     the run's metadata (gate, ids, versions, timings, verdict counts,
                               report_s: seconds this report took to write,
                               and what changed since the previous run of its gate)
  scenarios/<id>/verdict.json  one verdict per scenario (written by the runner as it goes)
  scenarios/<id>/logs/         the rank logs
  junit.xml                    for CI systems
  summary.md                   for people: what regressed, one row per scenario, failures explained
  report.html                  the same and more, self-contained: heat map, plots, trends
  pr-comment.md                short, for a PR comment: counts, regressions first, how to reproduce
  <name>                       what an installed package's writer adds (run/report/writers.py)

Reports are rebuilt from the verdict files alone, so a partial run (Ctrl-C, a
crashed harness) still gets a report of whatever finished; the planned list in
run.json (written before the first scenario starts) tells which never ran, and
such a run's report says INCOMPLETE, never OK. Given a history
directory (harness/run/report/history.py), a report also records the run's rows there
and compares the run with the previous one of its gate (regressions.py).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from harness.contract.expectations import declares_unsupported
from harness.contract.jsonfile import JSONObject, read_json
from harness.contract.rundir import json_text, run_meta_path, write_files
from harness.run.report.run import build_report, collect_verdicts, run_started
from harness.run.report.writers import render

__all__ = ["collect_verdicts", "write_report"]


def write_report(run_dir: Path, meta: JSONObject | None = None, history_dir: Path | None = None) -> JSONObject:
    """(Re)write run.json, junit.xml, summary.md, pr-comment.md, report.html (and the files of
    installed packages' writers, run/report/writers.py) from the
    verdicts in run_dir, all of them or none (a full disk leaves the previous report
    whole, never one file that says OK beside a cut-off one). With `history_dir`, also
    record the run in the history and say what changed since the previous run of its gate."""
    started = time.monotonic()
    run_dir = Path(run_dir)
    meta_path = run_meta_path(run_dir)
    old = read_json(meta_path) if meta_path.exists() else {}
    meta = {**old, **(meta or {})}
    meta.setdefault("run_id", run_dir.name)
    meta["started"] = run_started(run_dir, meta)
    report = build_report(run_dir, meta, history_dir)
    meta["counts"] = dict(Counter(v.verdict for v in report.verdicts))
    meta["not_as_expected"] = [v.scenario for v in report.failing]
    meta["coverage_lost"] = report.coverage_lost_ids  # passed before, untested now: exit 1 too
    meta["never_ran"] = report.never_ran
    meta["complete"] = not report.never_ran
    # every scenario unsupported, none of it declared by the scenario file for the engine version it
    # ran on: a suite of an engine that cannot run its model would otherwise pass forever
    meta["nothing_tested"] = bool(report.verdicts) and all(
        v.verdict == "unsupported" and not declares_unsupported(v) for v in report.verdicts
    )
    # scenarios whose files a full or read-only disk stopped (run/stages/ended.py, storage_verdict): exit code 3
    meta["results_not_written"] = [v.scenario for v in report.verdicts if v.error and v.error.get("storage")]
    # a rebuild that records the run clears an old failure
    meta.pop("history_error", None)
    if report.history_error:
        meta["history_error"] = report.history_error
    meta["history_unreadable"] = report.history_unreadable  # skipped, named: the comparison is partial
    if report.comparison is not None:
        meta["changes"] = report.comparison.to_dict()
    report.meta = meta
    texts, problems = render(report)
    meta.pop("report_writer_errors", None)
    # an installed package's writer that failed: its file only is missing
    if problems:
        meta["report_writer_errors"] = problems
        for name, why in problems.items():
            print(
                f"harness: report writer '{name}' wrote nothing ({why}); the run's other report files are written",
                file=sys.stderr,
            )
    files = {run_dir / name: text for name, text in texts.items()}
    meta["report_s"] = round(time.monotonic() - started, 3)  # report writing: the last phase of a run
    # run.json last: its counts match the files beside it
    write_files({**files, meta_path: json_text(meta)})
    return meta
