"""`harness run`: plan the chosen scenarios, run them, write the report, exit as they ended."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli import suites
from harness.cli.options import add_config_option
from harness.contract import exit_codes
from harness.contract.rundir import ResultsNotWritten, RunDirTaken, check_writable, claim_new_run_dir, claim_run_dir, verdict_path
from harness.contract.settings.project import project
from harness.engines.launch import DeferInterrupts
from harness.inputs.scenarios.loading import BrokenSuite
from harness.run.request import RunConfig, unknown_faults

if TYPE_CHECKING:
    from harness.contract.jsonfile import JSONObject
    from harness.contract.verdict import Verdict
    from harness.inputs.scenarios.scenario import Scenario
    from harness.run.plan.schedule import Cost
    from harness.run.stages.context import RunContext

HELP = "run scenarios and write a report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of RunConfig that has a flag, in its order (harness/run/request.py)."""
    for f in fields(RunConfig):
        add_config_option(p, f.name)


def harness_versions() -> dict[str, str]:
    import torch

    from harness.contract.provenance import harness_provenance

    return {"torch": torch.__version__, "python": sys.version.split()[0], **harness_provenance()}


def run(args: argparse.Namespace) -> int:
    # every option of the run; `args` says where the scenario files come from
    config = RunConfig.from_cli(args)
    catalog = suites.load(args)
    used = suites.where_from(args)
    print(f"harness: project config {used['config'] or '(none)'}; scenario files from {', '.join(used['scenarios'])}", flush=True)
    # a typo ends here, with its hint: before torch and pandas load
    selected, broken = catalog.pick(list(config.ids), config.gate)
    from harness.run.plan.planning import plan_run
    from harness.run.raycluster.connect import cluster_option
    from harness.run.report.history import history_dir
    from harness.run.report.regressions import gate_suspects
    from harness.run.runner import RunContext

    if config.engine_envs:
        from harness.inputs import engine_envs

        if config.changed_files or config.changed_since:
            print("harness: --engine-env does not go with --changed-files / --changed-since", file=sys.stderr)
            return exit_codes.USAGE
        try:
            selected = engine_envs.expand(selected, list(config.engine_envs))
        except engine_envs.EngineEnvError as exc:
            print(f"harness: {exc}", file=sys.stderr)
            return exit_codes.USAGE
    report_dir = config.report_dir
    # the gate starts with what failed or drifted in its history (harness/run/plan/priority.py)
    suspects = gate_suspects(history_dir(report_dir, config.history), config.gate)
    plan = plan_run(config, catalog.scenarios, selected, project().root, suspects)
    chosen = plan.scenarios
    if not chosen and not broken:
        print("harness: nothing to run (no scenario matches)", file=sys.stderr)
        return exit_codes.USAGE
    problem = unknown_faults(config.faults, {s.suite.engine for s in chosen}, "--fault")
    if problem:
        print(f"harness: {problem}", file=sys.stderr)
        return exit_codes.USAGE
    shard = f"-shard{plan.meta['shard']['index']}of{plan.meta['shard']['count']}" if "shard" in plan.meta else ""
    history = history_dir(report_dir, config.history)
    # the planned list goes on disk with the claim: a report of a killed run can then say what never ran
    meta: JSONObject = {
        "gate": config.gate,
        "scenarios": [s.id for s in chosen] + [b.error_id for b in broken],
        "faults": list(config.faults),
        "versions": harness_versions(),
        "started": time.time(),
        "project": used,
        "allow_empty": config.allow_empty,
        # what loading the suites said (an arch gone from the engine's registry): kept with the run
        "notices": catalog.notices,
        **plan.meta,
    }
    ctx = RunContext(replace(config, cluster=cluster_option(config.cluster)), plan.devices, plan.cluster)
    try:
        check_writable(history / "runs", "history store", "make it writable, or give --history DIR (or $HARNESS_HISTORY_DIR)")
        run_dir = (
            claim_run_dir(report_dir, config.run_id, meta)
            if config.run_id
            else claim_new_run_dir(report_dir, meta, (f"-{config.gate}" if config.gate else "") + shard)
        )
    except RunDirTaken as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except ResultsNotWritten as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN
    meta["run_id"] = run_dir.name
    _record_broken(run_dir, broken)
    # from the claim on, an interrupt ends in the report of what ended (_run_and_report)
    try:
        return _run_and_report(chosen, run_dir, meta, history, ctx, plan.cost)
    except ResultsNotWritten as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN


def _record_broken(run_dir: Path, broken: list[BrokenSuite]) -> None:
    """A suite whose file could not be used, in a run that could have picked it: `error`,
    in the report beside the scenarios that ran (its own could not even be listed)."""
    from harness.contract.verdict import Verdict

    for b in broken:
        lines = [line.strip() for line in b.problem.splitlines() if line.strip()]
        said = " ".join(lines[:2]) + (f" (and {len(lines) - 2} more lines)" if len(lines) > 2 else "")
        Verdict(
            scenario=b.error_id,
            verdict="error",
            reason=f"scenario file cannot be used, its scenarios did not run: {said}",
            error={"kind": "scenario-file", "file": str(b.path), "message": b.problem},
            reproduce=f"harness list {b.suite}",
        ).save(verdict_path(run_dir, b.error_id))


def _run_and_report(
    chosen: list[Scenario], run_dir: Path, meta: JSONObject, history: Path, ctx: RunContext, cost: dict[str, Cost]
) -> int:
    from harness.cli.report import say_what_was_not_recorded
    from harness.run.report.markdown import counts_text
    from harness.run.report.progress import choose_progress
    from harness.run.session import run_session

    interrupted = False
    stopped: dict[str, str] = {}
    try:
        _write_report(run_dir, meta, history)
        if chosen:
            verdicts = run_session(chosen, run_dir, ctx, progress=choose_progress(), cost=cost)
            stopped = _stopped_after(verdicts) if ctx.config.exitfirst else {}
    except KeyboardInterrupt:
        interrupted = True
        print("\nharness: interrupted; ranks stopped, writing the report of what finished", file=sys.stderr)
    try:
        # the last report is written whole, whatever signal comes meanwhile
        with DeferInterrupts():
            meta = _write_report(run_dir, {"interrupted": interrupted, "finished": time.time(), **stopped}, history)
    except KeyboardInterrupt:
        # stopped while reporting: the report is whole, the exit code says it was stopped
        interrupted = True
    from harness.run.report.versions import versions_text

    table = versions_text(_collect_for_table(run_dir))
    if table:
        print(table)
    if meta.get("nothing_tested") and not meta.get("allow_empty"):
        print(f"harness: {exit_codes.nothing_tested_text(len(meta['scenarios']), '--allow-empty')}", file=sys.stderr)
    print(f"harness: {counts_text(meta['counts'], meta['never_ran'])}; report: {run_dir / 'report.html'}")
    say_what_was_not_recorded(meta, "harness")
    if meta.get("results_not_written"):
        print(
            "harness: results not written (a disk fault, not the engine): " + ", ".join(meta["results_not_written"]),
            file=sys.stderr,
        )
    if meta["not_as_expected"]:
        print("harness: not as expected: " + ", ".join(meta["not_as_expected"]), file=sys.stderr)
    if meta.get("stopped_after") and meta["never_ran"]:
        print(
            f"harness: --exitfirst stopped the run after {meta['stopped_after']}; not run: {', '.join(meta['never_ran'])}",
            file=sys.stderr,
        )
    if meta.get("coverage_lost"):
        print(
            "harness: coverage lost (passed in the previous run of the gate, not tested now): "
            + ", ".join(meta["coverage_lost"]),
            file=sys.stderr,
        )
    return exit_codes.of_run(meta, interrupted)


def _stopped_after(verdicts: Iterable[Verdict]) -> dict[str, str]:
    """run.json's `stopped_after`: the failure --exitfirst stopped at, so the report can say
    why the rest never ran (not killed, not interrupted)."""
    failed = [v.scenario for v in verdicts if not v.as_expected]
    return {"stopped_after": failed[0]} if failed else {}


def _collect_for_table(run_dir: Path) -> list[Verdict]:
    from harness.run.report import collect_verdicts

    try:
        return collect_verdicts(run_dir)
    except (OSError, ValueError):
        return []


def _write_report(run_dir: Path, meta: JSONObject, history: Path) -> JSONObject:
    from harness.run.report import write_report

    try:
        return write_report(run_dir, meta, history)
    except OSError as exc:
        raise ResultsNotWritten(
            f"cannot write the report in {run_dir}: {exc.strerror or exc}; "
            f"make it writable, then `harness report {run_dir}` rebuilds it from the verdicts"
        ) from None
