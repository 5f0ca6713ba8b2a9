"""Covering arrays: a suite's matrix as the few settings that hold every t-way combination
of its axis values, instead of every combination.

A suite with `covering: {strength: 2}` runs settings in which every value of one axis
meets every value of every other axis somewhere (all pairs); `strength: 3` all triples.
`groups` asks more (or less) of some axes: `{axes: [tp, pp, compile, spec], strength: 3}`
with a suite strength of 2 holds every triple among those four and every pair of the
rest, the arch axis included, so that every arch meets every axis value.

No planned setting is a known refusal: the axes' rules and the engine's declared limits
(harness/contract/axes.py, Engine.rules) and the suite's `exclude:` entries are the
array's constraints, and a combination they forbid is reported as excluded, by which
rule (coverage()).

The rows come from covertable (pinned: its rows are scenario ids, history and
expectations), deterministic for one file. Rows recorded in the suite's lock file
(`<file>.lock`, written by `harness list --coverage --lock`) are kept first: adding a
value extends the set and keeps every existing id. Chosen over coverwise for its
per-group strengths (sub-models) and kept rows (presets) in plain Python, and for
fewer rows (the eleven axes: 11 pairs rows, 30 triples rows, against coverwise's 12 and
34; docs/ARCHITECTURES.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.contract import axes as axes_declarations
from harness.contract.axes import Rule, filled, is_one_of, same_value
from harness.contract.rundir import write_files, write_json
from harness.inputs.scenarios.schema import ARCH_AXIS, ScenarioError, SuiteFile

LOCK_SUFFIX = ".lock"


@dataclass(frozen=True)
class Constraint:
    """A rule or an `exclude:` entry, as a test of a (partial) setting."""

    # what a user reads: "sp requires tp>=2: <reason>", "exclude {tp: 2, pp: 2}"
    name: str
    axes: tuple[str, ...]  # the matrix axes it reads
    allows: Callable[[dict], bool]


def constraints(suite: SuiteFile, rules: tuple[Rule, ...]) -> list[Constraint]:
    """What a planned setting must keep: the rules that touch the matrix, then the excludes."""
    matrix = set(suite.matrix)
    found = []
    for rule in rules:
        # a rule whose feature is not an axis here never fires
        if rule.when.axis in matrix:
            found.append(Constraint(rule.message(), tuple(a for a in rule.axes if a in matrix), _keeps(rule)))
    for selector in suite.exclude:
        text = ", ".join(f"{k}: {_spell(v)}" for k, v in selector.items())
        found.append(Constraint(f"exclude {{{text}}}", tuple(selector), _outside(selector)))
    return found


def _keeps(rule: Rule) -> Callable[[dict], bool]:
    def allows(row: dict) -> bool:
        return not rule.broken(filled(row))

    return allows


def _outside(selector: dict) -> Callable[[dict], bool]:
    def allows(row: dict) -> bool:
        return not all(same_value(row[k], v) for k, v in selector.items())

    return allows


def lock_path(source: Path) -> Path:
    return source.with_name(source.name + LOCK_SUFFIX)


def locked_rows(suite: SuiteFile, source: Path) -> list[dict]:
    """The rows the lock file records that are still settings of this matrix."""
    path = lock_path(source)
    if not path.is_file():
        return []
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScenarioError(
            f"{path}: not a covering-array lock file ({exc}); delete it, then "
            f"`harness list --coverage --lock {suite.suite}` writes it again"
        ) from None
    axes, kept = list(suite.matrix), []
    for row in rows:
        if not isinstance(row, dict) or set(row) - set(axes):
            # an axis taken out of the matrix: its rows are other settings now
            continue
        # an axis added since: its golden value, which an id leaves out where it means "off"
        row = {a: row[a] if a in row else suite.golden.get(a) for a in axes}
        if all(is_one_of(row[a], suite.matrix[a]) for a in axes):
            kept.append(row)
    return kept


def write_lock(suite: SuiteFile, source: Path, rows: list[dict]) -> Path:
    path = lock_path(source)
    head = json.dumps(
        {"suite": suite.suite, "note": "rows of the covering array, kept so their ids stay (harness list --coverage --lock)"}
    )[:-1]
    text = head + ', "rows": [\n' + ",\n".join(" " + json.dumps(r) for r in rows) + "\n]}"  # a row a line: diffs read
    write_files({path: text + "\n"})
    return path


def covering_rows(suite: SuiteFile, source: Path, rules: tuple[Rule, ...]) -> list[dict]:
    """The settings of a `covering:` suite, in the matrix's order (as its full product would
    list them), each respecting every constraint. Kept on disk by what makes them
    (rows_key): covertable takes about a second a suite, and every command reads them."""
    assert suite.covering is not None
    kept_rows = locked_rows(suite, source)
    checks = constraints(suite, rules)
    kept_rows = [r for r in kept_rows if all(c.allows(r) for c in checks)]
    cache = _rows_cache(rows_key(suite, rules, kept_rows))
    try:
        rows = json.loads(cache.read_text())
        if isinstance(rows, list) and all(isinstance(r, dict) and list(r) == list(suite.matrix) for r in rows):
            return rows
    except (OSError, ValueError):  # not made yet, or damaged: made again
        pass
    rows = _make_rows(suite, checks, kept_rows)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json(cache, rows)  # whole or not at all: a command beside this one reads it
    except OSError:  # a read-only cache only costs the next command the same second
        pass
    return rows


# What the rows depend on beyond the suite's declarations: the constraint and rule code and
# the generator's version (pinned in pyproject.toml; read so a different install misses).
_CODE = (Path(__file__), Path(axes_declarations.__file__))


def rows_key(suite: SuiteFile, rules: tuple[Rule, ...], kept_rows: list[dict]) -> str:
    """A digest of everything the rows are made from: the matrix (its order too), the
    strengths, the excludes, the rules (as data), the kept rows, this code and covertable's version."""
    from importlib.metadata import version

    assert suite.covering is not None
    made_from = {
        "matrix": [[axis, values] for axis, values in suite.matrix.items()],
        "strength": suite.covering.strength,
        "groups": [[g.axes, g.strength] for g in suite.covering.groups],
        "exclude": suite.exclude,
        "rules": [repr(r) for r in rules],
        "kept": kept_rows,
        "code": [path.read_text() for path in _CODE],
        "covertable": version("covertable"),
    }
    return hashlib.sha256(json.dumps(made_from, sort_keys=True, default=repr).encode()).hexdigest()[:24]


