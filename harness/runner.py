"""One scenario, start to verdict: prepare -> launch -> compare -> verdict.

This is the flow of DESIGN.md in one place; the CLI, pytest and the golden
command all come through here, so the three ways in cannot drift apart.
"""

from __future__ import annotations

import shutil
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from harness import golden as goldens
from harness import models
from harness import workloads as wl
from harness.contract.outputs import EngineOutputs
from harness.contract.phases import PHASES_DIR
from harness.contract.runspec import RunSpec
from harness.contract.storage import describe as describe_storage
from harness.contract.storage import storage_fault
from harness.engines import Engine, EngineUnavailable, get_engine
from harness.evals import check as evals
from harness.judge.applied import evidence_table
from harness.judge.compare import tolerance_for
from harness.judge.expectations import judge as expectations_judge
from harness.judge.outputs import localize, numeric_checks, verdict_of_checks
from harness.launch import Cluster, LaunchOutcome, RankFailure, run_ranks
from harness.plan.devices import DevicePool, Lease
from harness.rundir import LOGS, OUTPUTS, SPEC, VERDICT, ResultsNotWritten, scenario_dir
from harness.scenario import Scenario
from harness.timings import Stopwatch
from harness.verdict import Verdict


@dataclass
class RunOptions:
    """What the command line may override for every scenario of a run."""

    timeout_s: float | None = None
    faults: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"
    # The device slots of this machine; None: no leasing (one run at a time, golden runs).
    devices: DevicePool | None = None
    # Machines for scenarios that need more devices than `devices` has (--nodes).
    cluster: Cluster | None = None
    # Set by a session to stop every running launch (Ctrl-C with --jobs).
    cancel: threading.Event | None = None
    # The gate being run: evals score their `pr_items` slice under `pr` (scenario.EvalDef).
    gate: str | None = None


@dataclass
class Prepared:
    engine: Engine
    spec: RunSpec
    manifest: dict  # what a golden for this suite must have been made from
    evals: list = field(default_factory=list)  # lm.PreparedEval per eval of the suite
    launched_at: float | None = None  # wall clock when the ranks were started (phase marks share it)


def reproduce_command(scenario: Scenario, opts: RunOptions) -> str:
    extra = "".join(f" --fault {f}" for f in opts.faults)
    if scenario.engine_version:  # one engine version of several (harness/envs.py)
        return f"harness run {scenario.base_id} --engine-env {scenario.engine_version.spec}{extra}"
    return f"make {scenario.id}" if not extra else f"harness run {scenario.id}{extra}"


def prepare(scenario: Scenario, settings: dict, out_dir: Path, opts: RunOptions, gate: str | None = None) -> Prepared:
    suite = scenario.suite
    engine = get_engine(suite.engine)
    engine.configure(scenario.engine_options)
    version = scenario.engine_version
    builder = (version.model_python if version else None) or str(engine.python())
    model = models.resolve(scenario.model, builder, base_dir=scenario.source.parent)
    model_dir = model.directory
    resolved = wl.resolve(suite.workloads, model_dir)
    # Eval requests come last: the suite's own workloads keep their place (text before
    # images: the compile-structure check depends on the order).
    prepared_evals = evals.prepare_evals(suite.evals, model_dir, out_dir, gate)
    spec = RunSpec(
        scenario_id=scenario.id,
        engine=suite.engine,
        model_dir=str(model_dir),
        dtype=suite.dtype,
        settings=settings,
        workloads=resolved + [e.workload for e in prepared_evals],
        output_dir=str(out_dir / OUTPUTS),
        faults=list(scenario.faults) + list(opts.faults),
        device=opts.device,
    )
    manifest = goldens.make_manifest(
        suite=scenario.golden_key,
        model=model.label,
        model_sha256=model.sha256,
        workload_sha256=wl.checksum(resolved),  # eval items are paired by prompt hash instead
        engine=suite.engine,
        dtype=suite.dtype,
        settings=dict(suite.golden),
        versions=engine.versions(),
    )
    return Prepared(engine, spec, manifest, prepared_evals)


@dataclass
class Admitted:
    """A setting of a scenario that nothing refuses: prepared, ready to launch."""

    prepared: Prepared
    need: int  # devices one run holds: asked once, of the configured engine


