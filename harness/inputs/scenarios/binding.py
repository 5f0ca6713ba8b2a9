"""A suite bound to its engine: the axes, values and fault names of a scenario file
checked against what the engine declares (harness/engines).

Kept apart from the schema so that reading a scenario file needs no engine, and so
that one suite whose engine disagrees fails alone (loading.py collects it per file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.contract.axes import AXES, RULES, Rule, is_one_of, spell
from harness.inputs.scenarios.covering import Coverage, Trigger, joint_coverage
from harness.inputs.scenarios.schema import ARCH_AXIS, AXIS_NAME, AxisValue, ScenarioError, SuiteFile

if TYPE_CHECKING:
    from harness.contract.known_bugs import KnownBug


def _known_axes(engine: str | None) -> tuple[dict[str, tuple | None], str]:
    """(axis -> values the engine allows, None: any) and whose axes they are. An engine
    that cannot be loaded here is reported when its scenarios run; its axes must still
    be the axes of some engine."""
    from harness.engines import declared_axes, every_engines_axes

    axes = declared_axes(engine) if engine else None
    whose = f"engine '{engine}'" if axes is not None else "any engine"
    # the arch axis is the harness's own (it picks the model): every engine has it
    return {**(axes if axes is not None else every_engines_axes()), ARCH_AXIS: None}, whose


def _axis_value_problem(axis: str, value: AxisValue, allowed: tuple | None) -> str | None:
    """Why `value` cannot be a setting of `axis`: outside a declared axis's domain
    (harness/contract/axes.py), or, for an engine's own axis, not one of the values its
    engine lists. Asked of every file as it is read: a misspelt value would end `unsupported`,
    a green gate that ran nothing. A declared value this engine cannot run (the reference engine has no
    draft model) is not a typo: its scenarios end `unsupported` with the engine's reason."""
    if axis in AXES:
        return AXES[axis].problem(value)
    if allowed is not None and not is_one_of(value, allowed):
        return f"axis '{axis}' value {spell(value)}: {axis} takes {', '.join(spell(a) for a in allowed)}"
    return None


def _check_selector(selector: dict, engine: str | None, where: str) -> None:
    """Values of golden / exclude / expected-failure selectors; axes they name outside the
    matrix are reported by SuiteFile._axes_known, with the matrix's axes."""
    axes, _ = _known_axes(engine)
    for axis, value in selector.items():
        problem = _axis_value_problem(axis, value, axes[axis]) if axis in axes else None
        if problem:
            raise ValueError(f"{where}{problem}")


def binding_problems(suite: SuiteFile) -> list[str]:
    """What in `suite` its engine does not have, as `field: problem` lines (none: it binds)."""
    problems = matrix_problems(suite.engine, suite.matrix)
    selectors = [("golden", suite.golden)] + [(f"exclude.{i}", e) for i, e in enumerate(suite.exclude)]
    selectors += [(f"expected_failures.{i}.match", x.match) for i, x in enumerate(suite.expected_failures)]
    for where, selector in selectors:
        try:
            _check_selector(selector, suite.engine, "")
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    fault = _fault_problem(suite)
    if fault:
        problems.append(f"faults: {fault}")
    return problems


def matrix_problems(engine: object, matrix: object) -> list[str]:
    """The matrix's axes and values against the engine's. Also asked of a file's raw YAML
    before the schema: an unknown axis is the cause, a golden missing it the consequence."""
    if not isinstance(engine, str) or not isinstance(matrix, dict):
        return []  # the schema says what is wrong
    known, whose = _known_axes(engine)
    problems = []
    for axis, values in matrix.items():
        if not isinstance(axis, str) or not AXIS_NAME.fullmatch(axis) or not isinstance(values, list):
            continue  # the schema says so
        # a typo would make every scenario `unsupported`: a green suite
        if axis not in known:
            problems.append(f"matrix: axis '{axis}' is not an axis of {whose} (known axes: {', '.join(sorted(known))})")
            continue
        for v in values:
            problem = _axis_value_problem(axis, v, known[axis])
            if problem:
                problems.append(f"matrix: {problem}")
    return problems


