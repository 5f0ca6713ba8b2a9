"""`harness report --merge` and `--diff`: several run directories as one, two runs side by side.

Merging copies the scenario directories of every source run (verdicts, briefs, logs;
not the engine outputs, which stay in the sources named in run.json's `merged_from`)
into a new run directory and combines their run.json in a way that does not depend
on the order of the sources. Two runs that both hold the same scenario are refused:
shards of one run never overlap, so an overlap means the wrong directories were named.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.contract.jsonfile import JSONObject, read_json
from harness.contract.rundir import OUTPUTS, run_meta_path, scenarios_root, verdict_files, write_json
from harness.run.report.history import run_rows
from harness.run.report.markdown import diff_markdown
from harness.run.report.regressions import compare_with_history
from harness.run.report.run import collect_verdicts, run_started


class ReportError(Exception):
    """A report command given something it cannot use; the message says what."""


def read_run(run_dir: Path) -> JSONObject:
    """run.json of a run directory (with run_id and started filled in)."""
    run_dir = Path(run_dir)
    # run.json alone is a run too: one interrupted before its first scenario started
    if not scenarios_root(run_dir).is_dir() and not run_meta_path(run_dir).is_file():
        raise ReportError(
            f"{run_dir} is not a run directory (it has neither run.json nor scenarios/; run directories are reports/<run-id>/)"
        )
    meta_path = run_meta_path(run_dir)
    try:
        meta = read_json(meta_path) if meta_path.exists() else {}
    except ValueError as exc:  # names the file and what it holds
        raise ReportError(str(exc)) from None
    meta.setdefault("run_id", run_dir.name)
    meta["started"] = run_started(run_dir, meta)
    return meta


def _merged_versions(metas: list[JSONObject]) -> dict[str, str]:
    keys = sorted({k for m in metas for k in (m.get("versions") or {})})
    return {k: " / ".join(sorted({str((m.get("versions") or {}).get(k, "?")) for m in metas})) for k in keys}


def merged_meta(metas: list[JSONObject], run_id: str) -> JSONObject:
    gates = sorted({m.get("gate") or "" for m in metas})
    if len(gates) > 1:
        raise ReportError(
            f"the runs belong to different gates ({', '.join(g or 'none' for g in gates)}); merge the shards of one run"
        )
    finished = [m["finished"] for m in metas if m.get("finished")]
    return {
        "run_id": run_id,
        "gate": gates[0] or None,
        "scenarios": sorted({s for m in metas for s in m.get("scenarios", [])}),
        "faults": sorted({f for m in metas for f in m.get("faults") or []}),
        "versions": _merged_versions(metas),
        "started": min(m["started"] for m in metas),
        "finished": max(finished) if finished else None,
        "interrupted": any(m.get("interrupted") for m in metas),
        "merged_from": sorted(m["run_id"] for m in metas),
    }


def merge_runs(sources: list[Path], out: Path) -> JSONObject:
    """Copy the scenarios of every source run into `out` and write its run.json."""
    if len(sources) < 2:
        raise ReportError("--merge needs at least two run directories")
    metas = [read_run(s) for s in sources]
    out = Path(out)
    if scenarios_root(out).exists():
        raise ReportError(f"{out} already holds a run; merge into a new directory")
    owner: dict[str, Path] = {}
    for source in sources:
        for scenario in verdict_files(source):
            name = scenario.parent.name
            if name in owner:
                raise ReportError(
                    f"scenario {name.replace('__', '/')} is in both {owner[name]} and {source}; shards of one run never overlap"
                )
            owner[name] = Path(source)
    for name, source in owner.items():
        shutil.copytree(scenarios_root(source) / name, scenarios_root(out) / name, ignore=shutil.ignore_patterns(OUTPUTS))
    meta = merged_meta(metas, out.name)
    write_json(run_meta_path(out), meta)
    return meta


def diff_runs(old_dir: Path, new_dir: Path) -> tuple[str, bool]:
    """The Markdown diff of two runs and whether NEW regressed against OLD. The noise
    band of a metric is then built from OLD's value alone (its floors)."""
    old_meta, new_meta = read_run(old_dir), read_run(new_dir)
    old_rows = run_rows(Path(old_dir), old_meta, collect_verdicts(old_dir))
    new_verdicts = collect_verdicts(new_dir)
    new_rows = run_rows(Path(new_dir), new_meta, new_verdicts)
    comparison = compare_with_history(new_rows, old_rows)
    return diff_markdown(old_meta, new_meta, comparison, new_verdicts), comparison.regressed
