"""Reading scenario files: each file parsed, checked and bound on its own.

A file that cannot be used (bad YAML, a field the schema refuses, an axis its engine
does not have, a suite name defined twice) fails alone: the Catalog holds every good
suite's scenarios and, beside them, each broken file with what is wrong. Commands
then list and run the good ones, say what is wrong with the others, and count a
broken suite as `error` wherever a request could have picked it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from harness.contract.yamlfile import YamlFileError, load_bounded
from harness.inputs.scenarios import registry
from harness.inputs.scenarios.binding import binding_problems, matrix_problems
from harness.inputs.scenarios.scenario import Scenario, expand, select
from harness.inputs.scenarios.schema import ID_PART, ScenarioError, SuiteFile


@dataclass(frozen=True)
class BrokenSuite:
    """A scenario file that could not be used, and what the request side needs of it."""

    path: Path
    # the name its `suite:` gives, else the file's name without .yaml
    suite: str
    # the whole message: file, fields, what is wrong
    problem: str
    # the gates it names; None: unknown (the file did not parse)
    gates: frozenset[str] | None = None

    @property
    def error_id(self) -> str:
        """Stands for the suite's scenarios in a run's report (they could not be expanded)."""
        return f"{self.suite}/scenario-file"

    def could_be_in(self, patterns: list[str] | None, gate: str | None) -> bool:
        """Whether a request for these ids / this gate could have picked one of its scenarios."""
        if gate and self.gates is not None and gate != "nightly" and gate not in self.gates:
            return False
        return not patterns or any(self._could_match(p) for p in patterns)

    def _could_match(self, pattern: str) -> bool:
        if pattern == self.suite:
            return True
        head, slash, _ = pattern.partition("/")
        if slash:  # the suite part of an id or a pattern
            return fnmatch.fnmatchcase(self.suite, head)
        # a glob over whole ids: up to its first wildcard
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        return literal != pattern and (literal.startswith(f"{self.suite}/") or f"{self.suite}/".startswith(literal))


@dataclass
class Catalog:
    """Every scenario of the good suites, and the suites that could not be loaded."""

    scenarios: list[Scenario] = field(default_factory=list)
    broken: list[BrokenSuite] = field(default_factory=list)
    # what loading found worth saying that breaks nothing (an arch gone from the registry)
    notices: list[str] = field(default_factory=list)

    def broken_for(self, patterns: list[str] | None, gate: str | None) -> list[BrokenSuite]:
        return [b for b in self.broken if b.could_be_in(patterns, gate)]

    def pick(self, patterns: list[str] | None, gate: str | None) -> tuple[list[Scenario], list[BrokenSuite]]:
        """The good scenarios a request picks, and the broken suites it could have picked. A
        pattern that reaches only broken suites picks nothing here (it is not a typo)."""
        broken = self.broken_for(patterns, gate)
        live = [p for p in patterns or [] if not any(b._could_match(p) for b in broken) or _picks_any(self.scenarios, p)]
        if patterns and not live:
            return [], broken
        if gate and broken and not live and not any(gate in s.gates for s in self.scenarios):
            return [], broken  # a gate only broken suites are in: their errors, not "no gate"
        return select(self.scenarios, live or None, gate), broken

    def problems_text(self) -> str:
        return "\n".join(f"harness: scenario file skipped: {b.problem}" for b in self.broken)


def _picks_any(scenarios: list[Scenario], pattern: str) -> bool:
    return any(fnmatch.fnmatch(s.id, pattern) or s.suite.suite == pattern for s in scenarios)


def read_yaml(path: Path):
    """A scenario file's YAML, within bounds (size, nesting, aliases: contract/yamlfile.py)."""
    try:
        return load_bounded(Path(path))
    except YamlFileError as exc:
        raise ScenarioError(str(exc)) from None


def load_suite(path: Path, swept_beside: set[str] | None = None, engine_python: str | None = None) -> SuiteFile:
    path = Path(path)
    return parse_suite(read_yaml(path), path, swept_beside, engine_python)