def _rows_cache(key: str) -> Path:
    from harness.contract.roots import cache_dir

    return cache_dir("covering") / f"{key}.json"


def _make_rows(suite: SuiteFile, checks: list[Constraint], kept_rows: list[dict]) -> list[dict]:
    import covertable

    assert suite.covering is not None
    axes = list(suite.matrix)
    made = covertable.make(
        {a: list(suite.matrix[a]) for a in axes},
        strength=min(suite.covering.strength, len(axes)),
        sub_models=[{"fields": g.axes, "strength": g.strength} for g in suite.covering.groups],
        constraints=[{"operator": "fn", "requires": list(c.axes), "evaluate": c.allows} for c in checks],
        presets=kept_rows,
    )
    rows = [{a: row[a] for a in axes} for row in made]
    unique = {json.dumps(r, sort_keys=True): r for r in rows}  # a kept row may come back as itself
    return sorted(unique.values(), key=lambda r: tuple(_index(suite.matrix[a], r[a]) for a in axes))


def _index(values: list, value: object) -> int:
    return next(i for i, v in enumerate(values) if same_value(v, value))


# ---- what a set of settings covers -----------------------------------------------------


@dataclass
class Coverage:
    """The t-way combinations a suite asks for, and what became of each."""

    required: int
    covered: int
    # constraint -> the combinations it forbids ("tp=1 sp=true")
    excluded: dict[str, list[str]]
    # feasible and not run: a planner bug, or a full product with excludes
    missed: list[str]

    @property
    def feasible(self) -> int:
        return self.required - sum(len(v) for v in self.excluded.values())


def required_tuples(suite: SuiteFile, strength: int) -> Iterator[tuple[tuple[str, object], ...]]:
    """Every combination of axis values the suite's coverage asks for: `strength` of them
    across the axes (never a set of axes wholly inside one group), and each group's own."""
    axes = list(suite.matrix)
    groups = [(set(g.axes), g.strength) for g in suite.covering.groups] if suite.covering else []
    for keys in itertools.combinations(axes, min(strength, len(axes))):
        if not any(set(keys) <= fields for fields, _ in groups):
            yield from itertools.product(*([(k, v) for v in suite.matrix[k]] for k in keys))
    for fields, group_strength in groups:
        ordered = [a for a in axes if a in fields]
        for keys in itertools.combinations(ordered, min(group_strength, len(ordered))):
            yield from itertools.product(*([(k, v) for v in suite.matrix[k]] for k in keys))


def coverage(suite: SuiteFile, rows: list[dict], rules: tuple[Rule, ...], strength: int) -> Coverage:
    """Which of the required combinations some row holds, which a constraint forbids (named),
    and which are feasible but not run."""
    checks = constraints(suite, rules)
    held = {tuple(sorted((k, json.dumps(v)) for k, v in combo)) for row in rows for combo in _combos_of(row, suite, strength)}
    required = covered = 0
    excluded: dict[str, list[str]] = {}
    missed = []
    for combo in dict.fromkeys(required_tuples(suite, strength)):
        required += 1
        if tuple(sorted((k, json.dumps(v)) for k, v in combo)) in held:
            covered += 1
            continue
        blocker = _blocker(suite, dict(combo), checks)
        text = " ".join(f"{k}={_spell(v)}" for k, v in combo)
        if blocker is None:
            missed.append(text)
        else:
            excluded.setdefault(blocker, []).append(text)
    return Coverage(required, covered, excluded, missed)


