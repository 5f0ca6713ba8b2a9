"""A report writer of another package: verdicts.csv, a row per scenario of the run.

The harness calls `verdicts_csv(report)` with the run's report (harness.run.report.run.RunReport:
its `verdicts`, `meta`, `run_dir`) and writes the text it returns as reports/<run-id>/verdicts.csv.
"""

from __future__ import annotations

import csv
import io

COLUMNS = ("scenario", "verdict", "observed", "duration_s", "engine", "engine_version", "reason")


def verdicts_csv(report) -> str:
    out = io.StringIO()
    rows = csv.writer(out, lineterminator="\n")
    rows.writerow(COLUMNS)
    for v in report.verdicts:
        engine = str(v.versions.get("engine", ""))
        rows.writerow((v.scenario, v.verdict, v.observed or "", v.duration_s, engine, v.versions.get(engine, ""), v.reason))
    return out.getvalue()
