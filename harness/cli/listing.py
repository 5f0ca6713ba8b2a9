"""`harness list`: the scenarios (by id, pattern, suite or gate), or the engines and models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli import suites
from harness.cli.options import add_selection
from harness.contract import exit_codes

if TYPE_CHECKING:
    from harness.contract.expectations import Expectation
    from harness.contract.jsonfile import JSONObject
    from harness.contract.known_bugs import KnownBug
    from harness.engines import EngineInfo
    from harness.inputs.scenarios.covering import Coverage, Trigger
    from harness.inputs.scenarios.scenario import Scenario
    from harness.inputs.scenarios.schema import SuiteFile

HELP = "list scenarios"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection(p)
    p.add_argument("--ids-only", action="store_true", help="print bare ids (for scripts and make)")
    p.add_argument(
        "--engines",
        action="store_true",
        help="list the engines instead: built in or from installed packages, whether each can run here, its axes",
    )
    p.add_argument("--models", action="store_true", help="list the zoo's models instead: built in or from installed packages")
    p.add_argument(
        "--coverage",
        action="store_true",
        help="per suite, the t-way combinations of axis values that what "
        "would run covers, and every one left out with the rule or exclude that forbids it",
    )
    p.add_argument(
        "--strength",
        type=_strength,
        default=None,
        metavar="T",
        help="with --coverage: combinations of T axis values (default: a covering suite's own; else 3)",
    )
    p.add_argument(
        "--lock",
        action="store_true",
        help="with --coverage: record each covering suite's rows in its "
        "lock file (<file>.lock) so that adding a value later keeps their ids",
    )


def _strength(text: str) -> int:
    """--strength: a positive number of axes (0 or less combines nothing)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of axes to combine: give an integer >= 1")
    return value


def _misused(args: argparse.Namespace) -> str | None:
    """Why --strength or --lock cannot do what they say here, or None."""
    for flag, given in (("--strength", args.strength is not None), ("--lock", args.lock)):
        if given and not args.coverage:
            return f"{flag} goes with --coverage (harness list --coverage {flag} ...)"
    return None


def run(args: argparse.Namespace) -> int:
    if args.engines or args.models:
        return _plugins(args)
    from harness.contract.expectations import describe as describe_expectation

    problem = _misused(args)
    if problem:
        print(f"harness list: {problem}", file=sys.stderr)
        return exit_codes.USAGE
    catalog = suites.load(args)
    chosen, broken = catalog.pick(args.ids, args.gate)
    if args.coverage:
        problem = _coverage_problem(chosen, args.strength, args.lock)
        if problem:
            print(f"harness list: {problem}", file=sys.stderr)
            return exit_codes.USAGE
        from harness.inputs.scenarios.schema import ScenarioError

        try:
            _coverage(chosen, args.strength, args.lock)
        except ScenarioError as exc:
            print(f"harness list: {exc}", file=sys.stderr)
            return exit_codes.USAGE
        return exit_codes.USAGE if broken else exit_codes.OK
    for s in chosen:
        if args.ids_only:
            print(s.id)
            continue
        notes = "".join(f"  (expected failure: {describe_expectation(x)}: {x.reason})" for x in s.expectations)
        notes += "".join(f"  ({b.title()}: {describe_expectation(b)})" for b in s.known_bugs)
        if s.expected_failure and not s.expectations:
            notes = f"  (expected failure: {s.expected_failure})"
        print(f"{s.id:40s} gates={','.join(sorted(s.gates)) or '-'}{notes}")
    # a broken suite the request could have listed: the listing is not the whole answer
    return exit_codes.USAGE if broken else exit_codes.OK


def _coverage_problem(chosen: list[Scenario], strength: int | None, lock: bool) -> str | None:
    """Why --coverage cannot answer for these suites as asked, or None: a --strength above a
    suite's axes would be labelled with a strength nothing counted; --lock with no covering
    suite would write nothing."""
    suites_chosen = list({s.suite.suite: s.suite for s in chosen}.values())
    for suite in suites_chosen:
        if strength is not None and strength > len(suite.matrix):
            return (
                f"--strength {strength}: suite {suite.suite} has {len(suite.matrix)} axes "
                f"({', '.join(suite.matrix)}): give 1 to {len(suite.matrix)}"
            )
    if lock and not any(suite.covering for suite in suites_chosen):
        names = ", ".join(suite.suite for suite in suites_chosen) or "none"
        return f"--lock: no chosen suite is a covering array (chosen: {names}); a full product's ids need no lock"
    return None


