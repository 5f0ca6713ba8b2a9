"""The harness as a Python API, for an engine developer's own pytest tests.

One call runs a setting (or takes outputs the test already has) and holds it to a
golden or to another setting, with the harness's tolerances, its localisation of the
first diverging layer / stage / TP rank, and, if asked, its report:

    from harness.api import assert_settings_agree

    def test_tp2_agrees_with_tp1(tmp_path):
        assert_settings_agree("tiny-llama", a={"tp": 1}, b={"tp": 2}, work_dir=tmp_path)

  compare_outputs        outputs you have (EngineOutputs, an outputs directory, a golden
                         directory, a SettingRun) against a reference: the Verdict
  assert_outputs_match   the same, raising CheckFailed (an AssertionError) unless it passes
  run_setting            one setting of an engine on a model, run for real through the
                         harness's launcher: a SettingRun (its outputs, where they are)
  assert_settings_agree  setting b against setting a (the reference, run clean), in one call
  assert_matches_golden  a scenario of the scenario files against its stored golden
  save_report            verdicts into a run directory with the harness's report

The calls that run take a run's options (faults, env, timeout_s, device, and report_dir
where a report is written) as keyword arguments named as RunConfig's fields
(harness/run/request.py): the typed dicts RunOptions and ReportedRunOptions below name the
ones each call takes, and the RunConfig made from them checks each value as `harness run`
checks its flag. A value it would refuse (timeout_s=-5, device="tpu", a fault switch the
engine does not take) raises RunOptionError, a ValueError naming the option and what it
takes, before anything is written or launched.

Nothing here compares or launches by itself: runs go through the stages of harness/run/stages/
(admit, launch, the crash/hang verdicts), comparison through harness/run/compare/ (the checks, the
tolerances of docs/TOLERANCES.md, the localisation). docs/API.md has the long form.
"""

from __future__ import annotations

import inspect
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict, Union, Unpack

from harness.contract.jsonfile import JSONObject
from harness.contract.outputs import EngineOutputs
from harness.contract.rundir import claim_new_run_dir, scenario_dir_name, verdict_path
from harness.contract.settings.project import working_directory
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios, parse_suite
from harness.inputs.scenarios.scenario import Scenario, expand, select
from harness.inputs.scenarios.schema import ID_PART, ScenarioError, ToleranceOverride
from harness.run.compare.outputs import judge_outputs
from harness.run.compare.tolerances import Tolerance, tolerance_for
from harness.run.request import RunConfig, RunOptionError, unknown_faults
from harness.run.runner import run_scenario
from harness.run.stages.admit import Admitted, admit
from harness.run.stages.context import RunContext
from harness.run.stages.ended import launch_verdict
from harness.run.stages.execute import execute

# What run_setting asks the engine when the test names no workloads: teacher-forced top-k
# logprobs with per-layer hidden states (so a failure names its first diverging layer,
# stage and TP rank), and greedy decoding through the KV cache. Fields as in a scenario
# file's `workloads:` (harness/inputs/scenarios/schema.py, WorkloadDef).
DEFAULT_WORKLOADS: tuple[JSONObject, ...] = (
    {"name": "logits", "kind": "logprobs", "num_prompts": 4, "max_prompt_tokens": 48, "top_k": 20, "capture_hidden": True},
    {"name": "greedy", "kind": "greedy", "num_prompts": 2, "max_prompt_tokens": 32, "max_new_tokens": 8, "top_k": 20},
)
# a setting's timeout (its in-memory scenario's), unless the call gives timeout_s
DEFAULT_TIMEOUT_S = 600.0


class RunOptions(TypedDict, total=False):
    """How a call runs: RunConfig's options (harness/run/request.py) by their field names, as
    a caller gives them. Each is checked by the RunConfig made from them, as `harness run`
    checks its flag (RunOptionError); one left out is at RunConfig's default."""

    # engine fault switches, as --fault takes them; one string is one switch
    faults: Sequence[str] | str
    # NAME -> VALUE for every rank, as --env
    env: Mapping[str, str]
    # seconds, as --timeout (default: the scenario's; a setting's is DEFAULT_TIMEOUT_S)
    timeout_s: float
    # "cpu" or "cuda", as --device (default: $HARNESS_DEVICE, else cpu)
    device: str


