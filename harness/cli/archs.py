"""`harness archs`: the census of the engine's model registry (harness/run/census.py), every
text-generating architecture in one state: swept, refused by the engine here, cannot be
built, buildable and not swept, or not tried."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli import suites
from harness.cli.options import add_history, add_report_dir, positive_seconds
from harness.contract import exit_codes
from harness.inputs.models.attempts import BUILD_TIMEOUT_S

if TYPE_CHECKING:
    from harness.engines import Engine
    from harness.inputs.scenarios.scenario import Scenario
    from harness.run.census import Census

HELP = "the census: every text-generating architecture of the engine's model registry, and what the harness does with it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", default="vllm", help="the engine whose model registry is counted (default: vllm)")
    p.add_argument(
        "--engine-env",
        metavar="ENGINE_ENV",
        help="another release's registry: an interpreter path or ENGINE==VERSION (installed once, as harness run --engine-env)",
    )
    p.add_argument("--json", action="store_true", help="print the census as JSON")
    p.add_argument("--markdown", action="store_true", help="print the table docs/ARCHITECTURES.md holds")
    p.add_argument(
        "--try-build",
        action="store_true",
        help="build the tiny checkpoint of every architecture no suite runs and none was tried for (cached: once per "
        "architecture, transformers and builder)",
    )
    p.add_argument(
        "--timeout-s",
        type=positive_seconds,
        default=None,
        help=f"with --try-build: the limit of one build in seconds (default: {BUILD_TIMEOUT_S:g})",
    )
    p.add_argument("--only", action="append", default=[], metavar="GLOB", help="only the architectures that match (repeatable)")
    p.add_argument("--all", action="store_true", help="list the architectures that are not text generators too")
    p.add_argument(
        "--out", type=Path, help="write the output to FILE; with --markdown, a FILE with the marked region gets only it rewritten"
    )
    add_report_dir(p)
    add_history(p, "<report dir>/history")


def run(args: argparse.Namespace) -> int:
    from harness.engines import EngineUnavailable
    from harness.inputs.engine_envs import EngineEnvError
    from harness.run import census

    try:
        found = _take(args)
    except (EngineUnavailable, EngineEnvError, LookupError) as exc:
        print(f"harness archs: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    if found is None:
        print(f"harness archs: engine '{args.engine}' has no model registry to take a census of", file=sys.stderr)
        return exit_codes.USAGE
    if args.json:
        output = census.as_json_text(found) + "\n"
    elif args.markdown:
        output = census.markdown(found, datetime.date.today().isoformat())
    else:
        output = census.text(found, show_all=args.all) + "\n"
    if args.out is None:
        sys.stdout.write(output)
        return exit_codes.OK
    return _write(args.out, output, region=args.markdown)


def _take(args: argparse.Namespace) -> Census | None:
    """The census, or None for an engine without a model registry."""
    from harness.contract.cpu import cpu_flags
    from harness.inputs import models
    from harness.inputs.models import attempts, tiny_vllm
    from harness.run import census
    from harness.run.report.history import history_dir, load_history

    engine, label = _engine(args)
    registry = engine.model_registry(say=_say)
    if registry is None:
        return None
    engine_python = str(engine.python()) if hasattr(engine, "python") else None

    def builder(arch: str) -> str:
        return models.builder_python(engine_python, arch=arch)

    def route(arch: str) -> bool:
        return tiny_vllm.builds(arch) or arch in (attempts.transformers_classes(builder(arch)) or ())

    timeout = args.timeout_s or BUILD_TIMEOUT_S
    scenarios = suites.load(args, "harness archs").scenarios
    flags = cpu_flags()
    given = census.CensusInputs(
        engine=args.engine,
        versions=engine.versions(),
        registry=registry,
        sweeps=_sweeps(scenarios, args.engine),
        left_out=_left_out(scenarios, args.engine),
        last_verdicts=census.latest_verdicts(load_history(history_dir(args.report_dir, args.history)), label),
        buildable_route=route,
        known_attempt=lambda arch: attempts.known_attempt(arch, builder(arch)),
        attempt=(lambda arch: attempts.attempt_build(arch, builder(arch), timeout)) if args.try_build else None,
        # the engine's own rule first (it names the machine fact: MLA without AMX), then a recorded load
        refusal=lambda directory: (
            engine.unsupported_reason({}, directory) or _load_refusal(directory, args.engine, engine.versions())
        ),
        machine={name: (None if flags is None else flag in flags) for name, flag in census.MACHINE_FLAGS.items()},
        only=args.only,
    )
    return census.take_census(given, say=_say)


def _load_refusal(directory: str, engine: str, versions: Mapping[str, str]) -> str | None:
    """The engine's words where a recorded load of this checkpoint failed (bench/vllm_only_builds.py
    loads each vLLM-only architecture's: a build its generic route makes may still not load)."""
    from harness.inputs.models import attempts
    from harness.run.census import ENGINE_NAMES

    version = versions.get(engine, "?")
    found = attempts.recorded_load(directory, version)
    if found is None or found[0]:
        return None
    return f"{ENGINE_NAMES.get(engine, engine)} {version} does not load its tiny checkpoint: {found[1]}"


def _engine(args: argparse.Namespace) -> tuple[Engine, str]:
    """The engine, in the environment --engine-env names, and that environment's label ("": the default)."""
    from harness.engines import get_engine
    from harness.inputs import engine_envs

    engine = get_engine(args.engine)
    if not args.engine_env:
        reason = engine.unavailable_reason()
        if reason:
            raise LookupError(f"engine '{args.engine}' is not installed here: {reason}")
        return engine, ""
    env = engine_envs.resolve(engine_envs.parse_engine_env(args.engine_env), args.engine, say=_say)
    engine.configure({"python": str(env.python)})
    return engine, env.label


def _sweeps(scenarios: list[Scenario], engine: str) -> dict[str, dict[str, list[str]]]:
    """arch -> suite -> the ids of its scenarios that run it, over the suites of `engine`."""
    from harness.run.census import scenario_arch

    found: dict[str, dict[str, list[str]]] = {}
    for scenario in scenarios:
        if scenario.suite.engine != engine:
            continue
        arch = scenario_arch(scenario)
        if arch:
            found.setdefault(arch, {}).setdefault(scenario.suite.suite, []).append(scenario.id)
    return found


def _write(out: Path, output: str, region: bool) -> int:
    from harness.run import census

    try:
        if region and out.exists():
            try:
                output = census.rewrite_region(out.read_text(), output)
            except ValueError as exc:
                print(f"harness archs: {out}: {exc}", file=sys.stderr)
                return exit_codes.USAGE
        out.write_text(output)
    except OSError as exc:
        print(f"harness archs: could not write {out}: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN
    print(f"harness archs: wrote {out}", file=sys.stderr)
    return exit_codes.OK


def _say(line: str) -> None:
    print(f"harness archs: {line}", file=sys.stderr, flush=True)


def _left_out(scenarios: list[Scenario], engine: str) -> dict[str, tuple[str, object]]:
    """arch -> (a registry suite of `engine` that leaves it out, why), from the suites' excludes."""
    found: dict[str, tuple[str, object]] = {}
    for scenario in scenarios:
        resolution = scenario.suite.registry
        if scenario.suite.engine == engine and resolution is not None:
            for arch, why in resolution.left_out.items():
                found.setdefault(arch, (scenario.suite.suite, why))
    return found
