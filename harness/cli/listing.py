"""`harness list`: the scenarios (by id, pattern, suite or gate), or the engines and models."""

from __future__ import annotations

import argparse
import sys

from harness.cli import suites
from harness.cli.options import add_selection
from harness.contract import exit_codes

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


def _misused(args) -> str | None:
    """Why --strength or --lock cannot do what they say here, or None."""
    for flag, given in (("--strength", args.strength is not None), ("--lock", args.lock)):
        if given and not args.coverage:
            return f"{flag} goes with --coverage (harness list --coverage {flag} ...)"
    return None


def run(args) -> int:
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


def _coverage_problem(chosen: list, strength: int | None, lock: bool) -> str | None:
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


def _coverage(chosen: list, strength: int | None, lock: bool) -> None:
    """`harness list --coverage`: what the chosen scenarios of each suite cover."""
    from harness.inputs.scenarios import covering
    from harness.inputs.scenarios.binding import engine_rules
    from harness.inputs.scenarios.scenario import planned_settings

    by_suite: dict[str, list] = {}
    for s in chosen:
        by_suite.setdefault(s.suite.suite, []).append(s)
    totals = [0, 0, 0, 0]  # scenarios, required, covered, missed
    for name, scenarios in by_suite.items():
        suite, source = scenarios[0].suite, scenarios[0].source
        t = strength or (suite.covering.strength if suite.covering else 3)
        groups = suite.covering.groups if suite.covering and strength is None else []
        asked = f"{t}-way" + "".join(f", {g.strength}-way among {', '.join(g.axes)}" for g in groups)
        kind = "covering array" if suite.covering else "full product"
        rows = [s.settings for s in scenarios]
        asked_of = suite if strength is None else suite.model_copy(update={"covering": None})
        got = covering.coverage(asked_of, rows, engine_rules(suite.engine), t)
        print(
            f"{name}: {len(rows)} scenarios ({kind}); {asked}: {got.required} combinations, {got.covered} covered, "
            f"{got.required - got.feasible} excluded, {len(got.missed)} feasible and not run"
        )
        versions = _installed_versions(suite.engine, scenarios[0].engine_options)
        live = [s.settings for s in scenarios if not _ends_early(s, versions)]
        # counted again only where a row ends early: a second count doubles the command's time
        masked = (
            got.covered - covering.coverage(asked_of, live, engine_rules(suite.engine), t).covered if len(live) < len(rows) else 0
        )
        if masked:
            on = f"{suite.engine} {versions.get(suite.engine, '')}".strip() if versions else "some engine version"
            print(
                f"  {masked} of them only in scenarios a declared crash or hang ends early on {on}: "
                "exercised once that bug is fixed"
            )
        for why, combos in got.excluded.items():
            print(f"  excluded by {why} ({len(combos)}): {', '.join(combos[:6])}{' ...' if len(combos) > 6 else ''}")
        if got.missed:
            print(f"  not run ({len(got.missed)}): {', '.join(got.missed[:12])}{' ...' if len(got.missed) > 12 else ''}")
        if lock and suite.covering is not None:
            print(f"  rows recorded in {covering.write_lock(suite, source, planned_settings(suite, source))}")
        elif lock:
            print("  no lock: a full product's ids need none")
        for i, n in enumerate((len(rows), got.required, got.covered, len(got.missed))):
            totals[i] += n
    print(f"total: {totals[0]} scenarios, {totals[1]} combinations, {totals[2]} covered, {totals[3]} feasible and not run")
    if len(by_suite) > 1:
        _joint(by_suite, strength or 3)


def _joint(by_suite: dict[str, list], strength: int) -> None:
    """The suites together: every `strength`-way combination of axis values (the arch aside)
    in some suite's scenario, the installed engine's limits named (harness/inputs/scenarios/covering.py)."""
    from harness.inputs.scenarios.binding import coverage_together

    got = coverage_together(by_suite, strength)
    print(
        f"together: {sum(len(ss) for ss in by_suite.values())} scenarios; {strength}-way of axis values (arch aside): "
        f"{got.required} combinations, {got.covered} covered, {got.required - got.feasible} excluded, "
        f"{len(got.missed)} feasible and not run"
    )
    for why, combos in got.excluded.items():
        print(f"  excluded by {why} ({len(combos)}): {', '.join(combos[:6])}{' ...' if len(combos) > 6 else ''}")
    if got.missed:
        print(f"  not run ({len(got.missed)}): {', '.join(got.missed[:12])}{' ...' if len(got.missed) > 12 else ''}")


def _installed_versions(engine: str, options: dict) -> dict | None:
    """The installed engine's versions (which expectations apply), or None when it cannot be asked."""
    from harness.engines import get_engine

    try:
        found = get_engine(engine)
        found.configure(options)
        return found.versions()
    except Exception:  # noqa: BLE001 - not installed, or its probe failed: every expectation counts
        return None


def _ends_early(scenario, versions: dict | None) -> bool:
    """A scenario its file or a known bug of its engine expects to crash or hang (on these
    versions): its other axis values are not exercised while that bug stands."""
    from harness.contract.expectations import version_problem

    return any(
        x.verdict in ("crash", "hang") and (versions is None or version_problem(x, versions) is None)
        for x in (*scenario.expectations, *scenario.known_bugs)
    )


def _plugins(args) -> int:
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


def _axes_here(info) -> str:
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