def _combos_of(row: dict, suite: SuiteFile, strength: int) -> Iterator[tuple[tuple[str, object], ...]]:
    sizes = {min(strength, len(row))} | {min(g.strength, len(g.axes)) for g in (suite.covering.groups if suite.covering else [])}
    for size in sizes:
        yield from itertools.combinations(row.items(), size)


def _blocker(suite: SuiteFile, partial: dict, checks: list[Constraint]) -> str | None:
    """The constraint that forbids `partial` (a combination of axis values) in every
    setting, or None when some setting holds it."""
    for c in checks:  # forbidden by one constraint on its own axes
        if set(c.axes) <= set(partial) and not c.allows(partial):
            return c.name
    if _completes(suite, partial, checks):
        return None
    needed = [c.name for c in checks if _completes(suite, partial, [o for o in checks if o is not c])]
    return " with ".join(needed) if needed else "the rules and excludes together"


def _completes(suite: SuiteFile, partial: dict, checks: list[Constraint]) -> bool:
    """Whether some whole setting extends `partial` and keeps every constraint (depth first)."""
    free = [a for a in suite.matrix if a not in partial]
    if any(set(c.axes) <= set(partial) and not c.allows(partial) for c in checks):
        return False
    if not free:
        return True
    axis = free[0]
    return any(_completes(suite, {**partial, axis: v}, checks) for v in suite.matrix[axis])


def _spell(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def joint_coverage(
    parts: list[tuple[SuiteFile, list[dict], tuple[Rule, ...]]],
    strength: int,
    limits: dict[str, tuple[tuple, str]] | None = None,
    declared: dict[str, tuple] | None = None,
) -> Coverage:
    """Every `strength`-way combination of axis values (the arch aside) over several suites'
    rows together, as the suites split the axes between them (vllm-features the scheduler
    features, vllm-moe expert and data parallelism): an axis a suite leaves out is at its
    golden value there. A combination no row holds is excluded when no suite could hold
    it (the first suite's rule, or that no suite varies those axes together), else missed.
    `limits` (axis -> the values the installed engine runs, and why no others) excludes a
    combination with another value, held or not: it is planned, and not exercised there.
    `declared` (axis -> values) adds the engine's axes that no suite varies, so that their
    values count too (at their default in every row)."""
    axes = list(dict.fromkeys([a for suite, _, _ in parts for a in suite.matrix if a != ARCH_AXIS] + list(declared or {})))
    domain: dict[str, list] = {a: list((declared or {}).get(a, ())) for a in axes}
    for suite, _, _ in parts:
        for a in axes:
            for v in suite.matrix.get(a, [_fixed(suite, a)]):
                if not any(same_value(v, w) for w in domain[a]):
                    domain[a].append(v)
    held = {
        _key(combo)
        for suite, rows, _ in parts
        for row in rows
        for combo in itertools.combinations([(a, row.get(a, _fixed(suite, a))) for a in axes], strength)
    }
    checks = [(suite, constraints(suite, rules)) for suite, _, rules in parts]
    required = covered = 0
    excluded: dict[str, list[str]] = {}
    missed = []
    for keys in itertools.combinations(axes, min(strength, len(axes))):
        for combo in itertools.product(*([(k, v) for v in domain[k]] for k in keys)):
            required += 1
            cut = [f"{k}: {limits[k][1]}" for k, v in combo if limits and k in limits and not is_one_of(v, limits[k][0])]
            if cut:
                excluded.setdefault(f"the installed engine, {cut[0]}", []).append(" ".join(f"{k}={_spell(v)}" for k, v in combo))
                continue
            if _key(combo) in held:
                covered += 1
                continue
            blocker = _joint_blocker(dict(combo), checks)
            text = " ".join(f"{k}={_spell(v)}" for k, v in combo)
            (missed.append(text) if blocker is None else excluded.setdefault(blocker, []).append(text))
    return Coverage(required, covered, excluded, missed)


def _fixed(suite: SuiteFile, axis: str) -> object:
    """An axis's value in every setting of a suite that does not vary it."""
    return filled(dict(suite.golden)).get(axis)


def _key(combo) -> tuple:
    return tuple(sorted((k, json.dumps(v)) for k, v in combo))


def _joint_blocker(combo: dict, checks: list[tuple[SuiteFile, list[Constraint]]]) -> str | None:
    """None when some suite could run `combo`; else why the first suite that varies its
    axes cannot, or that no suite varies them together."""
    reasons = []
    for suite, suite_checks in checks:
        fixed_apart = [k for k, v in combo.items() if k not in suite.matrix and not same_value(v, _fixed(suite, k))]
        outside = [k for k, v in combo.items() if k in suite.matrix and not is_one_of(v, suite.matrix[k])]
        if fixed_apart or outside:
            continue
        blocker = _blocker(suite, combo, suite_checks)
        if blocker is None:
            return None
        reasons.append(f"{suite.suite}: {blocker}")
    return reasons[0] if reasons else "no suite varies these axes together"