def admit(scenario: Scenario, settings: dict, out_dir: Path, opts: RunOptions, gate: str | None = None,
          faults: bool = True) -> Admitted | Verdict:
    """The first stage of every run of a setting (the CLI's and pytest's scenarios, the
    API's settings, goldens, the conformance kit): everything that can refuse it before a
    rank starts, in one place. A Verdict when refused: `error` (engine not installed, model
    not resolvable, a bad fault switch: the input's fault) or `unsupported` (the engine's
    reason, too few devices). `faults=False`: the clean engine (a golden is made so)."""
    try:
        prepared = prepare(scenario, settings, out_dir, opts, gate)
    except (EngineUnavailable, models.ModelError) as exc:  # nothing was launched
        return Verdict(scenario.id, "error", str(exc), error={"exception": str(exc)})
    if not faults:
        prepared.spec.faults = []
    need = prepared.engine.devices_needed(settings)
    reason = prepared.engine.unsupported_reason(settings, prepared.spec.model_dir) or devices_problem(need, opts)
    if reason:
        return Verdict(scenario.id, "unsupported", reason)
    problem = prepared.engine.fault_problem(prepared.spec.faults, settings)
    if problem:  # before launch: a bad fault is the input's error, not a crash of the engine
        return Verdict(scenario.id, "error", f"bad fault switch: {problem}", error={"exception": problem})
    return Admitted(prepared, need)


def launch(prepared: Prepared, out_dir: Path, scenario: Scenario, opts: RunOptions,
           device_env: dict[str, str] | None = None, cluster: Cluster | None = None) -> LaunchOutcome:
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = out_dir / SPEC
    prepared.spec.save(spec_path)
    plan = prepared.engine.launch_plan(prepared.spec, str(spec_path))
    timeout = opts.timeout_s or scenario.suite.timeout_s
    env = {**scenario.extra_env, **opts.env, **(device_env or {})}  # the lease wins: no shared devices
    shutil.rmtree(Path(prepared.spec.output_dir) / PHASES_DIR, ignore_errors=True)  # marks of this launch only
    prepared.launched_at = time.time()
    return run_ranks(plan, out_dir / LOGS, timeout, env=env, cluster=cluster, cancel=opts.cancel)


def devices_problem(need: int, opts: RunOptions) -> str | None:
    """Why a scenario needing `need` devices cannot run here (an `unsupported` reason)."""
    if opts.devices is None or need <= opts.devices.count:
        return None
    if opts.cluster is not None and need <= opts.cluster.ranks:
        return None
    where = (f"; the nodes of the nodes file hold {opts.cluster.ranks}" if opts.cluster
             else "; a bigger scenario needs more machines (--nodes FILE)")
    return f"needs {need} devices, this machine has {opts.devices.count} (--devices / HARNESS_DEVICES){where}"


@contextmanager
def holding_devices(scenario: Scenario, need: int, opts: RunOptions, lease: Lease | None):
    """(rank env, cluster or None) while the scenario holds its devices. A lease given by
    the caller (a session that packs scenarios) is used as is and released by the caller."""
    if opts.devices is None:
        yield {}, None
    elif need > opts.devices.count:  # multi-node: the whole node set, waited for
        from harness.plan.nodes import cluster_pool

        pool = cluster_pool(opts.cluster)
        with pool.lease(pool.count, scenario.id):
            yield {}, opts.cluster
    elif lease is not None:
        yield lease.env(), None
    else:
        with opts.devices.lease(need, scenario.id) as own:
            yield own.env(), None


def run_scenario(scenario: Scenario, run_dir: Path, opts: RunOptions | None = None, lease: Lease | None = None) -> Verdict:
    """Run one scenario and write its verdict.json; never raises except on Ctrl-C and
    ResultsNotWritten (the verdict itself could not be stored)."""
    opts = opts or RunOptions()
    out_dir = scenario_dir(run_dir, scenario.id)
    start = time.monotonic()
    watch = Stopwatch()
    try:
        verdict = _run(scenario, out_dir, opts, lease, watch)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a harness fault must become an `error` verdict
        fault = storage_fault(exc)
        verdict = storage_verdict(scenario.id, fault, "the harness") if fault else Verdict(
            scenario.id,
            "error",
            f"harness error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            error={"exception": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
        )
    verdict.settings = scenario.settings
    verdict.duration_s = round(time.monotonic() - start, 2)
    verdict.expected_failure = scenario.expected_failure
    verdict.reproduce = reproduce_command(scenario, opts)
    verdict = _apply_expectation(verdict, scenario.expectations)
    watch.lap("verdict")
    verdict.timings = watch.timings()
    try:
        verdict.save(out_dir / VERDICT)
    except OSError as exc:  # the run cannot be recorded: the caller stops it (exit 3), not a verdict
        raise ResultsNotWritten(f"cannot write the verdict of {scenario.id} in {out_dir}: {exc.strerror or exc}; "
                                "free space or make the report directory writable, then run again") from None
    return verdict


def storage_verdict(name: str, fault: dict, who: str, **extra) -> Verdict:
    """A full, read-only or over-quota disk under the harness's own files: `error` (the
    machine's fault, exit code 3), naming the path, never an engine `crash`."""
    reason = f"machine fault: {who} {describe_storage(fault)}; free space or make it writable, then run again"
    return Verdict(name, "error", reason, error={"exception": describe_storage(fault), "storage": fault}, **extra)


