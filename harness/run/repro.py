"""`harness repro ID`: one failing scenario as a standalone script and a bug report.

    harness repro vllm-llama/tp1-pp2 [--out DIR] [--run RUN_DIR]

writes DIR (default `reports/repro/<id with "/" as "__">/`):

  repro.py   the engine's script (Engine.repro_script): the engine's public API only, no
             harness import; runs the reference setting (the suite's golden setting) and
             the failing one in a process each and compares them with the scenario's
             tolerance; exit 0 bug absent, 1 bug present, 2 cannot judge (docs/REPRO.md)
  BUG.md     versions, the failing setting against the reference, the symptom of the
             latest verdict, the scenario file's expectation, the command to run
  model/     a copy of the checkpoint when it is one the harness built (zoo, tiny arch)
             and small; a user's own checkpoint or a hub snapshot is pointed at instead
  images/    the prompts' images, videos and audio clips, when the workloads have any

The prompts are token ids in the script (the tokenizer is no part of the repro). The
evals of a suite are not reproduced (they need the harness's scoring); the numeric
workloads are. `write_repro` is what the CLI and `harness bisect` call.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.contract.jsonfile import JSONObject
from harness.contract.roots import reports_dir
from harness.contract.runbrief import MEDIA
from harness.contract.rundir import SCENARIOS, VERDICT, scenario_dir_name, verdict_path
from harness.contract.settings.project import project
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import Scenario, find_one, settings_label
from harness.inputs.scenarios.schema import ScenarioError

if TYPE_CHECKING:
    from harness.engines import Engine

SCRIPT, REPORT, MODEL, IMAGES = "repro.py", "BUG.md", "model", "images"
# A harness-built checkpoint up to this size is copied beside the script; a bigger one is pointed at.
COPY_LIMIT_BYTES = 256 << 20
# the last lines of a crash's traceback, in BUG.md
TRACEBACK_LINES = 20


class ReproError(Exception):
    """The reproduction cannot be written; the message says why and what to do."""


@dataclass
class Repro:
    directory: Path
    script: Path
    report: Path
    # the verdict BUG.md describes, if a run of the scenario was found
    verdict: Path | None
    model_copied: bool


def default_out_dir(scenario_id: str, report_dir: Path | None = None) -> Path:
    return reports_dir(report_dir) / "repro" / scenario_dir_name(scenario_id)


def latest_verdict(scenario_id: str, run_dir: Path | None = None, report_dir: Path | None = None) -> Path | None:
    """The verdict file of the scenario in `run_dir`, else the newest one of any run under
    the reports directory (None when it never ran there)."""
    if run_dir is not None:
        path = verdict_path(run_dir, scenario_id)
        if not path.is_file():
            raise ReproError(f"run {run_dir} has no verdict of '{scenario_id}' (no {path})")
        return path
    found = list(reports_dir(report_dir).glob(f"*/{SCENARIOS}/{scenario_dir_name(scenario_id)}/{VERDICT}"))
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def write_repro(
    scenario: Scenario | str,
    out_dir: Path | None = None,
    *,
    run_dir: Path | None = None,
    report_dir: Path | None = None,
    scenarios: list[Scenario] | None = None,
) -> Repro:
    """Write the reproduction of `scenario` (a Scenario or its id) into `out_dir`; raises
    ReproError with the reason when it cannot. `run_dir`: take the symptom from that run
    (default: the newest run of the scenario under the reports directory)."""
    from harness.engines import EngineUnavailable, get_engine
    from harness.engines.base import Capability

    if isinstance(scenario, str):
        try:
            scenario = find_one(scenarios if scenarios is not None else load_scenarios(), scenario)
        except ScenarioError as exc:
            raise ReproError(str(exc)) from None
    suite = scenario.suite
    try:
        engine = get_engine(suite.engine)
    except EngineUnavailable as exc:
        raise ReproError(str(exc)) from None
    if Capability.REPRO_SCRIPTS not in engine.capabilities:
        raise ReproError(
            f"engine '{suite.engine}' cannot write a reproduction (its plugin has no repro_script; "
            f"`harness docs engines`); `harness run {scenario.id}` is the way to re-run it"
        )
    if scenario.faults:
        raise ReproError(
            f"'{scenario.id}' switches on the harness's fault injection ({', '.join(scenario.faults)}): "
            "a self-test of the harness, not an engine bug; a repro uses the engine's public API only"
        )
    engine.configure(scenario.engine_options)
    found = latest_verdict(scenario.id, run_dir, report_dir)
    verdict = Verdict.load(found) if found else None
    asked = scenario
    if verdict is not None and verdict.interaction and verdict.interaction.get("complete"):
        scenario = scenario.narrowed(verdict.interaction["needs"])  # the smallest combination that fails
    out = Path(out_dir) if out_dir is not None else default_out_dir(scenario.id, report_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_dir, copied, model_note = _checkpoint(scenario, engine, out)
    case = _case(scenario, model_dir, out)
    try:
        text = engine.repro_script(case)
    except (ValueError, EngineUnavailable) as exc:
        raise ReproError(f"engine '{suite.engine}' cannot reproduce '{scenario.id}': {exc}") from None
    if text is None:
        raise ReproError(f"engine '{suite.engine}' cannot write a reproduction")
    script = out / SCRIPT
    script.write_text(text)
    script.chmod(0o755)
    versions = verdict.versions if verdict and verdict.versions else _installed_versions(engine)
    report = out / REPORT
    report.write_text(bug_report(scenario, case, verdict, found, versions, model_note, out, asked))
    return Repro(out, script, report, found, copied)


def _checkpoint(scenario: Scenario, engine: Engine, out: Path) -> tuple[str, bool, str]:
    """(the model path the script uses, copied?, a line for BUG.md). A checkpoint the
    harness built (a zoo name, a tiny `arch:`) is copied when small; a user's own
    (`path:`) or a hub snapshot is pointed at: its owner has it, and it may be big."""
    from harness.inputs import models

    try:
        model = models.resolve(
            scenario.model,
            models.builder_python(str(engine.python()), arch=getattr(scenario.model, "arch", None)),
            base_dir=scenario.source.parent,
        )
    except models.ModelError as exc:
        raise ReproError(f"the checkpoint of '{scenario.id}' cannot be had: {exc}") from None
    source = Path(model.directory)
    files = [p for p in sorted(source.iterdir()) if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".lock")]
    size = sum(p.stat().st_size for p in files)
    target = out / MODEL
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    built = isinstance(scenario.model, (str, models.ArchModel))
    ident = f"`{model.label}`, sha256 {model.sha256[:16]}"
    if built and size <= COPY_LIMIT_BYTES:
        target.mkdir()
        for p in files:
            shutil.copy2(p, target / p.name)
        return MODEL, True, f"{ident}; copied into `{MODEL}/` ({size / 1e6:.1f} MB)"
    why = (
        f"{size / 1e6:.0f} MB, over the {COPY_LIMIT_BYTES >> 20} MiB copy limit"
        if built
        else "the user's own checkpoint"
        if isinstance(scenario.model, models.PathModel)
        else "a hub snapshot"
    )
    return str(source), False, f"{ident}; NOT copied ({why}): the script points at `{source}`"


def _case(scenario: Scenario, model_dir: str, out: Path) -> JSONObject:
    """The engine-neutral description the engine's repro_script renders (engines/base.py)."""
    from harness.inputs import workloads as wl
    from harness.inputs.zoo import load_tokenizer
    from harness.run.compare.tolerances import script_literal, tolerance_for

    suite = scenario.suite
    model_path = Path(model_dir) if Path(model_dir).is_absolute() else out / model_dir
    numeric = [w for w in suite.workloads if w.kind in ("logprobs", "greedy")]
    if not numeric:
        raise ReproError(f"'{scenario.id}' has no logprobs or greedy workload (only evals): nothing the script can compare")
    resolved = wl.tokenize(numeric, model_path, load_tokenizer(model_path))
    for w in resolved:
        # the harness's own hidden-state capture: no public API
        w.pop("capture_hidden", None)
        for field in MEDIA:
            if w.get(field):
                w[field] = [
                    [_copy_media(p, out) for p in e] if isinstance(e, list) else _copy_media(e, out) if e else None
                    for e in w[field]
                ]
    overrides = {k: v for k, v in suite.tolerances.model_dump().items() if v is not None}
    tol = tolerance_for(suite.dtype, overrides)
    axes = list(suite.matrix)
    golden = dict(suite.golden)
    reference = settings_label({a: golden[a] for a in axes if a in golden}, [a for a in axes if a in golden])
    failing = settings_label(scenario.engine_settings, [a for a in axes if a in scenario.engine_settings])
    if failing == reference:
        # the golden setting itself: run it twice, against itself
        failing = f"{failing}-again"
    return {
        "scenario": scenario.id,
        "engine": suite.engine,
        "model": model_dir,
        "dtype": suite.dtype,
        "reference": reference,
        "failing": failing,
        "settings": {reference: golden, failing: scenario.engine_settings},
        "workloads": resolved,
        "tolerance": script_literal(tol),
        "tolerance_name": f"{suite.dtype} bounds of harness/run/compare/tolerances.py"
        + (f" with the scenario file's tolerances: {overrides}" if overrides else ""),
        "env": dict(suite.env),
        "timeout_s": suite.timeout_s,
    }