class ReportedRunOptions(RunOptions, total=False):
    """The run options of a call that judges: and where its report goes."""

    # a run directory with the verdicts and the harness's report (default: none written)
    report_dir: str | os.PathLike[str]


class CheckFailed(AssertionError):
    """A run or a comparison that did not end as it should: `verdict` is the harness's
    verdict (fail: which check, its bound, what was measured, where it first diverged;
    crash: which rank and its traceback; hang: where each rank was stuck)."""

    def __init__(self, verdict: Verdict, headline: str, report: Path | None = None):
        self.verdict = verdict
        self.report = report
        text = f"{headline}\n{verdict.explain()}"
        if report is not None:
            text += f"\nreport: {report / 'summary.md'} and {report / 'report.html'}"
        super().__init__(text)


class SettingUnsupported(Exception):
    """The engine cannot run this setting here (its reason, or too few devices); a
    test usually skips on it: `except SettingUnsupported as e: pytest.skip(str(e))`."""

    def __init__(self, verdict: Verdict):
        self.verdict = verdict
        super().__init__(f"{verdict.scenario}: unsupported - {verdict.reason}")


@dataclass
class SettingRun:
    """One setting, run to the end: what the engine wrote and where."""

    # "<model>/<settings>", e.g. "tiny-llama/tp2-pp1": names its verdicts
    label: str
    settings: JSONObject
    outputs: EngineOutputs
    directory: Path  # spec.json, outputs/, logs/ (rank<N>.log)
    # as the engine got them (token ids): what a comparison goes over
    workloads: list[JSONObject]
    dtype: str
    # overrides given to run_setting ({}: the dtype's bounds)
    tolerances: dict[str, object] = field(default_factory=dict)


Outputs = Union[EngineOutputs, SettingRun, str, os.PathLike[str]]


# --- comparing outputs ---------------------------------------------------------------


def compare_outputs(
    candidate: Outputs,
    reference: Outputs,
    *,
    workloads: Sequence[str | Mapping[str, object]] | None = None,
    dtype: str | None = None,
    tolerances: Mapping[str, object] | Tolerance | None = None,
    name: str | None = None,
) -> Verdict:
    """Hold `candidate` to `reference` with the harness's checks and return the verdict,
    `pass` or `fail` (never raises on a mismatch).

    candidate, reference: EngineOutputs, a SettingRun, or a directory holding
      outputs.safetensors + outputs.json (a scenario's outputs/, a golden under golden/).
    workloads: the workload names (or {name, kind} dicts) to compare; default: every
      workload of the reference (its outputs.json, else what its tensors show).
    dtype: picks the tolerances (docs/TOLERANCES.md); default: the candidate's dtype.
    tolerances: overrides of the dtype's bounds, as a scenario file's `tolerances:`
      ({logprob_atol, kl_max, top1_min, near_tie}), or a whole judge.compare.Tolerance.
    name: the verdict's name; default: the candidate's label or scenario id.
    """
    cand, ref = _load(candidate), _load(reference)
    chosen = _workloads(reference, ref, workloads)
    tol = _tolerance(
        dtype or _dtype(candidate, cand) or _dtype(reference, ref) or "float32",
        tolerances,
        candidate if isinstance(candidate, SettingRun) else None,
    )
    verdict = judge_outputs(name or _label(candidate, cand), ref, cand, chosen, tol)
    if not verdict.checks:
        raise ValueError(f"nothing to compare: no logprobs or greedy workload among {[w['name'] for w in chosen]}")
    verdict.settings = dict(candidate.settings if isinstance(candidate, SettingRun) else cand.meta.get("settings", {}))
    verdict.versions = {k: v for k, v in cand.meta.items() if k in ("engine", "torch", "vllm", "transformers")}
    verdict.golden = {"reference": _label(reference, ref)}
    if not isinstance(reference, (EngineOutputs, SettingRun)):
        verdict.golden["dir"] = str(reference)
    return verdict


