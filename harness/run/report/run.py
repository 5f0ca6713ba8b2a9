"""Everything a report of one run is made from: its metadata, its verdicts, and
(when a history store is given) its history rows and what changed since the last run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.contract.jsonfile import JSONObject
from harness.contract.rundir import verdict_files
from harness.contract.verdict import Verdict
from harness.run.report import history as hist
from harness.run.report.regressions import Comparison, compare_with_history


def collect_verdicts(run_dir: Path) -> list[Verdict]:
    return [Verdict.load(p) for p in verdict_files(run_dir)]


def run_started(run_dir: Path, meta: JSONObject) -> float:
    """The run's start time (epoch seconds): run.json's, else its oldest verdict file's
    (a run directory written by something that did not record it)."""
    if meta.get("started"):
        return float(meta["started"])
    stamps = [p.stat().st_mtime for p in verdict_files(run_dir)]
    return min(stamps) if stamps else Path(run_dir).stat().st_mtime


def never_ran(meta: JSONObject, verdicts: list[Verdict]) -> list[str]:
    """The planned scenarios (run.json's list, written before the first one starts)
    that have no verdict: the run ended (killed, interrupted) before they did."""
    ended = {v.scenario for v in verdicts}
    return [s for s in meta.get("scenarios") or [] if s not in ended]


@dataclass
class RunReport:
    run_dir: Path
    meta: JSONObject
    verdicts: list[Verdict]
    comparison: Comparison | None = None  # None: no history store was given
    # why this run's rows are not in the history store
    history_error: str = ""
    # history files skipped: the comparison is partial
    history_unreadable: list[str] = field(default_factory=list)
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)  # this run's history rows
    earlier: pd.DataFrame = field(default_factory=pd.DataFrame)  # earlier runs of its gate

    @property
    def failing(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.as_expected]

    @property
    def never_ran(self) -> list[str]:
        return never_ran(self.meta, self.verdicts)

    @property
    def coverage_lost_ids(self) -> list[str]:
        return [c.scenario for c in self.comparison.coverage_lost] if self.comparison else []

    @property
    def new_failure_ids(self) -> set[str]:
        return {c.scenario for c in self.comparison.new_failures} if self.comparison else set()

    def trend_rows(self) -> pd.DataFrame:
        """The gate's history including this run, for trend plots."""
        frames = [f for f in (self.earlier, self.rows) if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def build_report(run_dir: Path, meta: JSONObject, history_dir: Path | None) -> RunReport:
    """Read the verdicts; with a history directory, compare with earlier runs of the
    gate and record this run's rows (idempotent: a rebuild replaces them)."""
    verdicts = collect_verdicts(run_dir)
    report = RunReport(Path(run_dir), meta, verdicts)
    if history_dir is None:
        return report
    report.rows = hist.run_rows(run_dir, meta, verdicts, complete=not report.never_ran)
    history, report.history_unreadable = hist.read_history(history_dir)
    report.earlier = hist.earlier_rows(history, meta)
    report.comparison = compare_with_history(report.rows, report.earlier)
    try:
        hist.record(history_dir, report.rows)
    except OSError as exc:
        # the report files still get written, and say so
        report.history_error = (
            f"the history store {history_dir} could not be written ({exc.strerror or exc}); this run is not "
            f"in it: make it writable (or give --history DIR), then `harness report {run_dir}` records it"
        )
    return report