def _copy_media(path: str, out: Path) -> str:
    (out / IMAGES).mkdir(exist_ok=True)
    shutil.copy2(path, out / IMAGES / Path(path).name)
    return f"{IMAGES}/{Path(path).name}"


def _installed_versions(engine: Engine) -> JSONObject:
    """The engine's versions when no run says them (the vllm engine asks its interpreter)."""
    try:
        return dict(engine.versions())
    except Exception as exc:  # noqa: BLE001 - the report says it could not tell, the script still works
        return {"unknown": f"no run of the scenario, and the engine could not say ({type(exc).__name__}: {exc})"}


# ---------------------------------------------------------------------------------
# BUG.md


def bug_report(
    scenario: Scenario,
    case: JSONObject,
    verdict: Verdict | None,
    verdict_file: Path | None,
    versions: JSONObject,
    model_note: str,
    out: Path,
    asked: Scenario | None = None,
) -> str:
    from harness.contract.expectations import describe as describe_expectation

    ref, failing = case["reference"], case["failing"]
    script = out / SCRIPT
    title = verdict.verdict if verdict else "reproduction"
    lines = [f"# {case['engine']}: `{failing}` against `{ref}` ({scenario.id}, {title})", ""]
    from_run = verdict is not None and bool(verdict.versions)
    lines += [
        "| | |",
        "|---|---|",
        f"| scenario | `{scenario.id}` ({_relative(scenario.source)}) |",
        f"| versions | {_versions_text(versions)}"
        + (" (from the run's verdict)" if from_run else " (the installed engine; no run of this scenario was found)")
        + " |",
        f"| model | {model_note} |",
        f"| dtype | {case['dtype']} |",
        f"| reference setting | `{ref}`: {_axes_text(case['settings'][ref])} (the suite's golden setting) |",
        f"| failing setting | `{failing}`: {_axes_text(case['settings'][failing])} |",
        f"| tolerance | {_tolerance_text(case)} |",
        f"| workloads | {_workloads_text(case)} |",
        "",
    ]
    lines += ["## Symptom", ""] + _symptom(verdict, verdict_file) + [""]
    if verdict is not None and verdict.interaction:
        lines += ["## The failing interaction", "", f"`{asked.id if asked else scenario.id}` {verdict.interaction['text']}.", ""]
        lines += [f"- without {t['without']}: {t['verdict']} (`{t['scenario']}`)" for t in verdict.interaction["trials"]]
        if asked is not None and asked.id != scenario.id:
            lines += ["", f"The script runs the smallest failing combination, `{scenario.id}`."]
        lines += [""]
    if scenario.expectations:
        lines += ["## Expected by the scenario file", ""]
        lines += [f"- {describe_expectation(x)}: {x.reason}" for x in scenario.expectations] + [""]
    if scenario.known_bugs:
        lines += ["## Known bugs of the engine that can show here", ""]
        lines += [f"- {b.title()}: {describe_expectation(b)}: {b.reason}" for b in scenario.known_bugs] + [""]
    here = shlex.quote(str(script))
    lines += [
        "## Reproduce",
        "",
        "```",
        f"python {here}                                   # with this interpreter's {case['engine']}",
        f"python {here} --python /path/to/venv/bin/python  # the same check on another release",
        "```",
        "",
        f"It starts `{ref}` and `{failing}` in a process each (the failing one first: a crash needs no "
        "reference), compares the prompt logprobs (and greedy tokens) with the tolerance above, and exits "
        "0 when they agree (bug absent), 1 when they differ, crash or hang (bug present), 2 when the "
        "reference setting does not run (cannot judge). Only the engine's public API is used; the prompts "
        f"are token ids in the script. Through the harness: `{verdict.reproduce if verdict and verdict.reproduce else 'harness run ' + scenario.id}`.",
        "",
    ]
    lines += [
        "The engine arguments of each setting are in the script's `CASE` (the ones the harness passes), and it "
        "prints them as it starts each setting.",
        "",
        f"(written by `harness repro {scenario.id}` on {time.strftime('%Y-%m-%d %H:%M:%S')})",
        "",
    ]
    return "\n".join(lines)


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(project().root))
    except ValueError:
        return str(path)


