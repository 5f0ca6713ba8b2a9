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
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.contract import axes as axes_declarations
from harness.contract.axes import Rule, filled, is_one_of, same_value
from harness.contract.known_bugs import BUG_ID
from harness.contract.rundir import write_files, write_json
from harness.contract.settings.variables import MAX_SCENARIOS
from harness.inputs.scenarios import registry
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
    found = rule_constraints(suite, rules)
    for selector in suite.exclude:
        text = ", ".join(f"{k}: {_spell(v)}" for k, v in selector.items())
        found.append(Constraint(f"exclude {{{text}}}", tuple(selector), _outside(selector)))
    return found


def rule_constraints(suite: SuiteFile, rules: tuple[Rule, ...]) -> list[Constraint]:
    """The rules that touch the matrix (a rule whose feature is not an axis here never fires)."""
    matrix = set(suite.matrix)
    return [Constraint(r.message(), tuple(a for a in r.axes if a in matrix), _keeps(r)) for r in rules if r.when.axis in matrix]


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


def _read_lock(suite: SuiteFile, source: Path) -> dict:
    """The lock file's object ({} where there is none); a file no `--lock` could have written is refused."""
    path = lock_path(source)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        data["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScenarioError(f"{path}: not a covering-array lock file ({exc}); {_mend(suite)}") from None
    return data


def _mend(suite: SuiteFile) -> str:
    return f"delete it, then `harness list --coverage --lock {suite.suite}` writes it again"


def locked_rows(suite: SuiteFile, source: Path) -> list[dict]:
    """The rows the lock file records that are still settings of this matrix. A row of an
    axis or value taken out of the matrix is another setting now, and left out; a row no
    `harness list --coverage --lock` could have written (not an object, a value no axis
    takes) is refused, never dropped: its id would vanish without a word."""
    rows = _read_lock(suite, source).get("rows", [])
    path = lock_path(source)
    if not isinstance(rows, list):
        raise ScenarioError(f"{path}: rows is {type(rows).__name__}, not a list of settings ({{axis: value}}); {_mend(suite)}")
    settings = (_lock_setting(suite, path, f"rows[{i}]", row) for i, row in enumerate(rows))
    return [s for s in settings if s is not None]


def _lock_setting(suite: SuiteFile, path: Path, where: str, row: object) -> dict | None:
    """A lock row as a setting of this matrix (an axis added since at its golden value), None
    where it is another setting now (an axis or value taken out); refused where it is no setting."""
    problem = _lock_row_problem(row)
    if problem:
        raise ScenarioError(f"{path}: {where}: {problem}; {_mend(suite)}")
    assert isinstance(row, dict)
    axes = list(suite.matrix)
    if set(row) - set(axes):
        # an axis taken out of the matrix: its rows are other settings now
        return None
    # an axis added since: its golden value, which an id leaves out where it means "off"
    setting = {a: row[a] if a in row else suite.golden.get(a) for a in axes}
    return setting if all(is_one_of(setting[a], suite.matrix[a]) for a in axes) else None


def _lock_row_problem(row: object) -> str | None:
    """Why `row` is no setting at all (of any matrix), or None."""
    if not isinstance(row, dict):
        return f"{json.dumps(row)} is not a setting ({{axis: value}})"
    for axis, value in row.items():
        declared = axes_declarations.AXES.get(axis)
        problem = declared.problem(value) if declared else None
        if not isinstance(value, (bool, int, str)) or problem:
            allowed = declared.domain_text() if declared else f"{axis} takes true, false, an integer or a name"
            return f"{json.dumps(value)} is not a value of {axis} ({allowed})"
    return None


@dataclass(frozen=True)
class BugRow:
    """A row added for known bugs (plan_bug_rows): it holds combinations that the suite's own
    rows hold only where those bugs end the run early, without the bugs' triggers."""

    row: dict
    bugs: tuple[str, ...]  # the known bugs whose masked combinations it holds
    planned_on: str  # the release it was planned on: "vllm 0.32.0"


def locked_bug_rows(suite: SuiteFile, source: Path) -> list[BugRow]:
    """The lock's rows for known bugs (its `bug_rows` section) that are still settings of this
    matrix; an entry no `--lock` could have written is refused, never dropped."""
    entries = _read_lock(suite, source).get("bug_rows", [])
    path = lock_path(source)
    if not isinstance(entries, list):
        raise ScenarioError(f"{path}: bug_rows is {type(entries).__name__}, not a list of rows for known bugs; {_mend(suite)}")
    found = []
    for i, entry in enumerate(entries):
        where = f"bug_rows[{i}]"
        bugs = entry.get("for") if isinstance(entry, dict) else None
        if not (isinstance(bugs, list) and bugs and all(isinstance(b, str) and BUG_ID.match(b) for b in bugs)):
            raise ScenarioError(f"{path}: {where}: `for` is not a list of known bug ids; {_mend(suite)}")
        if not isinstance(entry.get("planned_on"), str):
            raise ScenarioError(f'{path}: {where}: `planned_on` is not a release ("vllm 0.32.0"); {_mend(suite)}')
        setting = _lock_setting(suite, path, f"{where}.row", entry.get("row"))
        if setting is not None:
            found.append(BugRow(setting, tuple(bugs), entry["planned_on"]))
    return found


def write_lock(suite: SuiteFile, source: Path, rows: list[dict], bug_rows: list[BugRow] | None = None) -> Path:
    """The lock file: the covering array's rows, then the rows for known bugs (None: those the
    lock records already, kept: a release where their bugs are fixed does not drop them)."""
    path = lock_path(source)
    if bug_rows is None:
        bug_rows = locked_bug_rows(suite, source)
    head = json.dumps(
        {"suite": suite.suite, "note": "rows of the covering array, kept so their ids stay (harness list --coverage --lock)"}
    )[:-1]
    text = head + ', "rows": [\n' + ",\n".join(" " + json.dumps(r) for r in rows) + "\n]"  # a row a line: diffs read
    record = _registry_record(suite, source)
    if record:
        text += f',\n"{registry.LOCK_KEY}": ' + json.dumps(record, indent=1)
    if bug_rows:
        lines = [json.dumps({"for": list(b.bugs), "planned_on": b.planned_on, "row": b.row}) for b in bug_rows]
        text += ',\n"bug_rows": [\n' + ",\n".join(" " + line for line in lines) + "\n]"
    write_files({path: text + "}\n"})
    return path


def _registry_record(suite: SuiteFile, source: Path) -> dict | None:
    """The archs a registry suite took, as the lock keeps them: those asked of the installed
    engine now, else what the lock recorded (a machine without the engine keeps them)."""
    if suite.registry and suite.registry.live:
        return suite.registry.lock_record()
    return registry.locked_archs(source)


def covering_rows(suite: SuiteFile, source: Path, rules: tuple[Rule, ...]) -> list[dict]:
    """The settings of a `covering:` suite, in the matrix's order (as its full product would
    list them), each respecting every constraint. Kept on disk by what makes them
    (rows_key): covertable takes about a second a suite, and every command reads them."""
    assert suite.covering is not None
    check_size(suite, source)
    kept_rows = locked_rows(suite, source)
    checks = constraints(suite, rules)
    kept_rows = [r for r in kept_rows if all(c.allows(r) for c in checks)]
    key = rows_key(suite, rules, kept_rows)
    cache = _rows_cache(key)
    rows = _cached_rows(cache, key, suite, checks)
    if rows is not None:
        return rows
    rows = _make_rows(suite, source, checks, kept_rows)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all: a command beside this one reads it
        write_json(cache, {"key": key, "digest": _digest(key, rows), "rows": rows})
    except OSError:  # a read-only cache only costs the next command the same second
        pass
    return rows


def _digest(key: str, rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps([key, rows], sort_keys=True).encode()).hexdigest()


def _cached_rows(cache: Path, key: str, suite: SuiteFile, checks: list[Constraint]) -> list[dict] | None:
    """The rows kept in `cache` when they are the ones made for `key`, unedited (their digest)
    and settings of this matrix that keep every constraint; else None (made again)."""
    try:
        kept = json.loads(cache.read_text())
        rows = kept["rows"]
        if kept["key"] != key or kept["digest"] != _digest(key, rows):
            return None
    except (OSError, ValueError, KeyError, TypeError):  # not made yet, damaged or edited: made again
        return None
    axes = list(suite.matrix)
    if not isinstance(rows, list):
        return None
    for row in rows:
        if not isinstance(row, dict) or list(row) != axes:
            return None
        if not all(is_one_of(row[a], suite.matrix[a]) for a in axes) or not all(c.allows(row) for c in checks):
            return None
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


# The most a covering array may ask of the planner: the combinations it must hold times
# the fewest rows that can hold them. covertable's greedy pass scans the combinations
# still open for every row it adds, so its time grows with this product: 1.6 million
# (five axes of 20 values, strength 2: 4,100 pairs, 486 rows) takes 2.5 s here, 8.2
# million (30 values) 7 s.
MOST_PLANNING_WORK = 1_500_000
# The most constraint checks the planner may make (its completion of a row is a search
# that constraints can make long): about 2 s of them.
MOST_CONSTRAINT_CHECKS = 300_000


def _asked(suite: SuiteFile, strength: int) -> list[tuple[int, list[int]]]:
    """(t, the sizes of the axes it combines) for the suite's own t-way and each group's."""
    groups = suite.covering.groups if suite.covering else []
    sizes = {a: len(v) for a, v in suite.matrix.items()}
    asked = [(min(strength, len(sizes)), list(sizes.values()))]
    return asked + [(min(g.strength, len(g.axes)), [sizes[a] for a in g.axes]) for g in groups]


def combination_count(suite: SuiteFile, strength: int) -> int:
    """How many combinations the coverage asks for, at most (a set of axes within a group
    counted twice), from the axes' lengths: none is made."""
    return sum(_elementary(t, sizes) for t, sizes in _asked(suite, strength))


def _elementary(t: int, sizes: list[int]) -> int:
    """The sum over every t of `sizes` of their product (the combinations of t axes' values)."""
    sums = [1] + [0] * t
    for size in sizes:
        for k in range(t, 0, -1):
            sums[k] += sums[k - 1] * size
    return sums[t]


def fewest_rows(suite: SuiteFile, strength: int) -> int:
    """The fewest settings that can hold every combination asked: the values of the t
    largest axes of one ask combined."""
    return max(math.prod(sorted(sizes)[len(sizes) - t :]) for t, sizes in _asked(suite, strength))


def check_size(suite: SuiteFile, source: Path) -> None:
    """A covering array is refused from its axes' lengths, before one row is made, where it
    needs more scenarios than a full product may have or more work than a command can wait for."""
    assert suite.covering is not None
    strength = suite.covering.strength
    limit = MAX_SCENARIOS.integer() or 1
    least, asked = fewest_rows(suite, strength), combination_count(suite, strength)
    if least > limit:
        raise ScenarioError(
            f"{source}: covering: its combinations need at least {least} scenarios (the values of its "
            f"largest axes together), more than {limit} (${MAX_SCENARIOS.name} raises the limit): "
            "split the suite, lower covering.strength or give the largest axes fewer values"
        )
    if asked * least > MOST_PLANNING_WORK:
        raise ScenarioError(
            f"{source}: covering: {asked} combinations in at least {least} scenarios is more than the "
            f"planner makes in seconds ({MOST_PLANNING_WORK} combinations x scenarios at most): "
            "split the suite, lower covering.strength or give the largest axes fewer values"
        )


class _TooLong(Exception):
    """The planner's search ran past its bound."""


def _make_rows(suite: SuiteFile, source: Path, checks: list[Constraint], kept_rows: list[dict]) -> list[dict]:
    import covertable

    assert suite.covering is not None
    axes = list(suite.matrix)
    limit = MAX_SCENARIOS.integer() or 1
    counted = [0]

    def bounded(check: Constraint) -> Callable[[dict], bool]:
        def allows(row: dict) -> bool:
            counted[0] += 1
            if counted[0] > MOST_CONSTRAINT_CHECKS:
                raise _TooLong
            return check.allows(row)

        return allows

    made = []
    try:
        for row in covertable.make_async(
            {a: list(suite.matrix[a]) for a in axes},
            strength=min(suite.covering.strength, len(axes)),
            sub_models=[{"fields": g.axes, "strength": g.strength} for g in suite.covering.groups],
            constraints=[{"operator": "fn", "requires": list(c.axes), "evaluate": bounded(c)} for c in checks],
            presets=kept_rows,
        ):
            made.append(row)
            if len(made) > limit:
                raise ScenarioError(
                    f"{source}: covering: the array needs more than {limit} scenarios "
                    f"(${MAX_SCENARIOS.name} raises the limit): split the suite or lower covering.strength"
                )
    except _TooLong:
        raise ScenarioError(
            f"{source}: covering: the rules and exclude: entries leave so few settings that planning "
            f"took more than {MOST_CONSTRAINT_CHECKS} constraint checks: split the suite or use fewer excludes"
        ) from None
    rows = [{a: row[a] for a in axes} for row in made]
    unique = {json.dumps(r, sort_keys=True): r for r in rows}  # a kept row may come back as itself
    return sorted(unique.values(), key=lambda r: tuple(_index(suite.matrix[a], r[a]) for a in axes))


def _index(values: list, value: object) -> int:
    return next(i for i, v in enumerate(values) if same_value(v, value))


# ---- rows for known bugs ----------------------------------------------------------------


@dataclass(frozen=True)
class Trigger:
    """Where a known bug of the installed release ends a run early (a crash or hang), as a test
    of a setting of this matrix: its `where`, the arch's model class included (scenario.py
    bug_triggers)."""

    bug: str
    axes: tuple[str, ...]  # the matrix axes its `where` reads
    shows_in: Callable[[dict], bool]

    def constraint(self) -> Constraint:
        shows_in = self.shows_in
        return Constraint(f"known bug {self.bug}", self.axes, lambda row: not shows_in(row))


def plan_bug_rows(
    suite: SuiteFile, source: Path, rules: tuple[Rule, ...], rows: list[dict], triggers: list[Trigger], planned_on: str
) -> list[BugRow]:
    """The rows for known bugs a lock records: those it records already (first: their ids stay,
    whichever release they were planned on), then rows that hold every combination the suite's
    `rows` hold only where one of `triggers` ends the run, each outside every trigger (the
    triggers are excludes of these rows only). The same covertable pass as the array's, the
    rows that run its presets: deterministic, and no row more than the masked combinations ask."""
    assert suite.covering is not None
    kept = locked_bug_rows(suite, source)
    triggers = [t for t in triggers if t.axes]  # a bug that reads no axis ends every row or none
    checks = constraints(suite, rules) + [t.constraint() for t in triggers]
    live = [r for r in rows if all(c.allows(r) for c in checks)]
    ended = [(r, tuple(t.bug for t in triggers if t.shows_in(r))) for r in rows]
    masked = _masked_bugs(suite, suite.covering.strength, live, [(r, bugs) for r, bugs in ended if bugs])
    if not masked:
        return kept
    presets = live + [b.row for b in kept if all(c.allows(b.row) for c in checks)]
    made = _make_rows(suite, source, checks, presets)
    known = {_row_key(r) for r in presets} | {_row_key(b.row) for b in kept}
    added = []
    for row in made:
        if _row_key(row) in known:
            continue
        bugs = sorted({bug for combo in _combos_of(row, suite, suite.covering.strength) for bug in masked.get(_key(combo), ())})
        if bugs:  # a row that holds nothing masked is not for a bug (none expected: presets hold the rest)
            added.append(BugRow(row, tuple(bugs), planned_on))
    return kept + added


def _row_key(row: dict) -> tuple:
    return _key(row.items())


def _masked_bugs(suite: SuiteFile, strength: int, live: list[dict], ended: list[tuple[dict, tuple[str, ...]]]) -> dict:
    """combination key -> what ends the rows that hold it, for every required combination that
    rows ending early hold and no row in `live` does."""
    held_live = {_key(combo) for row in live for combo in _combos_of(row, suite, strength)}
    required = {_key(combo) for combo in required_tuples(suite, strength)}
    masked: dict[tuple, set[str]] = {}
    for row, why in ended:
        for combo in _combos_of(row, suite, strength):
            key = _key(combo)
            if key in required and key not in held_live:
                masked.setdefault(key, set()).update(why)
    return masked


@dataclass
class Masked:
    """What a release's known bugs leave of a suite's coverage (masked_coverage)."""

    # required combinations a row that runs there holds
    covered: int
    # the bugs that end the rows holding them -> combinations a setting outside every
    # trigger would hold (rows for known bugs can; `harness list --coverage --lock` adds them)
    masked: dict[str, list[str]]
    # why -> combinations every setting of which meets a known bug: untested there until it is fixed
    unreachable: dict[str, list[str]]


def masked_coverage(
    suite: SuiteFile,
    rules: tuple[Rule, ...],
    strength: int,
    live: list[dict],
    ended: list[tuple[dict, tuple[str, ...]]],
    triggers: list[Trigger],
) -> Masked:
    """The required combinations a row that runs on the release holds (`live`), and of those
    only `ended` rows hold (row, what ends it early there): masked where a setting outside
    every trigger holds them, else unreachable there, named by the bug (with the rules and
    excludes it needs)."""
    refused = rule_constraints(suite, rules)
    runnable = [row for row in live if all(c.allows(row) for c in refused)]
    masked_by = _masked_bugs(suite, strength, runnable, [(r, why) for r, why in ended if all(c.allows(r) for c in refused)])
    held_live = {_key(combo) for row in runnable for combo in _combos_of(row, suite, strength)}
    search = _Search(suite, constraints(suite, rules) + [t.constraint() for t in triggers if t.axes])
    got = Masked(0, {}, {})
    for combo in dict.fromkeys(required_tuples(suite, strength)):
        key = _key(combo)
        if key in held_live:
            got.covered += 1
        elif key in masked_by:
            text = " ".join(f"{k}={_spell(v)}" for k, v in combo)
            blocker = search.blocker(dict(combo))
            if blocker is None:
                got.masked.setdefault(", ".join(sorted(masked_by[key])), []).append(text)
            else:
                got.unreachable.setdefault(blocker, []).append(text)
    return got


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


# The most a coverage count may enumerate (the combinations asked, and each row's own;
# 300,000 take about 4 s and 100 MB here), and the most constraint checks its
# feasibility searches may make (about 2 s of them): a count bigger than these is refused
# (a --strength a suite's size cannot answer, hundreds of excludes entangled), never left
# to run for minutes.
MOST_COUNTED = 300_000
MOST_SEARCH_CHECKS = 1_000_000
# A combination that constraints forbid only together is said to be excluded by those
# without which it is not, when there are at most this many to try; else by them all.
MOST_BLAMED = 16


def coverage(suite: SuiteFile, rows: list[dict], rules: tuple[Rule, ...], strength: int) -> Coverage:
    """Which of the required combinations some row holds, which a constraint forbids (named),
    and which are feasible but not run. A row that breaks a rule covers nothing: it is
    refused (unsupported) when run."""
    checks = constraints(suite, rules)
    per_row = sum(math.comb(len(suite.matrix), t) for t, _ in _asked(suite, strength))
    counted = combination_count(suite, strength) + len(rows) * per_row
    if counted > MOST_COUNTED:
        raise ScenarioError(
            f"suite {suite.suite}: counting its {strength}-way coverage means {counted} combinations, more than "
            f"{MOST_COUNTED}: ask a lower strength (--strength) or fewer suites"
        )
    # excludes are never planned; a rule's setting is, in a full product (refused when run)
    refused = rule_constraints(suite, rules)
    runnable = [row for row in rows if all(c.allows(row) for c in refused)]
    held = {_key(combo) for row in runnable for combo in _combos_of(row, suite, strength)}
    search = _Search(suite, checks)
    required = covered = 0
    excluded: dict[str, list[str]] = {}
    missed = []
    for combo in dict.fromkeys(required_tuples(suite, strength)):
        required += 1
        if _key(combo) in held:
            covered += 1
            continue
        blocker = search.blocker(dict(combo))
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


class _Search:
    """Whether a combination of axis values extends to a whole setting that keeps every
    constraint. Only the axes some constraint reads are searched (any value of another
    will do), the one with fewest values left first; each value assigned narrows the other
    axes to the values that keep the constraints it completes (forward checking), so that
    a combination two constraints forbid together fails at once instead of after every
    setting of the axes between them. Answers are remembered per assignment of the
    constrained axes; the constraint checks of one count are bounded (MOST_SEARCH_CHECKS)."""

    def __init__(self, suite: SuiteFile, checks: list[Constraint]):
        self.suite = suite
        self.checks = checks
        self.reading: dict[str, list[Constraint]] = {}
        for c in checks:
            for axis in c.axes:
                self.reading.setdefault(axis, []).append(c)
        self.known: dict[tuple, bool] = {}
        self.blamed: dict[tuple, str | None] = {}
        self.made = 0

    def blocker(self, partial: dict) -> str | None:
        """The constraint (or constraints together) that forbid `partial` in every setting,
        or None when some setting holds it; the same for every combination that sets the
        axes the constraints read alike."""
        assigned = {a: v for a, v in partial.items() if a in self.reading}
        memo = _key(assigned.items())
        if memo not in self.blamed:
            self.blamed[memo] = self._blame(assigned)
        return self.blamed[memo]

    def _blame(self, partial: dict) -> str | None:
        for c in self.checks:  # forbidden by one constraint on its own axes
            if set(c.axes) <= set(partial) and not self._allows(c, partial):
                return c.name
        if self.completes(partial, None):
            return None
        together = "the rules and excludes together"
        if len(self.checks) > MOST_BLAMED:
            return together
        needed = [c.name for c in self.checks if self.completes(partial, c)]
        return " with ".join(needed) if needed else together

    def completes(self, partial: dict, left_out: Constraint | None) -> bool:
        """Whether some whole setting extends `partial` and keeps every constraint but `left_out`."""
        assigned = {a: v for a, v in partial.items() if a in self.reading}
        memo = (id(left_out), _key(assigned.items()))
        if memo not in self.known:
            self.known[memo] = self._search(assigned, left_out)
        return self.known[memo]

    def _search(self, assigned: dict, left_out: Constraint | None) -> bool:
        if any(c is not left_out and set(c.axes) <= set(assigned) and not self._allows(c, assigned) for c in self.checks):
            return False
        free = {a: list(self.suite.matrix[a]) for a in self.suite.matrix if a in self.reading and a not in assigned}
        domains = self._narrow(assigned, free, left_out)
        return domains is not None and self._extend(assigned, domains, left_out)

    def _extend(self, assigned: dict, domains: dict[str, list], left_out: Constraint | None) -> bool:
        if not domains:
            return True
        axis = min(domains, key=lambda a: len(domains[a]))
        rest = {a: values for a, values in domains.items() if a != axis}
        for value in domains[axis]:
            trial = {**assigned, axis: value}
            narrowed = self._narrow(trial, rest, left_out)
            if narrowed is not None and self._extend(trial, narrowed, left_out):
                return True
        return False

    def _narrow(self, assigned: dict, domains: dict[str, list], left_out: Constraint | None) -> dict[str, list] | None:
        """Each free axis's values that keep every constraint they complete; None when an axis has none left."""
        narrowed = {}
        for axis, values in domains.items():
            self._spend(len(self.reading[axis]))  # the scan below, not only the checks it makes
            completing = [c for c in self.reading[axis] if c is not left_out and all(a == axis or a in assigned for a in c.axes)]
            kept = [v for v in values if all(self._allows(c, {**assigned, axis: v}) for c in completing)]
            if not kept:
                return None
            narrowed[axis] = kept
        return narrowed

    def _allows(self, check: Constraint, setting: dict) -> bool:
        self._spend(1)
        return check.allows(setting)

    def _spend(self, checks: int) -> None:
        self.made += checks
        if self.made > MOST_SEARCH_CHECKS:
            raise ScenarioError(
                f"suite {self.suite.suite}: its rules and exclude: entries are too entangled to count its "
                f"coverage in {MOST_SEARCH_CHECKS} constraint checks: split the suite or use fewer excludes"
            )


def _spell(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def joint_coverage(
    parts: list[tuple[SuiteFile, list[dict], tuple[Rule, ...]]],
    strength: int,
    limits: dict[str, tuple[tuple, str]] | None = None,
    declared: dict[str, tuple] | None = None,
    triggers: list[list[Trigger]] | None = None,
) -> Coverage:
    """Every `strength`-way combination of axis values (the arch aside) over several suites'
    rows together, as the suites split the axes between them (vllm-features the scheduler
    features, vllm-moe expert and data parallelism): an axis a suite leaves out is at its
    golden value there. A combination no row holds is excluded when no suite could hold
    it (the first suite's rule, or that no suite varies those axes together), else missed.
    `limits` (axis -> the values the installed engine runs, and why no others) excludes a
    combination with another value, held or not: it is planned, and not exercised there.
    `declared` (axis -> values) adds the engine's axes that no suite varies, so that their
    values count too (at their default in every row). `triggers` (per part: the known bugs that
    end its rows early on a release, its rows those that run there) excludes a combination
    that only settings meeting a bug hold, by that bug."""
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
    bugs = triggers or [[] for _ in parts]
    searches = [
        (suite, _Search(suite, constraints(suite, rules) + [t.constraint() for t in found if t.axes]))
        for (suite, _, rules), found in zip(parts, bugs)
    ]
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
            blocker = _joint_blocker(dict(combo), searches)
            text = " ".join(f"{k}={_spell(v)}" for k, v in combo)
            (missed.append(text) if blocker is None else excluded.setdefault(blocker, []).append(text))
    return Coverage(required, covered, excluded, missed)


def _fixed(suite: SuiteFile, axis: str) -> object:
    """An axis's value in every setting of a suite that does not vary it."""
    return filled(dict(suite.golden)).get(axis)


def _key(combo) -> tuple:
    # the type too: True and 1 are one dict key, and different values of an axis
    return tuple(sorted((k, type(v).__name__, v) for k, v in combo))


def _joint_blocker(combo: dict, searches: list[tuple[SuiteFile, _Search]]) -> str | None:
    """None when some suite could run `combo`; else why the first suite that varies its
    axes cannot, or that no suite varies them together."""
    reasons = []
    for suite, search in searches:
        fixed_apart = [k for k, v in combo.items() if k not in suite.matrix and not same_value(v, _fixed(suite, k))]
        outside = [k for k, v in combo.items() if k in suite.matrix and not is_one_of(v, suite.matrix[k])]
        if fixed_apart or outside:
            continue
        blocker = search.blocker(combo)
        if blocker is None:
            return None
        reasons.append(f"{suite.suite}: {blocker}")
    return reasons[0] if reasons else "no suite varies these axes together"