def _run(scenario: Scenario, out_dir: Path, opts: RunOptions, lease: Lease | None, watch: Stopwatch) -> Verdict:
    admitted = admit(scenario, scenario.engine_settings, out_dir, opts, opts.gate)
    watch.lap("prepare")
    if isinstance(admitted, Verdict):
        return admitted
    prepared, need = admitted.prepared, admitted.need
    try:  # check the golden before spending a launch on a run we cannot judge
        golden, manifest = goldens.load_golden(prepared.manifest)
        golden_evals = goldens.load_evals(scenario.golden_key, scenario.suite.evals)
        evals.check_pairing(prepared.evals, golden_evals)
        watch.lap("golden")
    except goldens.GoldenError as exc:
        headline = getattr(exc, "headline", None) or str(exc).splitlines()[0]
        return Verdict(scenario.id, "error", headline, error={"exception": str(exc)})
    except evals.PowerlessCheckError as exc:
        return Verdict(scenario.id, "error", str(exc), error={"exception": str(exc)})
    except evals.PairingError as exc:
        hint = goldens.regenerate_hint(scenario.golden_key)
        return Verdict(scenario.id, "error", f"eval items do not pair with the golden: {exc}; {hint}", error={"exception": str(exc)})
    with holding_devices(scenario, need, opts, lease) as (device_env, cluster):
        watch.lap("wait")
        try:
            outcome = launch(prepared, out_dir, scenario, opts, device_env, cluster)
        finally:  # an interrupted launch is booked too
            watch.launch(prepared.spec.output_dir, prepared.launched_at or time.time(), time.time())
    verdict = _from_outcome(scenario, outcome, golden, golden_evals, prepared, watch)
    verdict.golden = {"dir": str(goldens.golden_dir(scenario.golden_key)), "version_drift": goldens.version_drift(manifest, prepared.manifest["versions"])}
    verdict.versions = prepared.manifest["versions"]
    return verdict


def _from_outcome(scenario: Scenario, outcome: LaunchOutcome, golden: EngineOutputs, golden_evals: dict,
                  prepared: Prepared, watch: Stopwatch) -> Verdict:
    ended = launch_verdict(scenario.id, outcome, prepared)
    if ended is not None:
        return ended
    outputs = EngineOutputs.load(prepared.spec.output_dir)
    watch.engine_start = (outputs.meta.get("timings") or {}).get("engine_start") or {}
    tol = tolerance_for(scenario.suite.dtype, scenario.suite.tolerances.model_dump())
    checks = numeric_checks(golden, outputs, prepared.spec.workloads, tol)
    watch.lap("compare")
    if prepared.evals:
        results = evals.score_evals(prepared.evals, outputs, Path(prepared.spec.model_dir))
        checks += evals.accuracy_checks(scenario.suite.evals, golden_evals, results)
        watch.lap("evals")
    localization = localize(golden, outputs, prepared.spec.workloads, checks)
    watch.lap("compare")  # localising a divergence is comparison work too
    applied = evidence_table(scenario.engine_settings, dict(scenario.suite.golden), outputs.meta.get("applied"))
    return verdict_of_checks(scenario.id, checks, tol, localization, {str(r): p for r, p in outcome.logs.items()}, applied)


def launch_verdict(name: str, outcome: LaunchOutcome, prepared: Prepared) -> Verdict | None:
    """The verdict of a launch that did not end with every rank done (crash: the rank
    that died first, as the engine tells it; hang: where each rank was stuck), or None."""
    logs = {str(r): p for r, p in outcome.logs.items()}
    if outcome.status == "crash" and outcome.failure.storage:  # the disk is full, not the engine wrong
        return storage_verdict(name, outcome.failure.storage, f"rank {outcome.failure.rank}", crash=asdict(outcome.failure),
                               logs=logs)
    if outcome.status == "crash" and outcome.failure.harness_fault:  # the harness's helper died, not the engine
        why = outcome.failure.harness_fault
        return Verdict(name, "error", f"harness error: {why}", error={"exception": why}, crash=asdict(outcome.failure), logs=logs)
    if outcome.status == "crash":
        f = _engine_view(prepared.engine, outcome.failure)
        return Verdict(name, "crash", _crash_reason(f), crash=asdict(f), logs=logs)
    if outcome.status == "hang":
        where = "; ".join(f"rank {r} at {loc}" for r, loc in sorted(outcome.stuck_at.items()))
        hang = {"stuck_at": outcome.stuck_at, "stacks": outcome.stacks, "stall": outcome.stall}
        raised = _raised_before_hang(outcome, prepared)
        if raised is not None:  # the root cause is that exception; the hang only followed it
            return Verdict(name, "crash", f"{_crash_reason(raised)}; the engine then made no progress "
                           f"({outcome.hang_reason()})", crash=asdict(raised), hang=hang, logs=logs)
        return Verdict(name, "hang", f"{outcome.hang_reason()}: {where or 'no stack dump'}", hang=hang, logs=logs)
    if outcome.status != "ok":
        return Verdict(name, "error", f"launcher ended with status '{outcome.status}'", logs=logs)
    return None