def _versions_text(versions: Mapping[str, object]) -> str:
    if "unknown" in versions:
        return f"unknown: {versions['unknown']}"
    return ", ".join(f"{k} {v}" for k, v in versions.items() if k != "engine") or "not recorded"


def _axes_text(axes: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def _tolerance_text(case: JSONObject) -> str:
    t = case["tolerance"]
    return (
        f"\\|dlogprob\\| <= {t['logprob_atol']:g}, KL <= {t['kl_max']:g}, top-1 >= {t['top1_min']:g}, "
        f"near-tie <= {t['near_tie']:g} ({case['tolerance_name']})"
    )


def _workloads_text(case: JSONObject) -> str:
    parts = []
    for w in case["workloads"]:
        extra = f", {w['max_new_tokens']} new tokens" if w["kind"] == "greedy" else ""
        parts.append(f"`{w['name']}` ({w['kind']}: {len(w['prompts'])} prompts, top-{w['top_k']}{extra})")
    return "; ".join(parts)


def _symptom(verdict: Verdict | None, verdict_file: Path | None) -> list[str]:
    from harness.run.compare.localize import describe as describe_place

    if verdict is None:
        return [
            "No run of this scenario was found (give `--run RUN_DIR`, or `harness run` it first): the symptom "
            "is whatever the script prints."
        ]
    observed = verdict.observed or verdict.verdict
    lines = [
        f"Latest verdict ({verdict_file}): **{verdict.verdict}**"
        + (f" (observed: {observed})" if verdict.observed else "")
        + f": {verdict.reason}",
        "",
    ]
    if verdict.crash:
        c = verdict.crash
        lines += [
            f"- crashed: {c.get('rank')}",
            f"- exception: `{c.get('exception') or c.get('signal') or 'exit code ' + str(c.get('exitcode'))}`",
        ]
        if c.get("frame"):
            lines.append(f"- at: `{c['frame']}`")
        if c.get("wrapper"):
            lines.append(f"- surfaced as: `{c['wrapper']}`")
        tb = [ln for ln in (c.get("traceback") or "").splitlines() if ln.strip()]
        if tb:
            lines += ["", "```", *(["..."] if len(tb) > TRACEBACK_LINES else []) + tb[-TRACEBACK_LINES:], "```"]
    elif verdict.hang:
        lines += [f"- rank {r} stuck at {loc}" for r, loc in sorted(verdict.hang.get("stuck_at", {}).items())]
    for check in verdict.checks:
        if check.get("passed"):
            continue
        lines.append(f"- check `{check['name']}` ({check['kind']}): {check['summary']}")
        metrics = check.get("metrics") or {}
        if metrics:
            lines.append(
                "  - metrics: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
            )
        if check.get("first_divergence"):
            lines.append(f"  - first diverged: {check['first_divergence']}")
        if check.get("per_position"):
            worst = max(range(len(check["per_position"])), key=check["per_position"].__getitem__)
            lines.append(
                f"  - worst position: row {worst} of {len(check['per_position'])}, |dlogprob| {check['per_position'][worst]:.3g}"
            )
    if verdict.localization:
        lines.append(f"- {describe_place(verdict.localization)}")
    if verdict.tolerance:
        lines.append(f"- the harness's tolerance: {verdict.tolerance}")
    return lines
