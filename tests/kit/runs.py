"""What a run directory says, read through harness/contract/rundir.py (the one place that
spells its layout): the verdicts as the JSON they are stored as, run.json, the summary."""

from __future__ import annotations

import json
from pathlib import Path

from harness.contract.rundir import outputs_dir, run_meta_path, verdict_files, verdict_path


def verdict_of(run_dir: Path, scenario_id: str) -> dict:
    """One scenario's verdict.json (with `as_expected`, as reports read it)."""
    return json.loads(verdict_path(run_dir, scenario_id).read_text())


def verdicts(run_dir: Path) -> dict[str, dict]:
    """Every verdict the run wrote, by scenario id."""
    found = (json.loads(p.read_text()) for p in verdict_files(run_dir))
    return {v["scenario"]: v for v in found}


def outcomes(run_dir: Path) -> dict[str, str]:
    """Scenario id -> its verdict word (pass, fail, crash, ...)."""
    return {sid: v["verdict"] for sid, v in verdicts(run_dir).items()}


def run_meta(run_dir: Path) -> dict:
    return json.loads(run_meta_path(run_dir).read_text())


def summary(run_dir: Path) -> str:
    return (Path(run_dir) / "summary.md").read_text()


def outputs_meta(run_dir: Path, scenario_id: str) -> dict:
    """outputs.json of what the scenario's engine wrote."""
    return json.loads((outputs_dir(run_dir, scenario_id) / "outputs.json").read_text())