def parse_suite(raw, path: Path, swept_beside: set[str] | None = None, engine_python: str | None = None) -> SuiteFile:
    """A scenario file's parsed YAML, validated and bound to its engine; `path` names it in the
    errors. For a suite that takes its archs from the registry: `swept_beside`, the arch
    classes the other suites of its engine run (None: read from the files beside it), and
    `engine_python`, the interpreter whose registry it takes (None: the suite's engine's)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: a scenario file is a mapping (suite:, model:, matrix: ...), got {type(raw).__name__}")
    resolution = None
    if registry.is_registry(raw.get("archs")):
        swept = swept_beside if swept_beside is not None else _swept_beside(path, raw)
        raw, resolution = registry.resolve(raw, path, swept, engine_python)
    suite = _validated(raw, path)
    suite._registry = resolution
    return suite


def _validated(raw: dict, path: Path) -> SuiteFile:
    engine = raw.get("engine", SuiteFile.model_fields["engine"].default)
    axes = matrix_problems(engine, raw.get("matrix"))
    try:
        suite = SuiteFile.model_validate(raw)
    except ValidationError as exc:
        problems = [f"  {p}" for p in axes]
        for err in exc.errors():
            if axes and not err["loc"]:
                # a whole-file rule (golden sets every axis) broken by the unknown axis above
                continue
            if _refused_by_its_axis(err["loc"], engine, raw.get("matrix")):
                continue  # said above, with the values the axis takes
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            problems.append(f"  {where}: {err['msg'].removeprefix('Value error, ')}")  # pydantic's prefix says nothing
        raise ScenarioError(f"{path}: invalid scenario file:\n" + "\n".join(problems)) from None
    bound = binding_problems(suite)
    if bound:
        raise ScenarioError(f"{path}: invalid scenario file:\n" + "\n".join(f"  {p}" for p in bound))
    return suite


def _refused_by_its_axis(loc: tuple, engine: object, matrix: object) -> bool:
    """Whether a schema error is about a matrix value that matrix_problems already refused."""
    if len(loc) < 3 or loc[0] != "matrix" or not isinstance(matrix, dict):
        return False
    values, index = matrix.get(loc[1]), loc[2]
    if not (isinstance(values, list) and isinstance(index, int) and 0 <= index < len(values)):
        return False
    return bool(matrix_problems(engine, {loc[1]: [values[index]]}))


def suite_files(paths: list[Path] | None = None) -> list[Path]:
    """The scenario files of the given files or directories (default: the project's
    scenario files and the built-in suites, harness/contract/roots.py)."""
    from harness.contract.roots import scenario_paths

    files: list[Path] = []
    for p in paths or scenario_paths():
        p = Path(p)
        if p.is_dir():
            files += sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
        else:
            files.append(p)
    return files


def _swept_beside(path: Path, raw: dict) -> set[str]:
    """The arch classes the suites of the same engine in `path`'s directory run (their own
    archs tables: a registry suite beside them counts nothing)."""
    engine = raw.get("engine", SuiteFile.model_fields["engine"].default)
    swept: set[str] = set()
    for other in suite_files([path.parent]):
        if other.resolve() == path.resolve():
            continue
        try:
            theirs = read_yaml(other)
            if isinstance(theirs, dict) and theirs.get("engine") == engine and not registry.is_registry(theirs.get("archs")):
                swept |= registry.suite_archs(_validated(theirs, other), other)
        except ScenarioError:
            continue  # said where that file is loaded itself
    return swept


def load_catalog(paths: list[Path] | None = None) -> Catalog:
    """Every suite of the files, each loaded alone: a broken one is set aside with its problem.
    A suite that takes its archs from the engine's registry comes last: what the others
    sweep is known by then (its `skip_swept`)."""
    catalog = Catalog()
    suites: dict[str, Path] = {}
    swept: dict[str, set[str]] = {}  # engine -> arch classes its loaded suites run
    files = suite_files(paths)
    for f in sorted(files, key=_from_registry):
        try:
            suite = load_suite(f, swept_beside=swept.get(_engine_of(f), set()) if _from_registry(f) else None)
            if suite.suite in suites:
                raise ScenarioError(f"{f}: suite '{suite.suite}' is already defined in {suites[suite.suite]}")
            scenarios = expand(suite, f)
        except ScenarioError as exc:
            catalog.broken.append(_broken(f, str(exc)))
            continue
        suites[suite.suite] = f
        swept.setdefault(suite.engine, set()).update(registry.suite_archs(suite, f))
        catalog.notices += suite.registry.notices if suite.registry else []
        catalog.scenarios += scenarios
    order = {f: i for i, f in enumerate(files)}
    catalog.scenarios.sort(key=lambda s: order.get(s.source, len(order)))  # the files' order, as listed before
    return catalog


def _from_registry(path: Path) -> bool:
    try:
        raw = read_yaml(path)
    except ScenarioError:
        return False
    return isinstance(raw, dict) and registry.is_registry(raw.get("archs"))


def _engine_of(path: Path) -> str:
    raw = read_yaml(path)
    return str(raw.get("engine", SuiteFile.model_fields["engine"].default))


def load_scenarios(paths: list[Path] | None = None) -> list[Scenario]:
    """Every scenario of the files, or the first broken file's ScenarioError (for callers
    that need all of them: the API, a bisect step)."""
    catalog = load_catalog(paths)
    if catalog.broken:
        raise ScenarioError(catalog.broken[0].problem)
    return catalog.scenarios


def _broken(path: Path, problem: str) -> BrokenSuite:
    """What can still be read of a broken file: its suite's name and gates, if it parses."""
    try:
        raw = load_bounded(path)
    except YamlFileError:
        raw = None
    name = raw.get("suite") if isinstance(raw, dict) else None
    if not (isinstance(name, str) and ID_PART.fullmatch(name)):
        name = path.stem.lower()
    gates = raw.get("gates") if isinstance(raw, dict) else None
    known = frozenset(str(g) for g in gates) if isinstance(gates, dict) else None
    return BrokenSuite(path=path, suite=name, problem=problem, gates=known)