def engine_rules(engine: str) -> tuple[Rule, ...]:
    """The rules a setting of `engine` keeps: the axes' own and the engine's limits (only
    the axes' own where the engine cannot be loaded here: its scenarios say why)."""
    from harness.engines import EngineUnavailable, get_engine

    try:
        return get_engine(engine).all_rules()
    except EngineUnavailable:
        return RULES


def engine_known_bugs(engine: str, source: Path) -> tuple[KnownBug, ...]:
    """The engine's known bugs (none where it cannot be loaded here: its scenarios say why).
    A known-bugs file that cannot be used makes the suite of `source` unusable, as its own
    error would: its scenarios cannot be judged as the engine's file says (loading.py sets it
    aside, an `error` wherever it is asked for), and every other engine's suites still run."""
    from harness.contract.known_bugs import KnownBugsError
    from harness.engines import EngineUnavailable, get_engine

    try:
        return get_engine(engine).known_bugs()
    except EngineUnavailable:
        return ()
    except KnownBugsError as exc:
        raise ScenarioError(f"{source}: engine '{engine}': its known-bugs file cannot be used: {exc}") from None


def _fault_problem(suite: SuiteFile) -> str | None:
    """Fault names and parameters, by the engine that owns them; the ranks they target are
    checked per scenario before launch (they depend on the settings)."""
    from harness.engines import EngineUnavailable, get_engine

    if not suite.faults:
        return None
    try:
        engine = get_engine(suite.engine)
    except EngineUnavailable:
        # its scenarios end as `error` saying why the engine is missing
        return None
    return engine.fault_problem(list(suite.faults))


def engine_declared_values(engine: str) -> dict[str, tuple]:
    """The engine's axes with a finite set of values (its switches and choices): the ones a
    joint coverage counts even where no suite varies them."""
    from harness.engines import declared_axes

    return {axis: tuple(values) for axis, values in (declared_axes(engine) or {}).items() if values is not None}


def engine_limits(engine: str, options: dict | None = None) -> dict[str, tuple[tuple, str]]:
    """axis -> (the values the installed engine runs, why no others); none where it cannot be asked."""
    from harness.engines import get_engine

    try:
        found = get_engine(engine)
        found.configure(options or {})
        axes, cut = found.installed_axes()
    except Exception:  # noqa: BLE001 - not installed, or its probe failed: the suites' own rules only
        return {}
    version = found.own_version(found.versions()) if cut else None
    on = f"{engine} {version}" if version else engine
    return {axis: (tuple(axes[axis] or ()), f"{on}: {why}") for axis, why in cut.items()}


def coverage_together(
    by_suite: dict[str, list],
    strength: int,
    triggers: dict[str, list[Trigger]] | None = None,
    ended: frozenset[str] = frozenset(),
) -> Coverage:
    """Several suites' scenarios (suite name -> its Scenarios) as one set: every
    `strength`-way combination of axis values in some suite's scenario (covering.py
    joint_coverage), with their engines' declared axes and installed limits. On a release: the
    scenarios but those `ended` early there (ids), `triggers` (suite name -> the known bugs that
    end them) excluding what only settings meeting a bug hold."""
    parts = []
    limits: dict[str, tuple[tuple, str]] = {}
    declared: dict[str, tuple] = {}
    for scenarios in by_suite.values():
        first = scenarios[0]
        rows = [s.settings for s in scenarios if s.id not in ended]
        parts.append((first.suite, rows, engine_rules(first.suite.engine)))
        limits |= engine_limits(first.suite.engine, first.engine_options)
        declared |= engine_declared_values(first.suite.engine)
    found = [(triggers or {}).get(name, []) for name in by_suite]
    return joint_coverage(parts, strength, limits, declared, found)
