"""Benchmark: the vllm gate's comparisons done as vLLM's own CI does them, against the harness.

vLLM's way (its tests/utils.py `compare_two_settings`, used by
tests/distributed/test_pipeline_parallel.py): every comparison starts the reference setting
and then the tested setting live, each in fresh processes with vLLM's default start method
(spawn on CPU), and compares what they return; nothing is stored between comparisons. Here
each selected vllm-gate scenario is done that way: its suite's golden setting (tp1-pp1 eager)
and then the scenario's setting, each one `vllm.LLM` in a fresh `.venv-vllm` interpreter
(bench/vllm_ab_setting.py), the same prompts and engine arguments as the harness, held
to each other by the harness's own comparison and tolerance (harness/run/compare/outputs.py)
and its expectations (harness/contract/expectations.py). vLLM's tests start `vllm serve` and
compare through its OpenAI API; the offline `vllm.LLM` started here is the cheaper of the two,
so vLLM's way is, if anything, measured short.

The harness's way: `python -m harness run <the same ids>` (stored golden, rank-pool zygote
with vLLM imported, vLLM's engine core and workers forked, the harness's compile cache),
once first to warm its caches (`--no-warmup`: not), then measured.

    python bench/vllm_ab.py [--scenarios ID...] [--all] [--no-warmup] [--out FILE]

The harness's way runs first (short, bounded), then vLLM's way, which rewrites partial.md in
the work directory after every scenario (a run stopped for time keeps the ratio so far).
Default: the text suites of the vllm gate (DEFAULT_SUITES); `--all` the whole gate. Prints a
table (per scenario: each way's wall time and verdict; totals; the ratio harness / vLLM's
way against TARGET_RATIO) and writes it, with every log, under reports/bench-vllm-ab-<time>/.
Verdicts must agree: an expected failure counts as its observed class (fail, crash, ...), so
both ways agree when both see the same class of failure. Exit 1 when any verdict differs.
Numbers for this machine: docs/BENCHMARKS.md ("The harness against vLLM's own way").
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.contract import rundir  # noqa: E402
from harness.contract.expectations import apply_expectations  # noqa: E402
from harness.contract.verdict import Verdict  # noqa: E402
from harness.engines.launch.outcome import RankFailure  # noqa: E402
from harness.engines.vllm import VllmEngine  # noqa: E402
from harness.engines.vllm.repro import ENV as VLLM_RUN_ENV  # noqa: E402
from harness.inputs.scenarios.loading import load_scenarios  # noqa: E402
from harness.inputs.scenarios.scenario import Scenario, select  # noqa: E402
from harness.run.compare.outputs import judge_outputs  # noqa: E402
from harness.run.compare.tolerances import tolerance_for  # noqa: E402

GATE = "vllm"
DEFAULT_SUITES = ("vllm-llama", "vllm-qwen3", "vllm-gemma4", "vllm-archs")
TARGET_RATIO = 0.3
SETTING_SCRIPT = ROOT / "bench" / "vllm_ab_setting.py"
# vLLM's own test helper sets this for every server it starts (RemoteOpenAIServer); on CPU
# it is vLLM's default anyway.
START_METHOD = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
# A spawned vLLM start on this 2-core machine takes 30-60 s, more when loaded: a setting gets
# its scenario's timeout, and never less than this.
MIN_SETTING_TIMEOUT_S = 600.0


@dataclass
class Outcome:
    """How one way ended one scenario, and how long it took."""

    verdict: str
    seconds: float
    observed: str | None = None  # under expected-failure: the failure seen (fail, crash, hang)
    reason: str = ""

    @classmethod
    def of(cls, v: Verdict, seconds: float) -> Outcome:
        return cls(v.verdict, seconds, v.observed, v.reason)

    @property
    def failure_class(self) -> str:
        """What happened, expectations aside: an expected failure is the failure it was."""
        return self.observed if self.verdict == "expected-failure" and self.observed else self.verdict

    def label(self) -> str:
        return f"expected-failure ({self.observed})" if self.verdict == "expected-failure" else self.verdict


@dataclass
class Row:
    scenario: str
    vllm_way: Outcome
    harness: Outcome

    @property
    def same(self) -> bool:
        return self.vllm_way.failure_class == self.harness.failure_class


# ---------------------------------------------------------------------------------
# vLLM's way: the reference and the tested setting, each started live


def vllm_way(scenario: Scenario, work: Path) -> Outcome:
    """The scenario as compare_two_settings does it: the golden setting started, then the
    scenario's setting started, compared. A setting the harness refuses before any start
    (unsupported here, as vLLM's own test would be skipped) starts nothing."""
    from harness.run.request import RunConfig
    from harness.run.stages.admit import admit
    from harness.run.stages.context import RunContext

    start = time.monotonic()
    opts = RunContext(RunConfig(gate=GATE))
    reference = admit(scenario, dict(scenario.suite.golden), work / "reference", opts, gate=GATE, golden=False)
    tested = admit(scenario, scenario.engine_settings, work / "setting", opts, gate=GATE, golden=False)
    if isinstance(tested, Verdict):
        verdict = tested
    elif isinstance(reference, Verdict):
        verdict = Verdict(scenario.id, "error", f"the reference setting was refused: {reference.reason}")
    else:
        verdict = started_and_compared(scenario, reference, tested, work)
        verdict.versions = tested.prepared.manifest["versions"]  # which engine the expectations apply to
    verdict = apply_expectations(verdict, scenario.expectations, scenario.known_bugs)
    return Outcome.of(verdict, time.monotonic() - start)


def started_and_compared(scenario: Scenario, reference, tested, work: Path) -> Verdict:
    """Reference first, as vLLM's helper does; the tested setting even when it alone fails."""
    ref_problem = start_setting(scenario, reference, work / "reference")
    if ref_problem is not None:
        return Verdict(scenario.id, "error", f"the reference setting did not run: {ref_problem.reason}")
    problem = start_setting(scenario, tested, work / "setting")
    if problem is not None:
        return problem
    return compared(scenario, reference.prepared, tested.prepared)


def start_setting(scenario: Scenario, admitted, out_dir: Path) -> Verdict | None:
    """One fresh `.venv-vllm` process running one setting to its end (its own process
    group: vLLM's engine core and workers go with it); None when it wrote its outputs,
    else its crash or hang verdict."""
    prepared = admitted.prepared
    out_dir.mkdir(parents=True, exist_ok=True)
    brief_path, log_path = out_dir / rundir.BRIEF, out_dir / "vllm.log"
    prepared.brief.save(brief_path)
    timeout = max(scenario.suite.timeout_s, MIN_SETTING_TIMEOUT_S)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(prepared.engine.python()), str(SETTING_SCRIPT), str(brief_path)],
            cwd=ROOT,
            env=setting_env(scenario),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            stop_group(proc)
    if code is None:
        return Verdict(scenario.id, "hang", f"no result after {timeout:g} s (log: {log_path})")
    if code != 0:
        return crash_verdict(scenario.id, prepared.engine, code, log_path)
    return None


