"""The conformance kit: does an engine plugin keep the engine contract (docs/ENGINES.md)?

    python -m harness conformance ENGINE [--check NAME ...] [--work-dir DIR]

or, from an engine author's pytest:

    from harness.run.conformance import assert_conforms

    @pytest.mark.timeout(900)
    def test_my_engine_keeps_the_harness_contract(tmp_path):
        assert_conforms("tp-plan", tmp_path)

It runs the engine for real, as `harness run` would: a small suite on a tiny zoo model
(tiny-llama, float32, a few prompts), every run through the harness's own runner and
launcher (harness/run/runner.py, harness/engines/launch), on CPU with gloo unless told otherwise.
Each check ends in one line, PASS, FAIL or SKIP with the reason:

  load               the registry loads it (built in, or through its `harness.engines`
                     entry point), its `name` is the registered one, it declares the tp
                     axis, and it is ready here (unavailable_reason() is None)
  versions           versions() names the engine and its versions (strings)
  unsupported        settings it cannot run by its own declaration (an axis it does not
                     declare, a value outside an axis's declared values, tp=0) give a
                     reason string and end `unsupported`, never a crash
  outputs            its golden (tp1: `harness golden`) and a tp1 scenario run: the
                     harness reads its EngineOutputs and the run passes against it
                     (a note when outputs.json does not name the engine)
  matches-reference  its tp1 outputs agree with the reference engine's within the
                     float32 bounds every scenario is held to
  parallel-<s>       each parallel setting (default tp2) passes against its tp1 golden,
                     or is skipped with the engine's unsupported reason
  crash              one rank fails: the verdict is `crash`, naming that rank, with its
                     exception and traceback from the rank's error record
  hang               one rank hangs: the verdict is `hang`, with a stack dump of every
                     rank and where the hung one was stuck

The crash and hang checks use the engine's own `rank-raise@N` / `rank-hang@N` fault
switches when it has them (they fire mid-run, in the engine's forward), else
$HARNESS_RANK_FAULT (harness/engines/launch/rankside.py), which `run_rank` honours in any
engine's ranks as they start. An engine whose processes do not run under `run_rank`
cannot have its crashes blamed or its hangs explained: the check fails saying so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, Unpack

from harness.contract.axes import PARALLEL_SIZES
from harness.contract.jsonfile import JSONObject
from harness.contract.outputs import EngineOutputs
from harness.contract.roots import goldens_in
from harness.contract.runbrief import RunBrief
from harness.contract.rundir import OUTPUTS, scenario_dir
from harness.contract.verdict import Verdict
from harness.engines import BUILTIN, Engine, EngineUnavailable, axes_text, get_engine
from harness.engines.base import Capability
from harness.engines.launch.rankside import RANK_FAULT_ENV
from harness.inputs import models
from harness.inputs.scenarios.scenario import Scenario, settings_label
from harness.inputs.scenarios.schema import SuiteFile
from harness.run.compare.numeric import check_workloads
from harness.run.compare.tolerances import tolerance_for
from harness.run.request import RunConfig
from harness.run.runner import GoldenUnsupported, RunContext, make_golden, run_scenario
from harness.run.stages.admit import admit

CHECKS = ("load", "versions", "unsupported", "outputs", "matches-reference", "parallel", "crash", "hang")
REFERENCE_ENGINE = "reference"
NO_SUCH_AXIS = "nosuchaxis"
# what the launcher writes for a rank that did not answer SIGUSR1
DUMP_MISSING = "(no stack dump received"

# small: a few prompts of different lengths, a few greedy steps through the KV cache
WORKLOADS = [
    {"name": "logits", "kind": "logprobs", "prompts": "gsm8k-test", "num_prompts": 3, "max_prompt_tokens": 48, "top_k": 10},
    {"name": "greedy", "kind": "greedy", "prompts": "gsm8k-test", "num_prompts": 2, "max_new_tokens": 8, "top_k": 10},
]


def capability_problems(engine: Engine) -> list[str]:
    """A declared capability (engines/base.py Capability) the engine does not implement:
    the harness trusts the declaration, so the kit checks it."""
    problems = []
    caps = engine.capabilities
    if Capability.INSTALLS_RELEASES in caps and (engine.distribution() is None or type(engine).install_env is Engine.install_env):
        problems.append("it declares installs-releases but has no distribution() and install_env()")
    if Capability.REPRO_SCRIPTS in caps and type(engine).repro_script is Engine.repro_script:
        problems.append("it declares repro-scripts but has no repro_script()")
    if Capability.OWN_PYTHON in caps:
        before = dict(engine.options)
        probe = "/conformance-check/bin/python"
        engine.configure({**before, "python": probe})
        took = str(engine.python()) == probe
        engine.configure(before)
        if not took:
            problems.append("it declares own-python but python() ignores engine_options.python")
    return problems


@dataclass
class KitOptions:
    # a zoo model name (the table's, or a package's)
    model: str = "tiny-llama"
    device: str = "cpu"
    timeout_s: float = 300.0  # per run
    # the hang check's run: a hang is declared by then at the latest
    hang_timeout_s: float = 90.0
    parallel: list[JSONObject] = field(default_factory=lambda: [{"tp": 2}])  # settings of the parallel-<s> checks
    checks: list[str] | None = None  # None: every check
    engine_options: dict[str, str] = field(default_factory=dict)  # as a scenario file's engine_options:
    reference: str = REFERENCE_ENGINE


class FaultOptions(TypedDict, total=False):
    """The RunConfig fields that make a rank raise or hang (Kit._fault)."""

    faults: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass
class KitResult:
    name: str
    status: str  # "pass" | "fail" | "skip"
    detail: str

    def line(self) -> str:
        return f"  {self.status.upper():4s}  {self.name:18s} {self.detail}"


def passed(results: list[KitResult]) -> bool:
    """No check failed (a skip says why it could not apply, and is not a failure)."""
    return all(r.status != "fail" for r in results)


def summary(results: list[KitResult]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    return f"{len(results)} checks: {counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip"


def assert_conforms(engine: str, work_dir: Path, options: KitOptions | None = None) -> list[KitResult]:
    """Run the kit; an AssertionError listing every check's line if any check failed."""
    results = run_kit(engine, work_dir, options)
    if not passed(results):
        raise AssertionError(f"engine '{engine}' does not conform ({summary(results)}):\n" + "\n".join(r.line() for r in results))
    return results