def _crash_reason(f: RankFailure) -> str:
    what = f.exception or (f"killed by {f.signal}" if f.signal else f"exit code {f.exitcode}")
    if f.command is not None:  # no log to see: what it ran is all there is to go on
        return f"rank {f.rank} died before writing anything to its log ({what}); its command: {f.command}"
    where = f" at {_short_frame(f.frame)}" if f.frame else ""
    return f"rank {f.rank} crashed: {what}{where}"


def _raised_before_hang(outcome: LaunchOutcome, prepared: Prepared):
    """An engine whose own worker raised but did not exit (vLLM on CPU: a non-last PP
    stage raises, its peer waits for its tensors forever) hangs instead of crashing. The
    engine's root_cause finds that worker's exception in the launched process's log;
    None when it finds none (a real hang)."""
    if 0 not in outcome.logs:
        return None
    log = str(outcome.logs[0])
    cause = prepared.engine.root_cause(_read(log))
    return replace(cause, log=log) if cause is not None and cause.exception else None


def _engine_view(engine, failure: RankFailure) -> RankFailure:
    """The crash as the engine tells it (root_cause: the process of its own that really
    died), keeping the launcher's exit code, signal and log, and what the launched
    process saw as context; the launcher's view when the engine names nothing."""
    cause = engine.root_cause(_read(failure.log))
    if cause is None:
        return failure
    context = f"\n\n(the process the harness launched, launcher rank {failure.rank}, saw: {failure.exception or 'no exception record'})"
    return replace(cause, exitcode=failure.exitcode, signal=failure.signal, log=failure.log,
                   traceback=(cause.traceback or "") + context)


def _short_frame(frame: str) -> str:
    """`engines/reference/model.py:323 in forward`: a frame's last three path parts."""
    path, sep, rest = frame.rpartition(":")
    return "/".join(Path(path).parts[-3:]) + sep + rest if sep else frame


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _apply_expectation(verdict: Verdict, expectations: tuple = ()) -> Verdict:
    """expected-failure only for the failure the scenario file describes, on the engine
    versions it names (harness/judge/expectations.py)."""
    return expectations_judge(verdict, expectations)


class GoldenUnsupported(RuntimeError):
    """The engine cannot run this golden's model or setting (an arch it does not serve)."""


def make_golden(scenario_for_golden: Scenario, work_dir: Path, opts: RunOptions | None = None) -> Path:
    """Run the suite's golden setting and store it. Raises on any failure."""
    opts = opts or RunOptions()
    suite = scenario_for_golden.suite
    out_dir = work_dir / "golden" / scenario_for_golden.golden_key
    # gate None: every eval scores its full item count, so any gate's slice pairs with it;
    # a golden is made by the clean engine, whatever the runs inject
    admitted = admit(scenario_for_golden, dict(suite.golden), out_dir, opts, gate=None, faults=False)
    if isinstance(admitted, Verdict) and admitted.verdict == "unsupported":
        # its scenarios end `unsupported` with this reason; there is nothing to compare with
        raise GoldenUnsupported(f"engine '{suite.engine}' cannot run the golden setting: {admitted.reason}")
    if isinstance(admitted, Verdict):
        raise RuntimeError(f"golden of '{scenario_for_golden.golden_key}': {admitted.reason}")
    prepared = admitted.prepared
    outcome = launch(prepared, out_dir, scenario_for_golden, opts)
    if outcome.status != "ok":
        detail = outcome.status
        if outcome.failure:  # the engine names the worker that really died (vLLM's own processes)
            f = _engine_view(prepared.engine, outcome.failure)
            detail = f.harness_fault or _crash_reason(f)
        raise RuntimeError(f"golden run of '{scenario_for_golden.golden_key}' ended as {outcome.status}: {detail}; logs in {out_dir / 'logs'}")
    results = None
    if prepared.evals:
        results = evals.score_evals(prepared.evals, EngineOutputs.load(prepared.spec.output_dir), Path(prepared.spec.model_dir))
    eval_workloads = [e.workload["name"] for e in prepared.evals]
    return goldens.store_golden(Path(prepared.spec.output_dir), prepared.manifest, evals=results, drop=eval_workloads)