def setting_env(scenario: Scenario) -> dict[str, str]:
    """The caller's environment (vLLM's default cache root unless the caller set one), what
    the harness's vLLM runs always set (offline hub, no usage stats), the scenario's own
    variables, vLLM's test start method, and this checkout on the path."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **VLLM_RUN_ENV, **scenario.extra_env, **START_METHOD, "PYTHONPATH": path}


def stop_group(proc: subprocess.Popen) -> None:
    """Whatever is left of a setting's process group (a hang, or workers left behind)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def crash_verdict(name: str, engine, code: int, log_path: Path) -> Verdict:
    """The crash as the vLLM engine's root cause tells it from the process's log (the
    worker that really failed), as the harness tells a crash."""
    text = log_path.read_text(errors="replace")
    cause = engine.root_cause(text)
    if cause is None:
        tail = "\n".join(text.splitlines()[-30:])
        cause = RankFailure("vLLM process", code, None, None, tail, str(log_path))
    else:
        cause = replace(cause, exitcode=code, log=str(log_path))
    return Verdict(name, "crash", cause.describe(), crash=asdict(cause))


def compared(scenario: Scenario, reference, tested) -> Verdict:
    """The tested setting's outputs held to the reference's with the scenario's tolerance;
    eval suites also by their paired items (the reference's answers in the golden's place)."""
    from harness.contract.outputs import EngineOutputs
    from harness.run.evals import lm
    from harness.run.evals.paired import accuracy_checks

    ref_out, got_out = EngineOutputs.load(reference.brief.output_dir), EngineOutputs.load(tested.brief.output_dir)
    also = []
    if tested.evals:
        also = accuracy_checks(
            scenario.suite.evals, lm.score_evals(reference.evals, ref_out), lm.score_evals(tested.evals, got_out)
        )
    tol = tolerance_for(scenario.suite.dtype, scenario.suite.tolerances.model_dump())
    return judge_outputs(scenario.id, ref_out, got_out, tested.brief.workloads, tol, also=also)


# ---------------------------------------------------------------------------------
# the harness's way: `harness run` of the same ids