def assert_outputs_match(
    candidate: Outputs,
    reference: Outputs,
    *,
    workloads: Sequence[str | Mapping[str, object]] | None = None,
    dtype: str | None = None,
    tolerances: Mapping[str, object] | Tolerance | None = None,
    name: str | None = None,
    report_dir: str | os.PathLike[str] | None = None,
) -> Verdict:
    """compare_outputs, raising CheckFailed unless the verdict is `pass`. With
    `report_dir`, the harness's report of the verdict is written there either way."""
    verdict = compare_outputs(candidate, reference, workloads=workloads, dtype=dtype, tolerances=tolerances, name=name)
    report = save_report([verdict], report_dir) if report_dir is not None else None
    if verdict.verdict != "pass":
        raise CheckFailed(verdict, f"{verdict.scenario} does not match {verdict.golden['reference']}:", report)
    return verdict


# --- running settings ----------------------------------------------------------------


def run_setting(
    model: str | Mapping[str, object] | os.PathLike[str],
    settings: Mapping[str, object] | None = None,
    *,
    engine: str = "reference",
    workloads: Sequence[Mapping[str, object]] | None = None,
    dtype: str = "float32",
    tolerances: Mapping[str, object] | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    engine_options: Mapping[str, str] | None = None,
    **options: Unpack[RunOptions],
) -> SettingRun:
    """Run one setting of `engine` on `model` for real, through the harness's launcher
    (one process per rank for the reference engine; the engine's own launcher else),
    and return what it wrote.

    model: a zoo name ("tiny-llama"), a checkpoint directory (a Path), or a scenario
      file's model entry ({"path": DIR}, {"hub": ORG/NAME, "revision": REV}, {"arch": CLASS}).
    settings: the engine's axes, e.g. {"tp": 2, "pp": 2, "sp": True, "compile": True};
      axes left out keep the engine's defaults.
    workloads: a scenario file's `workloads:` entries; default DEFAULT_WORKLOADS.
    work_dir: where the run's directory goes (default: a new temporary directory).
    options: the run options (RunOptions): faults, the engine's fault switches
      ("rank-raise@1", "tp-allreduce-perturb@1e-3"; the reference engine lists its own in
      harness/engines/reference/faults.py; one string is one switch); env; timeout_s
      (default DEFAULT_TIMEOUT_S); device ("cpu" or "cuda"; default: $HARNESS_DEVICE, else cpu).

    Raises CheckFailed when the run crashed or hung (the verdict names the rank and its
    traceback, or where each rank was stuck), SettingUnsupported when the engine cannot
    run the setting here, ValueError for a bad setting, model entry or fault switch
    (RunOptionError, a ValueError, for a run option harness run refuses: timeout_s, device,
    faults).
    """
    setting = _Setting(engine, workloads, dtype, tolerances, engine_options, work_dir)
    return _run(_plan(model, settings or {}, setting, _config(run_setting, options, RunOptions.__optional_keys__)))


@dataclass(frozen=True)
class _Setting:
    """What a setting is run with beside its run options: run_setting's and
    assert_settings_agree's keyword arguments of what to run, at their defaults there."""

    engine: str
    workloads: Sequence[Mapping[str, object]] | None
    dtype: str
    tolerances: Mapping[str, object] | None
    engine_options: Mapping[str, str] | None
    work_dir: str | os.PathLike[str] | None


@dataclass
class _Planned:
    """A setting checked and prepared, its directory reserved: ready to launch."""

    scenario: Scenario
    ctx: RunContext
    out_dir: Path
    admitted: Admitted
    dtype: str
    tolerances: dict[str, object]


def _plan(
    model: str | Mapping[str, object] | os.PathLike[str], settings: Mapping[str, object], setting: _Setting, config: RunConfig
) -> _Planned:
    """Everything that can refuse a setting, before any rank starts: the settings and model
    (as a scenario file's), the engine's reason, the devices, the fault switches (the run
    options were checked when `config` was made)."""
    ctx = _context(config)
    scenario = _scenario(model, settings, setting)
    work_dir = setting.work_dir
    out_dir = _fresh(
        Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="harness-api-")), scenario_dir_name(scenario.id)
    )
    admitted = admit(scenario, scenario.engine_settings, out_dir, ctx, golden=False)
    if isinstance(admitted, Verdict):
        admitted.settings = scenario.engine_settings
        if admitted.verdict == "unsupported":
            raise SettingUnsupported(admitted)
        # the engine is not installed, the model or a fault switch is bad
        raise ValueError(admitted.reason)
    return _Planned(scenario, ctx, out_dir, admitted, setting.dtype, dict(setting.tolerances or {}))