def _coverage(chosen: list[Scenario], strength: int | None, lock: bool) -> None:
    """`harness list --coverage`: what the chosen scenarios of each suite cover."""
    from harness.inputs.scenarios import covering
    from harness.inputs.scenarios.binding import engine_rules

    by_suite: dict[str, list[Scenario]] = {}
    for s in chosen:
        by_suite.setdefault(s.suite.suite, []).append(s)
    totals = [0, 0, 0, 0]  # scenarios, required, covered, missed
    for name, scenarios in by_suite.items():
        suite, source = scenarios[0].suite, scenarios[0].source
        t = strength or (suite.covering.strength if suite.covering else 3)
        groups = suite.covering.groups if suite.covering and strength is None else []
        asked = f"{t}-way" + "".join(f", {g.strength}-way among {', '.join(g.axes)}" for g in groups)
        kind = "covering array" if suite.covering else "full product"
        versions = _installed_versions(suite.engine, scenarios[0].engine_options)
        if lock and suite.covering is not None:
            scenarios = by_suite[name] = _lock(suite, source, scenarios, versions)
        rows = [s.settings for s in scenarios]
        for_bugs = sum(1 for s in scenarios if s.for_bugs)
        kind += f", {for_bugs} of them rows for known bugs" if for_bugs else ""
        asked_of = suite if strength is None else suite.model_copy(update={"covering": None})
        got = covering.coverage(asked_of, rows, engine_rules(suite.engine), t)
        print(
            f"{name}: {len(rows)} scenarios ({kind}); {asked}: {got.required} combinations, {got.covered} covered, "
            f"{got.required - got.feasible} excluded, {len(got.missed)} feasible and not run"
        )
        _on_release(asked_of, source, scenarios, t, versions)
        for why, combos in got.excluded.items():
            print(f"  excluded by {why} ({len(combos)}): {', '.join(combos[:6])}{' ...' if len(combos) > 6 else ''}")
        if got.missed:
            print(f"  not run ({len(got.missed)}): {', '.join(got.missed[:12])}{' ...' if len(got.missed) > 12 else ''}")
        if lock and suite.covering is None:
            print("  no lock: a full product's ids need none")
        for i, n in enumerate((len(rows), got.required, got.covered, len(got.missed))):
            totals[i] += n
    print(f"total: {totals[0]} scenarios, {totals[1]} combinations, {totals[2]} covered, {totals[3]} feasible and not run")
    if len(by_suite) > 1:
        _joint(by_suite, strength or 3)


def _joint(by_suite: dict[str, list[Scenario]], strength: int) -> None:
    """The suites together: every `strength`-way combination of axis values (the arch aside)
    in some suite's scenario, the installed engine's limits named (harness/inputs/scenarios/covering.py);
    then in the scenarios that run on the installed release (none a known bug ends early)."""
    from harness.inputs.scenarios.binding import coverage_together

    got = coverage_together(by_suite, strength)
    print(
        f"together: {sum(len(ss) for ss in by_suite.values())} scenarios; {strength}-way of axis values (arch aside): "
        f"{got.required} combinations, {got.covered} covered, {got.required - got.feasible} excluded, "
        f"{len(got.missed)} feasible and not run"
    )
    _excluded_lines(got)
    versions = {name: _installed_versions(ss[0].suite.engine, ss[0].engine_options) for name, ss in by_suite.items()}
    ended = frozenset(s.id for name, ss in by_suite.items() for s in ss if _ended_by(s, versions[name]))
    if not ended:
        return
    triggers = {name: _standing_triggers(ss[0].suite, ss[0].source, versions[name]) for name, ss in by_suite.items()}
    live = coverage_together(by_suite, strength, triggers, ended)
    excluded = {c for combos in got.excluded.values() for c in combos}
    bugs = {why: kept for why, combos in live.excluded.items() if (kept := [c for c in combos if c not in excluded])}
    on = ", ".join(dict.fromkeys(_release(ss[0].suite.engine, versions[name]) for name, ss in by_suite.items()))
    print(
        f"  on {on}: {live.covered} covered by scenarios that run there; {len(live.missed)} masked (only in scenarios "
        f"a declared crash or hang ends early there); {sum(len(c) for c in bugs.values())} where every setting meets a known bug"
    )
    for why, combos in bugs.items():
        print(f"  unreachable on {on}: {why} ({len(combos)}): {_some(combos)}")
    if live.missed:
        print(f"  masked ({len(live.missed)}): {_some(live.missed, 12)}")