def harness_way(ids: list[str], report_dir: Path, run_id: str) -> tuple[float, dict[str, Outcome], float]:
    """(wall s, {id: outcome}, s waited for device slots) of one `python -m harness run IDS`
    into report_dir/run_id. The slots are shared with every harness run on the machine: a
    wait is another run's doing, said beside the table."""
    cmd = [sys.executable, "-m", "harness", "run", *ids, "--report-dir", str(report_dir), "--run-id", run_id]
    start = time.monotonic()
    with open(report_dir / f"{run_id}.log", "w") as log:
        code = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    if code not in (0, 1):  # 0: all as expected, 1: something was not; anything else ran nothing whole
        sys.exit(f"harness run exited {code}; see {report_dir / f'{run_id}.log'}")
    outcomes, waited = {}, 0.0
    for i in ids:
        path = rundir.verdict_path(report_dir / run_id, i)
        if path.exists():
            v = Verdict.load(path)
            outcomes[i] = Outcome.of(v, v.duration_s)
            waited += (v.timings.get("phases") or {}).get("wait", 0.0)
    return wall, outcomes, waited


# ---------------------------------------------------------------------------------
# choosing scenarios, and the table


def chosen(scenarios: list[Scenario], ids: list[str] | None, whole_gate: bool) -> tuple[list[Scenario], str]:
    """(the scenarios, how the table names the choice)."""
    gate = select(scenarios, None, gate=GATE)
    if ids:
        picked = select(scenarios, ids)
        return picked, f"{len(picked)} chosen scenarios (--scenarios)"
    if whole_gate:
        return gate, f"the whole {GATE} gate ({len(gate)} scenarios, --all)"
    picked = [s for s in gate if s.suite.suite in DEFAULT_SUITES]
    return picked, (
        f"the default subset: the {GATE} gate's text suites {', '.join(DEFAULT_SUITES)} "
        f"({len(picked)} of its {len(gate)} scenarios)"
    )


def ratio(harness_s: float, vllm_s: float) -> float:
    return harness_s / vllm_s if vllm_s > 0 else float("inf")


def table(rows: list[Row], harness_wall: float, vllm_wall: float, total: str = "total (wall)") -> list[str]:
    lines = [
        "| scenario | vLLM's way (s) | harness (s) | vLLM's way verdict | harness verdict | same |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r.scenario}` | {r.vllm_way.seconds:.1f} | {r.harness.seconds:.1f} | {r.vllm_way.label()} | "
            f"{r.harness.label()} | {'yes' if r.same else '**NO**'} |"
        )
    same = sum(r.same for r in rows)
    lines.append(f"| **{total}** | **{vllm_wall:.1f}** | **{harness_wall:.1f}** | | | {same}/{len(rows)} |")
    return lines


def verdict_line(harness_wall: float, vllm_wall: float) -> str:
    r = ratio(harness_wall, vllm_wall)
    met = "met" if r <= TARGET_RATIO else f"missed by {r - TARGET_RATIO:.2f}"
    return (
        f"harness / vLLM's way = {harness_wall:.1f} / {vllm_wall:.1f} s = **{r:.2f}x** (target: at most {TARGET_RATIO}x: {met})"
    )


def mismatches(rows: list[Row]) -> list[str]:
    """Every scenario whose two ways disagree, with both reasons (never hidden)."""
    return [
        f"- `{r.scenario}`: vLLM's way {r.vllm_way.label()} ({r.vllm_way.reason}); "
        f"harness {r.harness.label()} ({r.harness.reason})"
        for r in rows
        if not r.same
    ]


def rows_of(ids: list[str], vllm: dict[str, Outcome], harness: dict[str, Outcome]) -> list[Row]:
    """One row per id; a scenario the harness wrote no verdict for shows as `missing`."""
    return [Row(i, vllm[i], harness.get(i, Outcome("error", 0.0, reason="no verdict written (missing)"))) for i in ids]


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "?")
    return f"{platform.machine()} {os.cpu_count()} cores ({model})"


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        load = os.getloadavg()
        return f"load average: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"


def vllm_cache_note() -> str:
    root = Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")
    graphs = root / "torch_compile_cache"
    entries = len(list(graphs.iterdir())) if graphs.is_dir() else 0
    return f"vLLM's default compile cache {root} ({entries} entries in torch_compile_cache before the run)"


