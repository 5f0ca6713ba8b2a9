"""Admit: every refusal of a run in one place, before a rank starts.

A setting of a scenario is prepared (engine configured, model built or found, workloads
tokenized, eval requests collected, the manifest a golden for it must match) and then
refused, or admitted with its reference:
  error        the engine is not installed, the model cannot be resolved, a workload
               cannot be given to this model, a fault switch is bad, the golden is missing, damaged or made for something else, the eval
               items do not pair with the golden's: the input's fault
  unsupported  the engine's reason, or too few devices here
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.contract.jsonfile import JSONObject
from harness.contract.runbrief import RunBrief
from harness.contract.rundir import OUTPUTS
from harness.contract.verdict import Verdict
from harness.engines import Engine, EngineUnavailable, get_engine
from harness.inputs import models
from harness.inputs import workloads as wl
from harness.inputs.scenarios.scenario import Scenario
from harness.inputs.zoo import load_tokenizer
from harness.run import golden as goldens
from harness.run.evals import lm
from harness.run.evals.paired import PairingError, PowerlessCheckError, check_pairing
from harness.run.plan.devices import devices_problem
from harness.run.stages.context import RunContext
from harness.run.timings import Stopwatch


@dataclass
class Prepared:
    engine: Engine
    brief: RunBrief
    # what a golden for this suite must have been made from
    manifest: JSONObject
    evals: list[lm.PreparedEval] = field(default_factory=list)  # one per eval of the suite
    # wall clock when the ranks were started (phase marks share it)
    launched_at: float | None = None
    # the interpreter that built a tiny checkpoint (said on a golden mismatch)
    model_builder_python: str | None = None


@dataclass
class Admitted:
    """A setting of a scenario that nothing refuses: prepared, ready to launch."""

    prepared: Prepared
    # devices one run holds: asked once, of the configured engine
    need: int
    # the golden it is held to (None: judged otherwise)
    reference: goldens.Reference | None = None


def admit(
    scenario: Scenario,
    settings: JSONObject,
    out_dir: Path,
    ctx: RunContext,
    gate: str | None = None,
    faults: bool = True,
    golden: bool = True,
    watch: Stopwatch | None = None,
) -> Admitted | Verdict:
    """The first stage of every run of a setting (the CLI's and pytest's scenarios, the
    API's settings, goldens, the conformance kit). A Verdict when refused. `faults=False`:
    the clean engine (a golden is made so); `golden=False`: no golden is loaded (a golden
    run makes one; the API holds one setting to another's run). `watch` books the
    `prepare`, `support` and `golden` phases."""
    watch = watch or Stopwatch()
    try:
        prepared = prepare(scenario, settings, out_dir, ctx, gate)
    except (EngineUnavailable, models.ModelError, wl.WorkloadError) as exc:  # the input's fault; nothing was launched
        return Verdict(scenario.id, "error", str(exc), error={"exception": str(exc)})
    finally:
        watch.lap("prepare")
    if not faults:
        prepared.brief.faults = []
    need = prepared.engine.devices_needed(settings)
    reason = prepared.engine.unsupported_reason(settings, prepared.brief.model_dir) or devices_problem(
        need, ctx.devices, ctx.cluster
    )
    watch.lap("support")  # apart from `golden`: the engine's own answer may take a while (vLLM's arch probe, cold)
    if reason:
        return Verdict(scenario.id, "unsupported", reason)
    problem = prepared.engine.fault_problem(prepared.brief.faults, settings)
    # before launch: a bad fault is the input's error, not a crash of the engine
    if problem:
        return Verdict(scenario.id, "error", f"bad fault switch: {problem}", error={"exception": problem})
    if not golden:
        return Admitted(prepared, need)
    # check the golden before spending a launch on a run we cannot judge
    try:
        reference = goldens.load_reference(prepared.manifest, scenario.suite.evals, prepared.model_builder_python)
        check_pairing(prepared.evals, reference.evals, gate)
        watch.lap("golden")
    except goldens.GoldenError as exc:
        return Verdict(scenario.id, "error", exc.headline, error={"exception": str(exc)})
    except PowerlessCheckError as exc:
        return Verdict(scenario.id, "error", str(exc), error={"exception": str(exc)})
    except PairingError as exc:
        hint = goldens.regenerate_hint(scenario.golden_key)
        return Verdict(
            scenario.id, "error", f"eval items do not pair with the golden: {exc}; {hint}", error={"exception": str(exc)}
        )
    return Admitted(prepared, need, reference)


def prepare(scenario: Scenario, settings: JSONObject, out_dir: Path, ctx: RunContext, gate: str | None = None) -> Prepared:
    suite = scenario.suite
    engine = get_engine(suite.engine)
    engine.configure(scenario.engine_options)
    versions = engine.versions()
    version = scenario.engine_version
    # tiny checkpoints: one builder for every engine environment (the harness's own), so a
    # versioned run meets its golden's bytes; the engine's only where the harness cannot build
    builder = models.builder_python(
        version.model_python if version else None, str(engine.python()), arch=getattr(scenario.model, "arch", None)
    )
    model = models.resolve(scenario.model, builder, base_dir=scenario.source.parent)
    # the harness tokenizes, once: engines and golden see the same ids
    tokenizer = load_tokenizer(model.directory)
    prepared_evals = lm.prepare_evals(suite.evals, model.directory, tokenizer, out_dir, gate)
    resolved = wl.tokenize(suite.workloads, model.directory, tokenizer)
    brief = RunBrief(
        scenario_id=scenario.id,
        engine=suite.engine,
        model_dir=str(model.directory),
        dtype=suite.dtype,
        settings=settings,
        # eval requests come last: the suite's own workloads keep their place (text before
        # images: the compile-structure check depends on the order)
        workloads=resolved + [e.workload for e in prepared_evals],
        output_dir=str(out_dir / OUTPUTS),
        faults=list(scenario.faults) + list(ctx.config.faults),
        device=ctx.config.device,
    )
    manifest = goldens.make_manifest(
        suite=scenario.golden_key,
        model=model.label,
        model_sha256=model.sha256,
        # eval items are paired by prompt hash instead
        workload_sha256=goldens.workload_checksum(resolved),
        engine=suite.engine,
        dtype=suite.dtype,
        settings=dict(suite.golden),
        versions=versions,
        model_builder=model.builder,
    )
    return Prepared(engine, brief, manifest, prepared_evals, model_builder_python=model.builder_python)