def _run(planned: _Planned) -> SettingRun:
    """Launch a planned setting through the runner; CheckFailed unless every rank finished."""
    scenario, prepared = planned.scenario, planned.admitted.prepared
    outcome = execute(planned.admitted, planned.out_dir, scenario, planned.ctx)
    ended = launch_verdict(scenario.id, outcome, prepared.engine)
    if ended is not None:
        ended.settings = scenario.engine_settings
        raise CheckFailed(ended, f"{scenario.id} did not run to its end (run directory {planned.out_dir}):")
    return SettingRun(
        scenario.id,
        scenario.engine_settings,
        EngineOutputs.load(prepared.brief.output_dir),
        planned.out_dir,
        prepared.brief.workloads,
        planned.dtype,
        planned.tolerances,
    )


def assert_settings_agree(
    model: str | Mapping[str, object] | os.PathLike[str],
    a: Mapping[str, object],
    b: Mapping[str, object],
    *,
    engine: str = "reference",
    workloads: Sequence[Mapping[str, object]] | None = None,
    dtype: str = "float32",
    tolerances: Mapping[str, object] | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    engine_options: Mapping[str, str] | None = None,
    **options: Unpack[ReportedRunOptions],
) -> Verdict:
    """Run setting `a` (the reference: run clean, as a golden is) and setting `b` (with
    `faults`, if any) on the same model and workloads, and hold b to a with the
    harness's checks. Returns the passing verdict; raises CheckFailed when b fails or
    either run crashed or hung, SettingUnsupported when either cannot run here.
    The other arguments are run_setting's; `report_dir` writes the harness's report."""
    for label, settings in (("a", a), ("b", b)):
        # a programming error of the caller, said as such
        if not isinstance(settings, Mapping):
            raise ValueError(
                f"assert_settings_agree: {label} must be a mapping of settings like {{'tp': 2}}, got {type(settings).__name__}"
            )
    setting = _Setting(engine, workloads, dtype, tolerances, engine_options, work_dir)
    config = _config(assert_settings_agree, options, ReportedRunOptions.__optional_keys__)
    # a runs clean, as a golden is made; both checked before either runs
    planned = _plan(model, a, setting, replace(config, faults=())), _plan(model, b, setting, config)
    reference, candidate = _run(planned[0]), _run(planned[1])
    name = candidate.label if candidate.label != reference.label else f"{candidate.label}-candidate"
    verdict = compare_outputs(candidate, reference, name=name)
    faults_of_b = list(planned[1].ctx.config.faults)
    verdict.reproduce = _call("assert_settings_agree", model, a=dict(a), b=dict(b), engine=engine, faults=faults_of_b)
    report = save_report([verdict], config.report_dir) if "report_dir" in _given(options) else None
    if verdict.verdict != "pass":
        raise CheckFailed(verdict, f"{name} does not agree with {reference.label} (the reference):", report)
    return verdict