# ---------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", metavar="ID", help="these scenario ids (default: the text suites of the vllm gate)")
    ap.add_argument("--all", action="store_true", help="the whole vllm gate")
    ap.add_argument("--no-warmup", action="store_true", help="measure the harness's first run (no warm-up run first)")
    ap.add_argument("--out", type=Path, help="also write the table here (default: only under the work directory)")
    args = ap.parse_args()
    # Stopped for time (SIGTERM, as `timeout` or a CI job sends it): unwind, so the setting
    # running now is stopped with its process group (start_setting's finally) and partial.md stays
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    missing = VllmEngine().unavailable_reason()
    if missing:  # before anything runs: both ways would only say `error`
        sys.exit(f"bench-vllm-ab needs vLLM: {missing}")
    scenarios, choice = chosen(load_scenarios(), args.scenarios, args.all)
    work = ROOT / "reports" / f"bench-vllm-ab-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True)
    print(f"bench-vllm-ab: {choice}; work directory {work}", flush=True)
    versions = VllmEngine().versions()
    notes = [f"vLLM {versions['vllm']}, torch {versions['torch']} (vLLM's interpreter)", f"before: {uptime()}", vllm_cache_note()]
    # The harness's way first: it is short and bounded. vLLM's way then writes partial.md after
    # every scenario, so a run stopped for time still leaves the ratio over what it finished.
    harness_wall, harness = harness_way_measured(scenarios, work, not args.no_warmup, notes)
    notes.append(f"after the harness's way: {uptime()}")
    ids = [s.id for s in scenarios]

    def progress(done: dict[str, Outcome]) -> None:
        (work / "partial.md").write_text(
            "\n".join(partial(rows_of([i for i in ids if i in done], done, harness), len(ids))) + "\n"
        )

    vllm_wall, vllm = vllm_way_all(scenarios, work / "vllm-way", progress)
    notes.append(f"after vLLM's way: {uptime()}")
    rows = rows_of(ids, vllm, harness)
    text = "\n".join(report(rows, harness_wall, vllm_wall, choice, notes, warm=not args.no_warmup)) + "\n"
    print("\n" + text)
    for path in [work / "table.md", *([args.out] if args.out else [])]:
        path.write_text(text)
    return 0 if all(r.same for r in rows) else 1


def vllm_way_all(scenarios: list[Scenario], work: Path, progress=None) -> tuple[float, dict[str, Outcome]]:
    """(wall s, {id: outcome}) of every scenario done vLLM's way, one after the other;
    `progress` is given the outcomes so far after each."""
    outcomes: dict[str, Outcome] = {}
    start = time.monotonic()
    for s in scenarios:
        outcomes[s.id] = vllm_way(s, work / rundir.scenario_dir_name(s.id))
        print(f"vLLM's way: {s.id}: {outcomes[s.id].label()} in {outcomes[s.id].seconds:.1f} s", flush=True)
        if progress:
            progress(outcomes)
    return time.monotonic() - start, outcomes


def partial(rows: list[Row], planned: int) -> list[str]:
    """The table over the scenarios vLLM's way has finished, totals being their scenario times."""
    harness_s, vllm_s = sum(r.harness.seconds for r in rows), sum(r.vllm_way.seconds for r in rows)
    return [
        f"partial: {len(rows)} of {planned} scenarios done vLLM's way; totals are their scenario times, not walls",
        "",
        *table(rows, harness_s, vllm_s, total="total (scenario times)"),
        "",
        verdict_line(harness_s, vllm_s),
    ]


def harness_way_measured(
    scenarios: list[Scenario], work: Path, warm_up: bool, notes: list[str]
) -> tuple[float, dict[str, Outcome]]:
    """The measured `harness run`, after a warm-up run of the same ids when asked; notes
    what the warm-up took and the device-slot wait."""
    ids = [s.id for s in scenarios]
    if warm_up:
        warm_wall, _, _ = harness_way(ids, work, "harness-warmup")
        notes.append(f"harness warm-up run (not counted): {warm_wall:.1f} s")
        print(notes[-1], flush=True)
    wall, outcomes, waited = harness_way(ids, work, "harness")
    print(f"harness's way: {wall:.1f} s", flush=True)
    notes.append(f"the harness's scenarios waited {waited:.1f} s in all for device slots (other harness runs on the machine)")
    return wall, outcomes


def report(rows: list[Row], harness_wall: float, vllm_wall: float, choice: str, notes: list[str], warm: bool) -> list[str]:
    head = (
        f"### {choice}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}, "
        f"harness {'warm (a warm-up run first)' if warm else 'first run (no warm-up)'}"
    )
    lines = [head, "", *table(rows, harness_wall, vllm_wall), "", verdict_line(harness_wall, vllm_wall), ""]
    lines += [f"- {n}" for n in notes]
    wrong = mismatches(rows)
    if wrong:
        lines += ["", "Verdicts that differ:", *wrong]
    return lines


if __name__ == "__main__":
    sys.exit(main())