def parse_settings(label: str) -> JSONObject:
    """`tp2-pp2` -> {"tp": 2, "pp": 2}; `tp2-sp` -> {"tp": 2, "sp": True} (scenario id spelling)."""
    settings: JSONObject = {}
    for part in filter(None, label.split("-")):
        m = re.fullmatch(r"([a-z]+)(\d+)?", part)
        if not m:
            raise ValueError(f"'{label}': expected settings like tp2, pp2, tp2-pp2 or tp2-sp")
        settings[m[1]] = int(m[2]) if m[2] else True
    return settings


def impossible_settings(axes: Mapping[str, tuple[object, ...] | None], golden: JSONObject) -> list[tuple[str, JSONObject]]:
    """(what, settings) an engine with these axes cannot run by its own declaration."""
    cases = [(f"an axis it does not declare ({NO_SUCH_AXIS}=true)", {**golden, NO_SUCH_AXIS: True})]
    for axis, allowed in axes.items():
        if allowed is None or not allowed:
            continue
        if all(isinstance(v, bool) for v in allowed):
            outside = [v for v in (False, True) if v not in allowed]
            if not outside:
                continue
            value: object = outside[0]
        elif all(isinstance(v, int) for v in allowed):
            value = max(v for v in allowed if isinstance(v, int)) + 1  # all of them (checked above)
        else:
            value = "nosuchvalue"
        cases.append((f"{axis}={value!r}, outside its declared values {list(allowed)}", {**golden, axis: value}))
    size = next((a for a in PARALLEL_SIZES if a in axes), None)  # the first the engine declares: tp
    if size is not None:
        cases.append((f"{size}=0 (a parallel size counts ranks)", {**golden, size: 0}))
    return cases


