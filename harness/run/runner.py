"""One scenario, start to verdict: admit -> execute -> (same layout) -> judge -> Verdict.save.

The stages live in harness/run/stages/; this is the flow of docs/DESIGN.md ("The flow of one
scenario") in one place. The CLI, pytest and the golden command all come through here,
so the ways in cannot drift apart.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from pathlib import Path

from harness.contract.expectations import apply_expectations
from harness.contract.outputs import EngineOutputs
from harness.contract.rundir import VERDICT, ResultsNotWritten, scenario_dir
from harness.contract.verdict import INTERACTION_SEP, Verdict
from harness.inputs.scenarios.scenario import Scenario
from harness.run import golden as goldens
from harness.run.evals import lm
from harness.run.plan.devices import Lease
from harness.run.stages import localize as localization
from harness.run.stages.admit import admit
from harness.run.stages.context import RunContext
from harness.run.stages.ended import harness_error, launch_verdict
from harness.run.stages.execute import execute
from harness.run.stages.interaction import FAILED, minimal_interaction
from harness.run.stages.judge import judge
from harness.run.stages.same_layout import layout_reference
from harness.run.timings import Stopwatch

__all__ = ["RunContext", "run_scenario", "record_verdict", "make_golden", "reproduce_command", "GoldenUnsupported"]


def reproduce_command(scenario: Scenario, ctx: RunContext) -> str:
    extra = "".join(f" --fault {f}" for f in ctx.config.faults)
    # one engine version of several (harness/inputs/engine_envs.py)
    if scenario.engine_version:
        return f"harness run {scenario.base_id} --engine-env {scenario.engine_version.given}{extra}"
    if not extra and _in_the_harness_checkout():  # its Makefile has a target per scenario id
        return f"make {scenario.id}"
    return f"harness run {scenario.id}{extra}"


def _in_the_harness_checkout() -> bool:
    """`make <id>` works only in the harness's own checkout; in an engine's repository (the
    wheel installed there) the reproduce line is the command that works there."""
    from harness.contract.roots import source_checkout
    from harness.contract.settings.project import project

    checkout = source_checkout()
    return checkout is not None and project().root.resolve() == checkout.resolve()


def run_scenario(scenario: Scenario, run_dir: Path, ctx: RunContext | None = None, lease: Lease | None = None) -> Verdict:
    """Run one scenario and write its verdict.json; never raises except on Ctrl-C and
    ResultsNotWritten (the verdict itself could not be stored)."""
    ctx = ctx or RunContext()
    start = time.monotonic()
    watch = Stopwatch()
    reproduce = reproduce_command(scenario, ctx)
    narrowing = False
    try:
        verdict = _run(scenario, run_dir, ctx, lease, watch)
        narrowing = True  # from here the scenario's own verdict is known (localizing, narrowing)
        _localize(scenario, verdict, run_dir, ctx, lease, watch)
        _narrow(scenario, verdict, run_dir, ctx, lease, watch)
    except KeyboardInterrupt:
        if narrowing:  # the scenario's own verdict is known: the report shows it, not "never ran"
            verdict.reason = f"{verdict.reason}{INTERACTION_SEP}{NARROWING_INTERRUPTED}"
            record_verdict(scenario, verdict, run_dir, ctx, start, watch, reproduce)
        raise
    except Exception as exc:  # noqa: BLE001 - a harness fault must become an `error` verdict
        if narrowing:  # the engine's failure stands; the narrowing's own fault is said beside it
            verdict.reason = f"{verdict.reason}{INTERACTION_SEP}{NARROWING_FAILED}: {type(exc).__name__}: {exc}"
        else:
            verdict = harness_error(scenario.id, exc)
    return record_verdict(scenario, verdict, run_dir, ctx, start, watch, reproduce)


NARROWING_INTERRUPTED = "interrupted before it named the values the failure needs"
NARROWING_FAILED = "the harness could not narrow it (a harness fault, not the engine's)"


def _unexpected_failure(scenario: Scenario, verdict: Verdict) -> bool:
    """A failure its scenario file and the engine's known bugs do not expect (applied to a
    copy: record_verdict applies them to the verdict itself)."""
    if verdict.verdict not in FAILED:
        return False
    return apply_expectations(copy.deepcopy(verdict), scenario.expectations, scenario.known_bugs).verdict != "expected-failure"


def _localize(
    scenario: Scenario, verdict: Verdict, run_dir: Path, ctx: RunContext, lease: Lease | None, watch: Stopwatch
) -> None:
    """An unexpected numeric failure of an engine whose workers record hidden states: its
    first diverging layer, module and rank (run/stages/localize.py), leading its reason."""
    if ctx.config.no_localize or not _unexpected_failure(scenario, verdict) or not localization.wanted(scenario, verdict):
        return
    try:
        found = localization.localize(scenario, verdict, run_dir, ctx, lease)
    except Exception as exc:  # noqa: BLE001 - a localization that cannot run leaves the verdict as it was, saying why
        found = {"layer": None, "recorded": False, "text": f"not localized: the harness failed ({type(exc).__name__}: {exc})"}
    watch.lap("localize")
    if found:
        verdict.localization = found
        verdict.reason = f"{found['text']}; {verdict.reason}"


def _narrow(scenario: Scenario, verdict: Verdict, run_dir: Path, ctx: RunContext, lease: Lease | None, watch: Stopwatch) -> None:
    """A failure of several changed axis values, not one the scenario file expects: the
    smallest combination of them it needs (run/stages/interaction.py), in its reason."""
    if not _unexpected_failure(scenario, verdict):
        return

    def trial(derived: Scenario, directory: Path) -> Verdict:
        try:
            return _run(derived, run_dir, ctx, lease, Stopwatch(), out_dir=scenario_dir(directory, derived.id))
        except Exception as exc:  # noqa: BLE001 - a trial that cannot run keeps its value in, saying why
            return harness_error(derived.id, exc)

    found = minimal_interaction(scenario, verdict, run_dir, ctx.config.interaction_trials, trial)
    if found:
        watch.lap("interaction")
        verdict.interaction = found
        verdict.reason = f"{verdict.reason}{INTERACTION_SEP}{found['text']}"


def standing_bugs(scenario: Scenario, versions: Mapping[str, object]) -> list[str]:
    """The known bugs a row was added for that are in range on `versions` (a bug gone from the
    engine's file stands nowhere): while none stands, the row is not needed there."""
    from harness.contract.expectations import version_problem
    from harness.inputs.scenarios.binding import engine_known_bugs

    bugs = {b.id: b for b in engine_known_bugs(scenario.suite.engine, scenario.source)}
    return [b for b in scenario.for_bugs if b in bugs and version_problem(bugs[b], versions) is None]


def record_verdict(
    scenario: Scenario,
    verdict: Verdict,
    run_dir: Path,
    ctx: RunContext,
    start: float,
    watch: Stopwatch | None = None,
    reproduce: str | None = None,
) -> Verdict:
    """A scenario's verdict made whole (settings, duration since `start`, the scenario file's
    expectations, the reproduce command, timings) and written; also for a verdict decided
    without this runner (a Ray node lost under the scenario, harness/run/raycluster)."""
    out_dir = scenario_dir(run_dir, scenario.id)
    watch = watch or Stopwatch()
    verdict.settings = scenario.settings
    verdict.duration_s = round(time.monotonic() - start, 2)
    verdict.expected_failure = scenario.expected_failure
    verdict.reproduce = reproduce if reproduce is not None else reproduce_command(scenario, ctx)
    # expected-failure only for the failure the scenario file or a known bug of the engine
    # describes, on the engine versions it names (harness/contract/expectations.py)
    verdict = apply_expectations(verdict, scenario.expectations, scenario.known_bugs)
    if scenario.for_bugs:
        verdict.for_bugs = {"bugs": list(scenario.for_bugs), "standing": standing_bugs(scenario, verdict.versions)}
    watch.lap("verdict")
    verdict.timings = watch.timings()
    try:
        verdict.save(out_dir / VERDICT)
    except OSError as exc:
        # the run cannot be recorded: the caller stops it (exit 3), not a verdict
        raise ResultsNotWritten(
            f"cannot write the verdict of {scenario.id} in {out_dir}: {exc.strerror or exc}; "
            "free space or make the report directory writable, then run again"
        ) from None
    return verdict


def _run(
    scenario: Scenario, run_dir: Path, ctx: RunContext, lease: Lease | None, watch: Stopwatch, out_dir: Path | None = None
) -> Verdict:
    out_dir = out_dir or scenario_dir(run_dir, scenario.id)
    admitted = admit(scenario, scenario.engine_settings, out_dir, ctx, ctx.config.gate, watch=watch)
    if isinstance(admitted, Verdict):
        return admitted
    outcome = execute(admitted, out_dir, scenario, ctx, lease, watch)
    layout = layout_reference(scenario, outcome, run_dir, ctx, lease, watch)  # spec, batch: also their own layout
    if isinstance(layout, Verdict):
        return layout
    return judge(scenario, admitted, outcome, watch, layout)


class GoldenUnsupported(RuntimeError):
    """The engine cannot run this golden's model or setting (an arch it does not serve)."""


def golden_work_dir(work_dir: Path, golden_key: str) -> Path:
    """Where make_golden runs a golden's setting (its brief, outputs and logs) before storing it."""
    return Path(work_dir) / "golden" / golden_key


def make_golden(scenario_for_golden: Scenario, work_dir: Path, ctx: RunContext | None = None) -> Path:
    """Run the suite's golden setting and store it. Raises on any failure."""
    ctx = ctx or RunContext()
    suite = scenario_for_golden.suite
    out_dir = golden_work_dir(work_dir, scenario_for_golden.golden_key)
    # gate None: every eval scores its full item count, so any gate's slice pairs with it;
    # a golden is made by the clean engine, whatever the runs inject
    admitted = admit(scenario_for_golden, dict(suite.golden), out_dir, ctx, gate=None, faults=False, golden=False)
    if isinstance(admitted, Verdict) and admitted.verdict == "unsupported":
        # its scenarios end `unsupported` with this reason; there is nothing to compare with
        raise GoldenUnsupported(f"engine '{suite.engine}' cannot run the golden setting: {admitted.reason}")
    if isinstance(admitted, Verdict):
        # the input's error: the caller names the golden
        raise RuntimeError(admitted.reason)
    prepared = admitted.prepared
    # a golden that cannot be stored is said before its run
    goldens.golden_place(scenario_for_golden.golden_key)
    outcome = execute(admitted, out_dir, scenario_for_golden, ctx)
    ended = launch_verdict(scenario_for_golden.id, outcome, prepared.engine)
    # the engine names the worker that really died (vLLM's own processes)
    if ended is not None:
        raise RuntimeError(
            f"golden run of '{scenario_for_golden.golden_key}' ended as {outcome.status}: {ended.reason}; "
            f"logs in {out_dir / 'logs'}"
        )
    results = None
    if prepared.evals:
        results = lm.score_evals(prepared.evals, EngineOutputs.load(prepared.brief.output_dir))
    eval_workloads = [e.workload["name"] for e in prepared.evals]
    return goldens.store_golden(Path(prepared.brief.output_dir), prepared.manifest, evals=results, drop=eval_workloads)