def _excluded_lines(got: Coverage) -> None:
    for why, combos in got.excluded.items():
        print(f"  excluded by {why} ({len(combos)}): {_some(combos)}")
    if got.missed:
        print(f"  not run ({len(got.missed)}): {_some(got.missed, 12)}")


def _installed_versions(engine: str, options: JSONObject) -> dict[str, str] | None:
    """The installed engine's versions (which expectations apply), or None when it cannot be asked."""
    from harness.engines import get_engine

    try:
        found = get_engine(engine)
        found.configure(options)
        return found.versions()
    except Exception:  # noqa: BLE001 - not installed, or its probe failed: every expectation counts
        return None


def _ended_by(scenario: Scenario, versions: dict[str, str] | None) -> tuple[str, ...]:
    """What ends a scenario early on these versions (none known: on any): the known bugs of its
    engine and the expectations of its file that say it crashes or hangs. Its other axis values
    are not exercised while that bug stands."""
    from harness.contract.expectations import version_problem

    def stands(x: Expectation) -> bool:
        return x.verdict in ("crash", "hang") and (versions is None or version_problem(x, versions) is None)

    return tuple(
        [f"known bug {b.id}" for b in scenario.known_bugs if stands(b)]
        + [f"expected failure '{x.reason}'" for x in scenario.expectations if stands(x)]
    )


def _release(engine: str, versions: dict[str, str] | None) -> str:
    from harness.contract.expectations import engine_label

    return engine_label(versions) if versions else f"every {engine} release (its version could not be asked)"


def _standing_triggers(suite: SuiteFile, source: Path, versions: dict[str, str] | None) -> list[Trigger]:
    """The engine's known bugs that end a run early (crash, hang) on these versions, as the
    covering planner tests a setting against them."""
    from harness.contract.expectations import version_problem
    from harness.inputs.scenarios.binding import engine_known_bugs
    from harness.inputs.scenarios.scenario import bug_triggers

    bugs = engine_known_bugs(suite.engine, source)
    standing = [b for b in bugs if b.verdict in ("crash", "hang") and (versions is None or version_problem(b, versions) is None)]
    return bug_triggers(suite, source, tuple(standing))


def _on_release(
    suite: SuiteFile, source: Path, scenarios: list[Scenario], strength: int, versions: dict[str, str] | None
) -> None:
    """What the installed release runs of the suite's coverage: the combinations only rows a
    known bug ends early hold, masked (rows for known bugs can hold them) or unreachable there
    (every setting holding them meets a bug), each by its bug; and the rows for known bugs,
    needed here or not."""
    from harness.inputs.scenarios import covering
    from harness.inputs.scenarios.binding import engine_rules

    on = _release(suite.engine, versions)
    ended = [(s.settings, _ended_by(s, versions)) for s in scenarios]
    _bug_rows_lines(scenarios, versions, on)
    if not any(why for _, why in ended):
        return
    live = [row for row, why in ended if not why]
    got = covering.masked_coverage(
        suite, engine_rules(suite.engine), strength, live, [e for e in ended if e[1]], _standing_triggers(suite, source, versions)
    )
    masked, unreachable = (sum(len(v) for v in d.values()) for d in (got.masked, got.unreachable))
    print(
        f"  on {on}: {got.covered} covered by scenarios that run there; {masked} masked (only in scenarios a "
        f"declared crash or hang ends early there, a setting without it would hold them); {unreachable} where "
        "every setting meets a known bug (exercised once it is fixed)"
    )
    for why, combos in got.masked.items():
        print(f"  masked by {why} ({len(combos)}): {_some(combos)}")
    for why, combos in got.unreachable.items():
        print(f"  unreachable on {on}: {why} ({len(combos)}): {_some(combos)}")
    if masked and suite.covering is not None:
        print(f"  `harness list --coverage --lock {suite.suite}` adds rows for known bugs that hold them")


def _some(combos: list[str], shown: int = 6) -> str:
    return f"{', '.join(combos[:shown])}{' ...' if len(combos) > shown else ''}"