def work_dir_name(name: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.") or "engine"


class Kit:
    """One engine's conformance run; `run()` yields each check's result as it ends."""

    def __init__(self, engine: str, work_dir: Path, options: KitOptions):
        self.name = engine
        self.work = Path(work_dir)
        self.opts = options
        self.engine: Engine | None = None
        self.axes: dict[str, tuple[object, ...] | None] = {}
        self.golden_settings: JSONObject = {}
        self.suite: SuiteFile | None = None
        self.model_dir: str | None = None
        self.golden_problem: str | None = "not made yet"
        self.outputs = EngineOutputs()  # the engine's tp1 golden, once made
        self.workloads: list[JSONObject] = []

    # -- helpers -------------------------------------------------------------------

    def _suite(self, engine: str) -> SuiteFile:
        return SuiteFile.model_validate(
            {
                "suite": f"conformance-{work_dir_name(engine)}",
                "engine": engine,
                "model": self.opts.model,
                "dtype": "float32",
                "timeout_s": self.opts.timeout_s,
                "workloads": WORKLOADS,
                "golden": self.golden_settings,
                "matrix": {a: [v] for a, v in self.golden_settings.items()},
                "engine_options": self.opts.engine_options if engine == self.name else {},
            }
        )

    def _scenario(self, settings: JSONObject, suite: SuiteFile | None = None) -> Scenario:
        suite = suite or self.suite
        assert suite is not None
        label = settings_label(settings, list(settings)) if settings else "default"
        return Scenario(
            id=f"{suite.suite}/{label}",
            suite=suite,
            source=self.work / "conformance.yaml",
            settings=dict(settings),
            gates=frozenset(),
        )

    def _run(self, check: str, settings: JSONObject, timeout_s: float | None = None, **options: Unpack[FaultOptions]) -> Verdict:
        run_opts = RunContext(RunConfig(device=self.opts.device, timeout_s=timeout_s, **options))
        return run_scenario(self._scenario(settings), self.work / "runs" / check, run_opts)

    def _unsupported(self, settings: JSONObject) -> str | None:
        assert self.engine is not None
        return self.engine.unsupported_reason(settings, self.model_dir)

    def _ensure_golden(self, suite: SuiteFile) -> tuple[EngineOutputs, list[JSONObject]]:
        """The suite's tp1 golden in the kit's golden root (reused when it still applies,
        else made, as `harness golden` makes it) and the resolved workloads it ran."""
        scenario = self._scenario(dict(suite.golden), suite)
        opts = RunContext(RunConfig(device=self.opts.device))
        admitted = admit(scenario, dict(suite.golden), self.work / "prepare", opts, faults=False)
        # no golden that applies yet: make it (make_golden says what cannot run)
        if isinstance(admitted, Verdict):
            make_golden(scenario, self.work / "golden-runs", opts)
            admitted = admit(scenario, dict(suite.golden), self.work / "prepare", opts, faults=False)
        if isinstance(admitted, Verdict):
            raise RuntimeError(f"the golden of '{scenario.golden_key}' was made but is refused: {admitted.reason}")
        assert admitted.reference is not None
        return admitted.reference.outputs, admitted.prepared.brief.workloads

    def _fault_target(self) -> tuple[JSONObject, int] | None:
        """The settings of the crash and hang runs (the most ranks among tp2, pp2, tp1 that
        the engine runs) and the last launched rank, which the faults target."""
        assert self.engine is not None
        for extra in ({"tp": 2}, {"pp": 2}, {}):
            settings = {**self.golden_settings, **extra}
            if set(settings) - set(self.axes) or self._unsupported(settings):
                continue
            brief = RunBrief(
                f"conformance/{settings_label(settings, list(settings))}",
                self.name,
                str(self.model_dir),
                "float32",
                settings,
                [],
                str(self.work / "probe-outputs"),
                device=self.opts.device,
            )
            plan = self.engine.launch_plan(brief, str(self.work / "probe-spec.json"))
            return settings, plan.world_size - 1
        return None

    def _fault(self, kind: str, settings: JSONObject, rank: int) -> tuple[FaultOptions, str]:
        """RunConfig fields that make `rank` raise / hang, and how (for the check's line)."""
        assert self.engine is not None
        native = f"rank-{kind}@{rank}"
        if self.engine.fault_problem([native], settings) is None:
            return {"faults": (native,)}, f"the engine's fault switch {native}"
        injected = f"{kind}@{rank}"
        return {"env": ((RANK_FAULT_ENV, injected),)}, f"${RANK_FAULT_ENV}={injected} (the engine has no {native} switch)"

    # -- checks --------------------------------------------------------------------

    def check_load(self) -> KitResult:
        try:
            engine = get_engine(self.name)
        except EngineUnavailable as exc:
            return KitResult("load", "fail", str(exc))
        engine.configure(self.opts.engine_options)
        self.engine = engine
        from harness.contract import plugins

        found = plugins.discover(plugins.ENGINES_GROUP).get(self.name) or []
        origin = "built-in" if self.name in BUILTIN else (found[0].origin() if found else "?")
        self.axes = dict(engine.axes)
        problems = []
        if engine.name != self.name:
            problems.append(
                f"its class says name = {engine.name!r} but it is registered as {self.name!r}: "
                "outputs, versions and reports would disagree"
            )
        self.golden_settings = {a: 1 for a in PARALLEL_SIZES if a in self.axes}
        if not self.golden_settings:
            problems.append(
                "it declares neither a 'tp' nor a 'pp' axis (declare them, e.g. axes = {'tp': (1,), "
                "'pp': (1,)}, even for one rank)"
            )
        problems += capability_problems(engine)
        reason = engine.unavailable_reason()
        if reason:
            problems.append(f"it cannot run here: {reason}")
        if problems:
            if reason or not self.golden_settings:  # nothing can be run
                self.engine = None
            return KitResult("load", "fail", f"loads from {origin}, but " + "; ".join(problems))
        return KitResult("load", "pass", f"from {origin}; ready here; axes {axes_text(self.axes)}")

    def check_versions(self) -> KitResult:
        assert self.engine is not None
        try:
            versions = self.engine.versions()
        except Exception as exc:  # noqa: BLE001 - the kit reports what the engine raised
            return KitResult("versions", "fail", f"versions() raised {type(exc).__name__}: {exc}")
        problems = []
        if not isinstance(versions, dict):
            return KitResult("versions", "fail", f"versions() returned {type(versions).__name__}, not a dict")
        if versions.get("engine") != self.name:
            problems.append(f"versions()['engine'] is {versions.get('engine')!r}, not {self.name!r}")
        bad = [k for k, v in versions.items() if not (isinstance(k, str) and isinstance(v, str) and v)]
        if bad:
            problems.append(f"not a non-empty string: {bad}")
        if len(versions) < 2:
            problems.append("it names no version (e.g. the engine's own, torch's)")
        if problems:
            return KitResult("versions", "fail", f"{versions}: " + "; ".join(problems))
        return KitResult("versions", "pass", str(versions))

    def check_unsupported(self) -> KitResult:
        said = []
        for what, settings in impossible_settings(self.axes, self.golden_settings):
            try:
                reason = self._unsupported(settings)
            except Exception as exc:  # noqa: BLE001 - a crash here is what the check is for
                return KitResult(
                    "unsupported",
                    "fail",
                    f"{what}: unsupported_reason raised {type(exc).__name__}: {exc} "
                    "instead of returning a reason (a harness `error`, not `unsupported`)",
                )
            if not (isinstance(reason, str) and reason.strip()):
                return KitResult(
                    "unsupported",
                    "fail",
                    f"{what}: unsupported_reason returned {reason!r}, not a reason; "
                    "the harness would launch settings the engine says it cannot run",
                )
            verdict = self._run("unsupported", settings)
            if verdict.verdict != "unsupported":
                return KitResult("unsupported", "fail", f"{what}: the scenario ended {verdict.verdict}: {verdict.reason}")
            said.append(f'{what}: "{reason}"')
        return KitResult(
            "unsupported", "pass", f"{len(said)} impossible settings, each `unsupported` with a reason: " + "; ".join(said)
        )

    def check_outputs(self) -> KitResult:
        assert self.suite is not None
        try:
            self.outputs, self.workloads = self._ensure_golden(self.suite)
        except Exception as exc:  # noqa: BLE001 - whatever stopped the golden run is the check's result
            kind = "cannot run the tp1 golden setting" if isinstance(exc, GoldenUnsupported) else "its golden run failed"
            self.golden_problem = f"{kind}: {(str(exc).splitlines() or [type(exc).__name__])[0]}"
            return KitResult("outputs", "fail", f"{self.golden_problem} (`harness golden` would fail the same way)")
        self.golden_problem = None
        verdict = self._run("outputs", self.golden_settings)
        if verdict.verdict != "pass":
            return KitResult("outputs", "fail", f"tp1 run against its tp1 golden: {self._verdict_text(verdict)}")
        scenario = self._scenario(self.golden_settings)
        meta = EngineOutputs.load(scenario_dir(self.work / "runs" / "outputs", scenario.id) / OUTPUTS).meta
        note = ""
        # information for whoever reads the outputs; the harness does not need it
        if meta.get("engine") != self.name:
            note = (
                f" (note: outputs.json names engine {meta.get('engine')!r}, not {self.name!r}; "
                "EngineOutputs.describe_run(brief, name) writes it)"
            )
        return KitResult("outputs", "pass", f"golden made and a tp1 run read and passed: {verdict.reason}{note}")

    def check_matches_reference(self) -> KitResult:
        if self.name == self.opts.reference:
            return KitResult("matches-reference", "skip", "this is the reference engine")
        if self.golden_problem:
            return KitResult("matches-reference", "skip", f"no outputs of the engine to compare ({self.golden_problem})")
        try:
            reference, _ = self._ensure_golden(self._suite(self.opts.reference))
        except Exception as exc:  # noqa: BLE001 - the reference's trouble is not the engine's
            return KitResult("matches-reference", "skip", f"the {self.opts.reference} engine's outputs could not be made: {exc}")
        tol = tolerance_for("float32")
        try:
            checks = check_workloads(reference, self.outputs, self.workloads, tol)
        except Exception as exc:  # noqa: BLE001 - outputs the comparison cannot read are the engine's
            return KitResult("matches-reference", "fail", f"its outputs cannot be compared: {type(exc).__name__}: {exc}")
        text = "; ".join(f"{c.name}: {c.summary}" for c in checks)
        status = "pass" if all(c.passed for c in checks) else "fail"
        return KitResult("matches-reference", status, f"tp1 vs the {self.opts.reference} engine ({tol.describe()}): {text}")

    def check_parallel(self, extra: JSONObject) -> KitResult:
        settings = {**self.golden_settings, **extra}
        name = f"parallel-{settings_label(extra, list(extra))}"
        undeclared = sorted(set(settings) - set(self.axes))
        if undeclared:
            return KitResult(name, "skip", f"the engine declares no {', '.join(undeclared)} axis")
        reason = self._unsupported(settings)
        if reason:
            return KitResult(name, "skip", f"unsupported: {reason}")
        if self.golden_problem:
            return KitResult(name, "skip", f"no golden to compare with ({self.golden_problem})")
        verdict = self._run(name, settings)
        if verdict.verdict != "pass":
            return KitResult(name, "fail", f"against its tp1 golden: {self._verdict_text(verdict)}")
        # what the engine says it applied (outputs meta `applied`): a note, as the harness treats it
        evidence = "; ".join(
            f"{axis}={a['value']!r} {'applied' if a['applied'] else 'evidence'}: {a['evidence']}"
            for axis, a in verdict.applied.items()
        )
        return KitResult(name, "pass", f"against its tp1 golden: {verdict.reason}" + (f" ({evidence})" if evidence else ""))

    def _fault_target_or_skip(self, name: str) -> tuple[JSONObject, int] | KitResult:
        """The setting and rank a fault check aims at, or the skip that says why it cannot run."""
        target = self._fault_target()
        if target is None:
            return KitResult(name, "skip", "the engine supports none of tp2, pp2, tp1 here")
        if self.golden_problem:
            return KitResult(name, "skip", f"a run needs its golden ({self.golden_problem})")
        return target

    def check_crash(self) -> KitResult:
        target = self._fault_target_or_skip("crash")
        if isinstance(target, KitResult):
            return target
        settings, rank = target
        fault, how = self._fault("raise", settings, rank)
        verdict = self._run("crash", settings, **fault)
        label = settings_label(settings, list(settings))
        if verdict.verdict != "crash":
            return KitResult(
                "crash",
                "fail",
                f"{label}, rank {rank} made to raise by {how}: ended {self._verdict_text(verdict)}{self._not_fired(verdict)}",
            )
        crash = verdict.crash or {}
        problems = []
        if str(crash.get("rank")) != str(rank):
            problems.append(f"it blames rank {crash.get('rank')}, not rank {rank}")
        if not crash.get("exception"):
            problems.append(
                "no exception from the rank's error record (does the rank run under harness.engines.launch.rankside.run_rank?)"
            )
        if not crash.get("traceback"):
            problems.append("no traceback")
        if problems:
            return KitResult("crash", "fail", f"{verdict.reason}: " + "; ".join(problems))
        return KitResult("crash", "pass", f"{label}, by {how}: {verdict.reason}")

    def check_hang(self) -> KitResult:
        target = self._fault_target_or_skip("hang")
        if isinstance(target, KitResult):
            return target
        settings, rank = target
        fault, how = self._fault("hang", settings, rank)
        verdict = self._run("hang", settings, timeout_s=self.opts.hang_timeout_s, **fault)
        label = settings_label(settings, list(settings))
        if verdict.verdict != "hang":
            return KitResult(
                "hang",
                "fail",
                f"{label}, rank {rank} made to hang by {how}: ended {self._verdict_text(verdict)}{self._not_fired(verdict)}",
            )
        hang = verdict.hang or {}
        stacks, stuck = hang.get("stacks") or {}, hang.get("stuck_at") or {}
        missing = sorted(r for r, dump in stacks.items() if not dump or dump.startswith(DUMP_MISSING))
        problems = []
        if not stacks or missing:
            problems.append(
                f"no stack dump from rank(s) {missing or 'any'} (ranks must run under "
                "harness.engines.launch.rankside.run_rank, which dumps every thread's stack on SIGUSR1)"
            )
        if rank not in stuck and str(rank) not in stuck:
            problems.append(f"no place where rank {rank} was stuck")
        if problems:
            return KitResult("hang", "fail", f"{verdict.reason}: " + "; ".join(problems))
        return KitResult("hang", "pass", f"{label}, by {how}: stacks of rank(s) {sorted(stacks)}; {verdict.reason}")

    @staticmethod
    def _verdict_text(verdict: Verdict) -> str:
        logs = f" (logs: {', '.join(str(p) for p in verdict.logs.values())})" if verdict.logs else ""
        return f"{verdict.verdict}: {verdict.reason}{logs}"

    @staticmethod
    def _not_fired(verdict: Verdict) -> str:
        if verdict.verdict == "pass":
            return (
                "; the fault never fired: the engine's processes do not honour it (are they started under "
                "harness.engines.launch.rankside.run_rank, and does the switch fire on that rank?)"
            )
        return ""

    # -- the run -------------------------------------------------------------------

    def wanted(self, name: str) -> bool:
        return self.opts.checks is None or name in self.opts.checks

    def run(self) -> Iterator[KitResult]:
        # the kit's goldens, never among the project's
        with goldens_in(self.work / "golden"):
            load = self.check_load()
            yield load
            later = [c for c in CHECKS if c != "load" and self.wanted(c)]
            if self.engine is None:
                for name in later:
                    yield KitResult(name, "skip", "the engine does not load or cannot run here (see load)")
                return
            if self.wanted("versions"):
                yield self.check_versions()
            try:
                self.suite = suite = self._suite(self.name)
                # the kit's suite names one model (KitOptions.model), never archs
                assert suite.model is not None
                self.model_dir = str(
                    models.resolve(
                        suite.model, models.builder_python(str(self.engine.python()), arch=getattr(suite.model, "arch", None))
                    ).directory
                )
            except (ValueError, models.ModelError) as exc:
                for name in later:
                    if name != "versions":
                        yield KitResult(
                            name,
                            "fail" if name == "outputs" else "skip",
                            f"the kit's suite for model {self.opts.model} cannot be made: {exc}",
                        )
                return
            if self.wanted("unsupported"):
                yield self.check_unsupported()
            if any(self.wanted(c) for c in ("outputs", "matches-reference", "parallel", "crash", "hang")):
                outputs = self.check_outputs()  # the golden every later run is held to
                if self.wanted("outputs"):
                    yield outputs
            if self.wanted("matches-reference"):
                yield self.check_matches_reference()
            if self.wanted("parallel"):
                for extra in self.opts.parallel:
                    yield self.check_parallel(extra)
            if self.wanted("crash"):
                yield self.check_crash()
            if self.wanted("hang"):
                yield self.check_hang()


def run_kit(
    engine: str, work_dir: Path, options: KitOptions | None = None, echo: Callable[[str], None] | None = None
) -> list[KitResult]:
    """Every check's result (each also passed to `echo` as a line as soon as it ends)."""
    options = options or KitOptions()
    unknown = [c for c in options.checks or [] if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown} (the kit has: {', '.join(CHECKS)})")
    results = []
    for result in Kit(engine, work_dir, options).run():
        results.append(result)
        if echo:
            echo(result.line())
    return results
