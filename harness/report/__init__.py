"""Run reports: what a run leaves in reports/<run-id>/.

  run.json                     the run's metadata (gate, ids, versions, timings, verdict counts)
  scenarios/<id>/verdict.json  one verdict per scenario (written by the runner as it goes)
  scenarios/<id>/logs/         the rank logs
  junit.xml                    for CI systems
  summary.md                   for people: one row per scenario, failures explained below

Reports are rebuilt from the verdict files alone, so a partial run (Ctrl-C, a
crashed harness) still gets a report of whatever finished.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from harness.report.junit import write_junit
from harness.report.markdown import write_markdown
from harness.verdict import Verdict


def collect_verdicts(run_dir: Path) -> list[Verdict]:
    return [Verdict.load(p) for p in sorted((run_dir / "scenarios").glob("*/verdict.json"))]


def write_report(run_dir: Path, meta: dict | None = None) -> dict:
    """(Re)write junit.xml, summary.md and run.json from the verdicts in run_dir."""
    run_dir = Path(run_dir)
    verdicts = collect_verdicts(run_dir)
    meta_path = run_dir / "run.json"
    old = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta = {**old, **(meta or {})}
    meta["counts"] = dict(Counter(v.verdict for v in verdicts))
    meta["not_as_expected"] = [v.scenario for v in verdicts if not v.as_expected]
    meta_path.write_text(json.dumps(meta, indent=1))
    write_junit(run_dir / "junit.xml", verdicts, meta)
    write_markdown(run_dir / "summary.md", verdicts, meta)
    return meta