def _bug_rows_lines(scenarios: list[Scenario], versions: dict[str, str] | None, on: str) -> None:
    """The rows for known bugs, by their bugs: needed on this release while one of them stands
    here, else said not needed (kept: another release may need them)."""
    from harness.contract.expectations import version_problem

    if versions is None:
        return
    bugs = {b.id: b for s in scenarios for b in s.known_bugs}
    engine_bugs = _engine_bugs(scenarios)
    by_bugs: dict[tuple[str, ...], list[str]] = {}
    for s in scenarios:
        if s.for_bugs:
            by_bugs.setdefault(s.for_bugs, []).append(s.name)
    for for_bugs, names in by_bugs.items():
        found = [engine_bugs.get(b) or bugs.get(b) for b in for_bugs]
        standing = [b.id for b in found if b is not None and version_problem(b, versions) is None]
        said = ", ".join(for_bugs)
        if standing:
            print(f"  rows for known bug {said} on {on} ({len(names)}): {', '.join(names)}")
        else:
            print(f"  rows {', '.join(names)} are for known bug {said}, fixed in {on}: not needed")


def _engine_bugs(scenarios: list[Scenario]) -> dict[str, KnownBug]:
    from harness.inputs.scenarios.binding import engine_known_bugs

    first = scenarios[0]
    return {b.id: b for b in engine_known_bugs(first.suite.engine, first.source)}


def _lock(suite: SuiteFile, source: Path, scenarios: list[Scenario], versions: dict[str, str] | None) -> list[Scenario]:
    """--lock: the covering array's rows recorded, and rows for the known bugs of the installed
    release planned beside them (covering.py plan_bug_rows); the scenarios with the rows added."""
    from harness.inputs.scenarios import covering
    from harness.inputs.scenarios.binding import engine_rules
    from harness.inputs.scenarios.scenario import expand, planned_settings

    planned = planned_settings(suite, source)
    if versions is None:
        print(f"  no rows for known bugs planned: {suite.engine}'s installed version could not be asked")
        bug_rows = None
    else:
        triggers = _standing_triggers(suite, source, versions)
        bug_rows = covering.plan_bug_rows(
            suite, source, engine_rules(suite.engine), planned, triggers, _release(suite.engine, versions)
        )
    before = {json.dumps(b.row, sort_keys=True) for b in covering.locked_bug_rows(suite, source)}
    print(f"  rows recorded in {covering.write_lock(suite, source, planned, bug_rows)}")
    chosen = {s.id for s in scenarios}
    fresh = expand(suite, source)
    added = [s for s in fresh if s.for_bugs and json.dumps(s.settings, sort_keys=True) not in before]
    if added:
        named = ", ".join(f"{s.name} (for {' and '.join(s.for_bugs)})" for s in added)
        print(f"  rows added for known bugs ({len(added)}): {named}")
    return [s for s in fresh if s.id in chosen or s in added]


def _plugins(args: argparse.Namespace) -> int:
    """`harness list --engines` / `--models`: one line each, where it comes from and whether it can be used here."""
    if args.engines:
        from harness.engines import inventory

        for e in inventory():
            runs = f"  models: {e.models_text()}" if e.status in ("ready", "not ready") else ""
            where = f" [{e.path}]" if e.path and not e.origin.startswith("built-in") else ""
            detail = f"  -- {e.detail}" if e.detail else ""
            print(f"{e.name:12s} {e.status:13s} {e.origin}{where}{_axes_here(e)}{runs}{detail}")
    if args.models:
        from harness.engines import engines_text, inventory
        from harness.inputs import zoo
        from harness.inputs.models import model_type_of

        # once, not once per model: it loads every engine module
        engines = inventory()
        for name, origin, status, detail in zoo.inventory():
            kind = model_type_of(name) if status == "ready" else None
            said = f"  ({kind}; engines: {engines_text(kind, engines)})" if kind else ""
            print(f"{name:20s} {status:13s} {origin}{said}{'  ' + detail if detail else ''}")
    return exit_codes.OK


def _axes_here(info: EngineInfo) -> str:
    """`  axes: ...` as the engine installed here runs them (vLLM 0.32: sp=false, and why),
    or as it declares them where it cannot be asked (not ready here)."""
    from harness.engines import axes_text, get_engine

    if info.axes is None:
        return ""
    if info.status != "ready":
        return f"  axes: {axes_text(info.axes)} (declared; its installed version could not be asked)"
    try:
        axes, cut = get_engine(info.name).installed_axes(lambda line: print(f"harness list: {line}", file=sys.stderr, flush=True))
    except Exception as exc:  # noqa: BLE001 - a listing never dies of one engine
        return f"  axes: {axes_text(info.axes)} (declared; asking its installed version failed: {exc})"
    lacks = "".join(f"; no {axis}: {why.split(': ')[0]}" for axis, why in cut.items())
    return f"  axes: {axes_text(axes)}{f' ({lacks[2:]})' if lacks else ''}"