def assert_matches_golden(
    scenario_id: str,
    *,
    scenarios: str | os.PathLike[str] | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    **options: Unpack[ReportedRunOptions],
) -> Verdict:
    """Run one scenario of the scenario files ("llama-tiny/tp2-pp2"; `scenarios`: a file
    or directory, default scenarios/) against its stored golden, exactly as `harness run`
    does (evals, expected failures and all). Returns the verdict when it is as expected
    (pass, expected-failure, or unsupported: check `verdict.verdict`); raises CheckFailed
    otherwise. With `report_dir` the run directory and its report go there."""
    try:
        chosen = select(load_scenarios([Path(scenarios)] if scenarios is not None else None), [scenario_id])
    except ScenarioError as exc:
        raise ValueError(str(exc)) from None
    if len(chosen) != 1:
        raise ValueError(f"'{scenario_id}' names {len(chosen)} scenarios ({', '.join(s.id for s in chosen[:6])}...): give one id")
    scenario = chosen[0]
    ctx = _context(_config(assert_matches_golden, options, ReportedRunOptions.__optional_keys__))
    # a fault the scenario's engine does not take, refused as `harness run --fault` refuses it
    problem = unknown_faults(ctx.config.faults, [scenario.suite.engine], "faults")
    if problem:
        raise RunOptionError(problem)
    meta = {"scenarios": [scenario.id], "via": "api", "gate": None, "faults": list(ctx.config.faults), "started": time.time()}
    reported = "report_dir" in _given(options)
    if reported:
        run_dir = claim_new_run_dir(ctx.config.report_dir, meta, "-api")
    else:
        run_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="harness-api-"))
    verdict = run_scenario(scenario, run_dir, ctx)
    report = None
    if reported:
        from harness.run.report import write_report

        write_report(run_dir, {"finished": time.time()})
        report = run_dir
    if not verdict.as_expected:
        raise CheckFailed(verdict, f"{scenario.id} did not end as expected against its golden:", report)
    return verdict


def save_report(verdicts: Sequence[Verdict], report_dir: str | os.PathLike[str]) -> Path:
    """A new run directory under `report_dir` holding `verdicts`, with the harness's report
    (summary.md, report.html, junit.xml, pr-comment.md; no history store). Returns it."""
    from harness.run.report import write_report

    now = time.time()
    meta = {"scenarios": [v.scenario for v in verdicts], "via": "api", "gate": None, "started": now}
    run_dir = claim_new_run_dir(Path(report_dir), meta, "-api")
    for v in verdicts:
        v.save(verdict_path(run_dir, v.scenario))
    write_report(run_dir, {"finished": now})
    return run_dir


# --- the parts -----------------------------------------------------------------------


def _call(function: str, *args: object, **kwargs: object) -> str:
    """The API call that reproduces a verdict (its `reproduce`), defaults left out."""
    defaults: dict[str, object] = {"engine": "reference", "faults": []}
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items() if defaults.get(k, object()) != v]
    return f"harness.api.{function}({', '.join(shown)})"


def _load(outputs: Outputs) -> EngineOutputs:
    if isinstance(outputs, EngineOutputs):
        return outputs
    if isinstance(outputs, SettingRun):
        return outputs.outputs
    return EngineOutputs.load(Path(outputs))


def _label(given: Outputs, outputs: EngineOutputs) -> str:
    if isinstance(given, SettingRun):
        return given.label
    if not isinstance(given, EngineOutputs):
        return str(given)
    return outputs.meta.get("scenario_id") or "outputs"


def _dtype(given: Outputs, outputs: EngineOutputs) -> str | None:
    return given.dtype if isinstance(given, SettingRun) else outputs.meta.get("dtype")


# A workload's kind from the fields an engine wrote (harness/contract/outputs.py), for
# outputs whose outputs.json does not say it.
def _kind_of(fields: set[str]) -> str:
    if "offsets" in fields:
        return "logprobs"
    if "lengths" in fields:
        return "generate"
    return "greedy" if "tokens" in fields else "unknown"


def _workloads(given: Outputs, outputs: EngineOutputs, chosen: Sequence[str | Mapping[str, object]] | None) -> list[JSONObject]:
    if isinstance(given, SettingRun):
        known = {w["name"]: dict(w) for w in given.workloads}
    elif outputs.meta.get("workloads"):
        known = {name: {"name": name, **info} for name, info in outputs.meta["workloads"].items()}
    else:
        names = sorted({key.split(".", 1)[0] for key in outputs.tensors})
        known = {n: {"name": n, "kind": _kind_of(set(outputs.workload(n)))} for n in names}
    if chosen is None:
        return list(known.values())
    picked = []
    for w in chosen:
        if isinstance(w, Mapping):
            picked.append(dict(w))
        elif w in known:
            picked.append(known[w])
        else:
            raise ValueError(f"the reference has no workload '{w}' (it has: {', '.join(known) or 'none'})")
    return picked


