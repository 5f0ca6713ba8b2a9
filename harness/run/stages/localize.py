"""Localize: where inside the engine a failing scenario's numbers first leave the golden's.

On demand, not in every run: a scenario of an engine whose workers record hidden states
(vLLM: harness/engines/vllm/record.py) that fails a numeric check (logits, greedy), and not
as its file or a known bug expects, is run again, bounded, with recording on:
  (a) its own layout, with its faults (the teacher-forced logprobs workload, PROMPTS prompts);
  (b) the golden's layout (clean, as a golden is made): once per run directory and suite
      (or arch), shared by every failing scenario of it;
  (c) a compiled layout: the same layout eager instead of (a). Hooks installed after vLLM
      compiled the model never run inside its graph (the compiled code calls no module), so
      a compiled row cannot be recorded; its eager twin can, and says whether the failure is
      compile's ("eager tp2 agrees with the golden: the divergence is in the compiled graph")
      or already there without compile (then where).
Every run is kept under `<run>/localize/` (under a lock: with --jobs two scenarios may ask
for the same golden recording at once). harness/run/compare/modules.py compares them.

The answer goes into the verdict's `localization` (as the reference engine's does) and
leads its reason; a localization run that cannot run or gives no recording says why there,
and never changes the verdict.
"""

from __future__ import annotations

import dataclasses
import fcntl
from collections.abc import Mapping
from pathlib import Path

from harness.contract.axes import RANK_AXES, RunAxes, kept_unchanged, spell
from harness.contract.jsonfile import JSONObject
from harness.contract.rundir import OUTPUTS, scenario_dir_name
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.scenario import Scenario
from harness.inputs.scenarios.schema import WorkloadDef
from harness.run.compare import modules
from harness.run.compare.outputs import ACCURACY, SAME_LAYOUT
from harness.run.plan.devices import Lease
from harness.run.stages.admit import admit
from harness.run.stages.context import RunContext
from harness.run.stages.ended import launch_verdict
from harness.run.stages.execute import execute

LOCALIZE_DIR = "localize"
# the prompts of the logprobs workload a recording run runs (its first): one, so that the
# first step (the one recorded) holds it whole in every layout (two requests may reach
# vLLM's scheduler in one step or in two); the hooks keep at most record.ROWS_MAX rows
PROMPTS = 1
# engines whose workers record hidden states when a workload asks (`record_modules`)
RECORDING_ENGINES = ("vllm",)
HIDDEN_DIR = "hidden"  # as the vLLM driver writes it, beside the outputs
DONE = "done"
ENDED = "ended.json"


def wanted(scenario: Scenario, verdict: Verdict) -> bool:
    """A numeric failure of an engine that records, not already located by its own run."""
    if scenario.suite.engine not in RECORDING_ENGINES or verdict.verdict != "fail":
        return False
    # DP replicas record nothing (harness/contract/replicas.py): each holds a share of the prompts
    if RunAxes.of(scenario.engine_settings).dp > 1:
        return False
    if verdict.localization and verdict.localization.get("layer") is not None:
        return False
    numeric = [c for c in verdict.checks if c.get("kind") not in (ACCURACY, SAME_LAYOUT)]
    return any(not c.get("passed") for c in numeric) and _logprobs_workload(scenario) is not None


def _logprobs_workload(scenario: Scenario) -> WorkloadDef | None:
    return next((w for w in scenario.suite.workloads if w.kind == "logprobs"), None)


def recording_scenario(scenario: Scenario, settings: JSONObject, name: str) -> Scenario:
    """The scenario at `settings` with one workload: the suite's first logprobs workload,
    its first PROMPTS prompts, recorded; no evals, no expectations."""
    workload = _logprobs_workload(scenario)
    assert workload is not None  # wanted() checked
    recorded = workload.model_copy(update={"num_prompts": min(PROMPTS, workload.num_prompts), "record_modules": True})
    recorded = recorded.model_copy(
        update={k: getattr(recorded, k)[: recorded.num_prompts] for k in ("images", "videos", "audios") if getattr(recorded, k)}
    )
    suite = scenario.suite.model_copy(update={"workloads": [recorded], "evals": []})
    return dataclasses.replace(
        scenario, id=name, suite=suite, settings=settings, expected_failure=None, expectations=(), known_bugs=()
    )