def _tolerance(dtype: str, tolerances: Mapping[str, object] | Tolerance | None, run: SettingRun | None) -> Tolerance:
    if isinstance(tolerances, Tolerance):
        return tolerances
    overrides = dict(run.tolerances) if run is not None and tolerances is None else dict(tolerances or {})
    try:
        checked = ToleranceOverride.model_validate(overrides)
    except ValueError as exc:
        raise ValueError(f"bad tolerances {overrides}: {exc}") from None
    try:
        return tolerance_for(dtype, checked.model_dump())
    except KeyError:
        raise ValueError(f"no tolerances for dtype '{dtype}' (known: float32, bfloat16, float16)") from None


def _model_entry(model: str | Mapping[str, object] | os.PathLike[str]) -> str | JSONObject:
    if isinstance(model, os.PathLike):
        return {"path": str(Path(model).resolve())}
    return dict(model) if isinstance(model, Mapping) else model


def _suite_name(model: str | Mapping[str, object] | os.PathLike[str]) -> str:
    """The first part of the runs' labels: the zoo name, the checkpoint's or arch's name."""
    if isinstance(model, os.PathLike):
        text = Path(model).name
    elif isinstance(model, Mapping):
        text = str(model.get("arch") or model.get("hub") or Path(str(model.get("path", "model"))).name)
    else:
        text = model
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip(".-")
    return name if ID_PART.fullmatch(name) else "model"


def _scenario(
    model: str | Mapping[str, object] | os.PathLike[str], settings: Mapping[str, object], setting: _Setting
) -> Scenario:
    """The one scenario of an in-memory suite: the scenario file a user would write for
    this setting, checked by the same rules (axes the engine has, values, model entry)."""
    workloads = setting.workloads if setting.workloads is not None else DEFAULT_WORKLOADS
    raw: JSONObject = {
        "suite": _suite_name(model),
        "engine": setting.engine,
        "model": _model_entry(model),
        "dtype": setting.dtype,
        "timeout_s": DEFAULT_TIMEOUT_S,  # the call's timeout_s, if any, overrides it (RunConfig)
        "workloads": [dict(w) for w in workloads],
        "golden": dict(settings),
        "matrix": {axis: [value] for axis, value in settings.items()} or {"tp": [1]},
        "engine_options": dict(setting.engine_options or {}),
        "tolerances": dict(setting.tolerances or {}),
    }
    if not settings:
        raw["golden"] = {"tp": 1}
    source = working_directory() / "harness-api"  # what its errors name
    try:
        suite = parse_suite(raw, source)
    except ValueError as exc:
        raise ValueError(f"cannot run {dict(settings)} of {setting.engine} on {model!r}: {exc}") from None
    return expand(suite, source)[0]


def _config(call: Callable[..., object], options: Mapping[str, Any], takes: frozenset[str]) -> RunConfig:
    """The run's configuration from a call's run options (`takes`: their names), each checked
    as `harness run` checks its flag (RunOptionError, a ValueError, names the option); None is
    not given. Another keyword is refused as Python refuses one a signature lacks, naming what
    the call takes: its own arguments and its run options (a typo of `engine` lands here too)."""
    unknown = sorted(set(options) - takes)
    if unknown:
        named = [p.name for p in inspect.signature(call).parameters.values() if p.kind is not p.VAR_KEYWORD]
        raise TypeError(
            f"{call.__name__}() got an unexpected keyword argument {unknown[0]!r} "
            f"(its arguments: {', '.join(named)}; its run options: {', '.join(sorted(takes))})"
        )
    return RunConfig(**_given(options))


def _given(options: Mapping[str, Any]) -> dict[str, Any]:
    """A run option given as None is left out: at RunConfig's default (the API's signatures
    took `device=None`, `report_dir=None` for "not given")."""
    return {name: value for name, value in options.items() if value is not None}


def _context(config: RunConfig) -> RunContext:
    """A call's run: its configuration, with this machine's device slots."""
    from harness.run.plan.devices import DevicePool, configured_count

    return RunContext(config, DevicePool(configured_count(config.device), config.device))


def _fresh(parent: Path, name: str) -> Path:
    """parent/name, or parent/name-2, -3 ... when a run of the same label is already there;
    made now, so the next run of the label gets the next name."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = parent / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"no free directory for {name} in {parent}")