def localize(
    scenario: Scenario, verdict: Verdict, run_dir: Path, ctx: RunContext, lease: Lease | None = None
) -> JSONObject | None:
    """The localization of a failing scenario (the module docstring), or None when it is not wanted."""
    if not wanted(scenario, verdict):
        return None
    root = Path(run_dir) / LOCALIZE_DIR
    golden_settings = {**scenario.settings, **dict(scenario.suite.golden)}
    version = f"@{scenario.engine_version.label}" if scenario.engine_version else ""
    golden_name = f"{scenario.golden_key}/golden{version}"
    golden = _recorded(recording_scenario(scenario, golden_settings, golden_name), root, ctx, lease, faults=False)
    if isinstance(golden, Verdict):
        return _unlocated(f"the golden layout's recording run {golden_name} ended {golden.verdict}: {golden.reason}")
    axes = RunAxes.of(scenario.engine_settings)
    compiled = axes.compile
    # a compiled row: the same layout eager (its twin); settings the golden's but for the axes kept
    eager = kept_unchanged(scenario.settings, dataclasses.replace(axes, compile=False))
    layout = scenario.narrowed(eager) if compiled else scenario
    label = _layout_label(scenario, layout.settings)
    run = _recorded(recording_scenario(scenario, layout.settings, f"{layout.base_id}-recorded{version}"), root, ctx, lease)
    if isinstance(run, Verdict):
        return _unlocated(f"the recording run of {label} ended {run.verdict}: {run.reason}")
    logprobs = _logprobs_workload(scenario)
    assert logprobs is not None  # wanted() checked
    workload = logprobs.name
    found = modules.locate(golden / workload, run / workload, scenario.suite.dtype, label=label)
    found["workload"] = workload
    found["recorded_runs"] = {"golden": str(golden.parent.parent), "candidate": str(run.parent.parent)}
    if compiled:
        found = _compiled(found, label)
    return found


def _compiled(found: JSONObject, layout: str) -> JSONObject:
    """A compiled row's answer from its eager twin's recording."""
    found["compiled"] = True
    if found.get("agrees"):
        found["text"] = (
            f"{layout} agrees with the golden at every recorded module: the divergence is in the compiled graph "
            "(hooks do not run inside it)"
        )
    elif "module" in found:
        found["text"] = f"{layout} diverges too, so not compile's doing: {found['text']}"
    return found


def _layout_label(scenario: Scenario, settings: Mapping[str, object]) -> str:
    axes = ", ".join(f"{a}={spell(v)}" for a, v in settings.items() if a in RANK_AXES)
    return f"eager {axes}" if RunAxes.of(scenario.engine_settings).compile else f"{scenario.name} ({axes})"


def _unlocated(why: str) -> JSONObject:
    return {"layer": None, "recorded": False, "text": f"not localized: {why}"}


def _recorded(recording: Scenario, root: Path, ctx: RunContext, lease: Lease | None, faults: bool = True) -> Path | Verdict:
    """The hidden-state directory of `recording`'s run (<output dir>/hidden), run here once
    per run directory; a Verdict when it could not give one."""
    directory = root / scenario_dir_name(recording.id)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (directory / DONE).exists():
            return directory / OUTPUTS / HIDDEN_DIR
        if (directory / ENDED).exists():
            return Verdict.load(directory / ENDED)
        ended = _run(recording, directory, ctx, lease, faults)
        if ended is not None:
            ended.save(directory / ENDED)
            return ended
        (directory / DONE).write_text(f"{recording.id} recorded\n")
        return directory / OUTPUTS / HIDDEN_DIR


def _run(recording: Scenario, directory: Path, ctx: RunContext, lease: Lease | None, faults: bool) -> Verdict | None:
    admitted = admit(recording, recording.engine_settings, directory, ctx, ctx.config.gate, faults=faults, golden=False)
    if isinstance(admitted, Verdict):
        return admitted
    outcome = execute(admitted, directory, recording, ctx, lease)
    return launch_verdict(recording.id, outcome, admitted.prepared.engine)
