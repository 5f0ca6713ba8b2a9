"""Scenarios: a suite's matrix expanded into runs with stable ids, and picking them.

Expansion turns a suite into Scenario objects with ids `<suite>/<axis-values>`, e.g.
`llama-tiny/tp2-pp2-sp-compile`, usable as pytest node ids and make targets.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.contract.axes import AXES, filled, generic_label
from harness.contract.known_bugs import MODEL_ARCH, KnownBug, known_bugs_where
from harness.contract.settings.variables import MAX_SCENARIOS
from harness.inputs.models import ModelRef
from harness.inputs.scenarios.binding import engine_known_bugs, engine_rules
from harness.inputs.scenarios.covering import Trigger, constraints, covering_rows, locked_bug_rows
from harness.inputs.scenarios.schema import ARCH_AXIS, ExpectedFailure, ScenarioError, SuiteFile


@dataclass(frozen=True)
class EngineVersion:
    """One engine version of several (`harness run --engine-env ENGINE_ENV`, harness/inputs/engine_envs.py):
    the one value a versioned scenario carries. Its id is `<base id>@<label>`."""

    # as given to --engine-env: `vllm==0.28.0`, or an interpreter path
    given: str
    # `vllm-0.28.0`: the engine and its own version, as it reports them
    label: str
    python: str  # the interpreter the engine runs in
    # The interpreter that builds a tiny {arch: ...} checkpoint: the default
    # environment's (where it exists), so the weights are the golden's.
    model_python: str | None = None


@dataclass(frozen=True)
class Scenario:
    id: str
    suite: SuiteFile
    source: Path
    settings: dict
    gates: frozenset[str]
    expected_failure: str | None = None
    # every expected_failures entry whose `match` selects this scenario, in file order
    expectations: tuple[ExpectedFailure, ...] = ()
    # the engine's known bugs that can show in this scenario (harness/contract/known_bugs.py)
    known_bugs: tuple[KnownBug, ...] = ()
    # a row added for known bugs (the lock's bug_rows, covering.py plan_bug_rows): their ids;
    # on a release where none of them stands it is not needed (said, not dropped)
    for_bugs: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    extra_env: dict = field(default_factory=dict)
    engine_version: EngineVersion | None = None  # None: the engine as the suite configures it

    def with_version(self, version: EngineVersion) -> Scenario:
        """This scenario run by another engine version: same suite, golden and
        expectations; its id tagged `@<label>`."""
        return dataclasses.replace(self, id=f"{self.base_id}{VERSION_SEP}{version.label}", engine_version=version)

    @property
    def engine_options(self) -> dict:
        """What the engine is configured with: the suite's engine_options, with the
        engine version's interpreter."""
        options = dict(self.suite.engine_options)
        if self.engine_version is not None:
            options["python"] = self.engine_version.python
        return options

    @property
    def base_id(self) -> str:
        """The id without the engine-version tag: `vllm-llama/tp1-pp2`."""
        return split_id(self.id)[0]

    @property
    def name(self) -> str:
        """The axis part of the id (`tp2-pp2-sp`), without an engine-version tag."""
        return self.base_id.split("/", 1)[1]

    @property
    def is_golden_setting(self) -> bool:
        return self.engine_settings == dict(self.suite.golden)

    @property
    def engine_settings(self) -> dict:
        """The parallel settings the engine runs (the arch axis picks the model instead)."""
        return {k: v for k, v in self.settings.items() if k != ARCH_AXIS}

    @property
    def model(self) -> ModelRef:
        if self.suite.archs:
            return self.suite.archs[self.settings[ARCH_AXIS]]
        assert self.suite.model is not None  # the schema: model: or archs:
        return self.suite.model

    def same_layout(self) -> Scenario | None:
        """The scenario it is also held to: its own layout with the suite's `same_layout` axes
        at the golden's values (`llama-spec/tp2-pp2` for `llama-spec/tp2-pp2-spec-ngram`),
        no expectations of its own. None when it sets none of them, or when that layout is
        the golden's (the golden check is then the same-layout check)."""
        layout = self.narrowed({a: v for a, v in self.settings.items() if a not in self.suite.same_layout})
        if layout.settings == self.settings or layout.is_golden_setting:
            return None
        return layout

    def narrowed(self, kept: dict) -> Scenario:
        """This scenario with only `kept` of its axis values (the rest at the golden's; the arch
        and the engine version stay), judged on its own: no expectation of the file applies to
        it. Its same-layout reference, a failure's smallest interaction
        (harness/run/stages/interaction.py) and that interaction's repro are such scenarios."""
        golden = self.suite.golden
        settings = {a: (kept[a] if a in kept else golden.get(a, v)) for a, v in self.settings.items()}
        base = f"{self.suite.suite}/{settings_label(settings, list(self.suite.matrix))}"
        narrowed_id = f"{base}{VERSION_SEP}{self.engine_version.label}" if self.engine_version else base
        return dataclasses.replace(
            self, id=narrowed_id, settings=settings, expected_failure=None, expectations=(), known_bugs=(), for_bugs=()
        )

    @property
    def golden_key(self) -> str:
        """Where its golden lives under golden/: the suite, or suite/arch (one golden per arch)."""
        return f"{self.suite.suite}/{self.settings[ARCH_AXIS]}" if self.suite.archs else self.suite.suite


def settings_label(settings: dict, axes: list[str]) -> str:
    """`tp2-pp2-sp-compile`: each axis's value as its declaration spells it
    (harness/contract/axes.py: ints as <axis><n>, true switches by name, a choice as
    <axis>-<value>), values that mean "off" left out (false, a zero budget, `dp: 1`, `batch: all`), so a
    suite that adds an axis keeps its other scenarios' ids."""
    parts = [AXES[a].label(settings[a]) if a in AXES else generic_label(a, settings[a]) for a in axes]
    return "-".join(p for p in parts if p) or "default"


def _matches(settings: dict, selector: dict) -> bool:
    return all(settings.get(k) == v for k, v in selector.items())


def planned_settings(suite: SuiteFile, source: Path) -> list[dict]:
    """The settings a suite runs: every combination of its matrix but the excluded ones, or,
    for a `covering:` suite, the rows of its covering array (covering.py). None is refused:
    a suite that vanished would leave its gates green, so it is an error like a broken file."""
    axes = list(suite.matrix)
    if suite.covering is not None:
        planned = covering_rows(suite, source, engine_rules(suite.engine))
    else:
        _check_size(suite, source)
        combos = (dict(zip(axes, combo)) for combo in itertools.product(*(suite.matrix[a] for a in axes)))
        planned = [settings for settings in combos if not any(_matches(settings, ex) for ex in suite.exclude)]
    if not planned:
        raise ScenarioError(f"{source}: invalid scenario file:\n  {_why_nothing_planned(suite)}")
    return planned


def expand(suite: SuiteFile, source: Path) -> list[Scenario]:
    """The suite's scenarios: its planned settings, then a covering suite's rows for known bugs
    (its lock's bug_rows, on every release: a fixed bug's rows are said not needed where they run)."""
    planned: list[tuple[dict, tuple[str, ...]]] = [(settings, ()) for settings in planned_settings(suite, source)]
    if suite.covering is not None:
        seen = {json.dumps(settings, sort_keys=True) for settings, _ in planned}
        extra = [b for b in locked_bug_rows(suite, source) if json.dumps(b.row, sort_keys=True) not in seen]
        planned += [(b.row, b.bugs) for b in extra if _keeps_constraints(suite, b.row)]
    bugs = engine_known_bugs(suite.engine, source)
    scenarios = [_scenario(suite, source, settings, for_bugs, bugs) for settings, for_bugs in planned]
    ids = [s.id for s in scenarios]
    if len(set(ids)) != len(ids):
        raise ScenarioError(f"{source}: matrix expansion gives duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    _check_patterns(suite, source, [s.name for s in scenarios])
    return scenarios


def _keeps_constraints(suite: SuiteFile, settings: dict) -> bool:
    """A recorded row for known bugs that a rule or exclude forbids now is not planned (as the array's own)."""
    return all(c.allows(settings) for c in constraints(suite, engine_rules(suite.engine)))


def _scenario(suite: SuiteFile, source: Path, settings: dict, for_bugs: tuple[str, ...], bugs: tuple[KnownBug, ...]) -> Scenario:
    label = settings_label(settings, list(suite.matrix))
    gates = {"nightly"} if "nightly" not in suite.gates else set()
    gates |= {g for g, patterns in suite.gates.items() if any(fnmatch.fnmatch(label, p) for p in patterns)}
    expectations = tuple(x for x in suite.expected_failures if _matches(settings, x.match))
    return Scenario(
        id=f"{suite.suite}/{label}",
        suite=suite,
        source=source,
        settings=settings,
        gates=frozenset(gates),
        expected_failure=expectations[0].reason if expectations else None,
        expectations=expectations,
        known_bugs=known_bugs_where(bugs, {**filled(settings), **model_facts(suite, settings, source)}),
        for_bugs=for_bugs,
        faults=tuple(suite.faults),
        extra_env=dict(suite.env),
    )


def bug_triggers(suite: SuiteFile, source: Path, bugs: tuple[KnownBug, ...]) -> list[Trigger]:
    """The known bugs as the covering planner tests a setting against them (covering.py Trigger):
    the matrix axes each `where` reads (the arch for a model class), the axes outside the
    matrix at their defaults as in expand."""
    matrix = set(suite.matrix)
    found = []
    for bug in bugs:
        read = {ARCH_AXIS if key == MODEL_ARCH else key for key in bug.where}
        axes = tuple(a for a in suite.matrix if a in read and a in matrix)
        found.append(Trigger(bug.id, axes, _shows_in(bug, suite, source)))
    return found


def _shows_in(bug: KnownBug, suite: SuiteFile, source: Path):
    def shows_in(settings: dict) -> bool:
        return bug.shows_in({**filled(settings), **model_facts(suite, settings, source)})

    return shows_in


def model_facts(suite: SuiteFile, settings: dict, source: Path) -> dict:
    """{"model_arch": the model class} where the scenario's model names it without being
    built: an {arch: ...} model, or a local checkpoint's config.json; {} otherwise (a hub
    model before download). A known bug's `where` may name it, whatever suite runs it: the
    multimodal suites' archs and vllm-mm-evals' trained checkpoint are one Qwen3-VL."""
    model = suite.archs[settings[ARCH_AXIS]] if suite.archs and ARCH_AXIS in settings else suite.model
    arch = getattr(model, "arch", None)
    path = getattr(model, "path", None)
    if arch is None and path is not None:
        directory = Path(path).expanduser()
        config = (directory if directory.is_absolute() else source.parent / directory) / "config.json"
        try:
            arch = (json.loads(config.read_text()).get("architectures") or [None])[0]
        except (OSError, ValueError, AttributeError):
            arch = None
    return {MODEL_ARCH: arch} if isinstance(arch, str) else {}


def _check_size(suite: SuiteFile, source: Path) -> None:
    """A matrix is refused from its axes' lengths, before one combination is made: 10^8 of
    them would take minutes and gigabytes to list."""
    limit = MAX_SCENARIOS.integer() or 1
    combinations = math.prod(len(values) for values in suite.matrix.values())
    if combinations > limit:
        raise ScenarioError(
            f"{source}: the matrix has {combinations} combinations, more than {limit} "
            f"(${MAX_SCENARIOS.name} raises the limit): split the suite or use exclude:"
        )


# how many of a matrix's combinations a refusal looks at for the constraints that forbid them
_WHY_LOOKS_AT = 10_000


def _why_nothing_planned(suite: SuiteFile) -> str:
    """`field: reason` for a suite that plans no setting: the constraints that forbid its
    combinations (the excludes; for a covering array also the engine's rules, which a full
    product leaves to each scenario's `unsupported`)."""
    checks = constraints(suite, engine_rules(suite.engine) if suite.covering is not None else ())
    axes = list(suite.matrix)
    blockers: dict[str, None] = {}
    for combo in itertools.islice(itertools.product(*(suite.matrix[a] for a in axes)), _WHY_LOOKS_AT):
        settings = dict(zip(axes, combo))
        blockers.update(dict.fromkeys(c.name for c in checks if not c.allows(settings)))
    why = "; ".join(blockers) or "the covering array is empty"
    where = "covering" if suite.covering is not None else "exclude"
    return f"{where}: every setting of the matrix is ruled out, so the suite would plan no scenario: {why}"


def _check_patterns(suite: SuiteFile, source: Path, names: list[str]) -> None:
    """A gate's or a change rule's pattern that picks nothing is a typo that would silently
    drop scenarios from a gate."""
    fields = [(f"gates.{gate}", patterns) for gate, patterns in suite.gates.items()]
    if suite.changes is not None:
        fields += [("changes.smoke", suite.changes.smoke)]
        fields += [(f"changes.rules.{i}.scenarios", r.scenarios) for i, r in enumerate(suite.changes.rules)]
    for where, patterns in fields:
        for pattern in patterns:
            if not any(fnmatch.fnmatch(n, pattern) for n in names):
                raise ScenarioError(
                    f"{source}: invalid scenario file:\n  {where}: pattern '{pattern}' matches no "
                    f"scenario of suite '{suite.suite}' (they are: {', '.join(names)})"
                )


# scenario id @ engine label: `vllm-llama/tp1-pp2@vllm-0.28.0` (harness/inputs/engine_envs.py)
VERSION_SEP = "@"


def split_id(scenario_id: str) -> tuple[str, str]:
    """`vllm-llama/tp1-pp2@vllm-0.28.0` -> ("vllm-llama/tp1-pp2", "vllm-0.28.0"); no tag: (id, "").
    The one place that parses an id's engine-version tag."""
    base, _, label = scenario_id.partition(VERSION_SEP)
    return base, label


def nearest_hint(asked: str, ids: list[str]) -> str:
    """ "; did you mean ..." with the ids nearest to a typo (`tiny-lama/tp1-pp1`) or to an id
    whose axes were written in another order (`pp2-tp1` for `tp1-pp2`)."""
    suite, _, name = asked.partition("/")
    parts = sorted(name.split("-"))
    reordered = [
        i
        for i in ids
        if i.partition("/")[2] != name
        and sorted(i.partition("/")[2].split("-")) == parts
        and (i.partition("/")[0] == suite or not suite)
    ]
    in_suites = [f"{s}/{name}" for s in _nearest_suites(suite, ids) if f"{s}/{name}" in ids]
    close = difflib.get_close_matches(asked, ids, n=4, cutoff=0.6)
    near = list(dict.fromkeys(reordered + in_suites + close))[:4]
    if near:
        order = " (the axes go in the suite's order)" if reordered else ""
        return f"; did you mean {', '.join(near)}?{order}"
    return "; `harness list` shows the ids"


def _nearest_suites(suite: str, ids: list[str]) -> list[str]:
    """Suites whose name is the asked one misspelt, its words in any order (`tiny-lama`: llama-tiny)."""

    def words(name: str) -> str:
        return "-".join(sorted(name.split("-")))

    suites = sorted({i.partition("/")[0] for i in ids} - {suite})
    scored = [(difflib.SequenceMatcher(None, words(suite), words(s)).ratio(), s) for s in suites]
    return [s for score, s in sorted(scored, reverse=True)[:2] if score >= 0.8]


def find_one(scenarios: list[Scenario], scenario_id: str) -> Scenario:
    """The scenario with exactly this id, no patterns (a repro or a bisect is of one
    scenario); a trailing @<engine>-<version> tag of a versioned run is ignored."""
    base = split_id(scenario_id)[0]
    for s in scenarios:
        if s.id == base:
            return s
    raise ScenarioError(f"no scenario '{base}'{nearest_hint(base, [s.id for s in scenarios])}")


def select(scenarios: list[Scenario], ids: list[str] | None = None, gate: str | None = None) -> list[Scenario]:
    """Scenarios by id (glob patterns allowed, a bare suite name means the whole suite) and/or gate."""
    chosen = scenarios
    if gate:
        gates = sorted({g for s in scenarios for g in s.gates})
        if scenarios and gate not in gates:
            raise ScenarioError(f"no gate '{gate}': the scenario files define {', '.join(gates)}")
        chosen = [s for s in chosen if gate in s.gates]
    if ids:
        picked = []
        for pattern in ids:
            hits = [s for s in chosen if fnmatch.fnmatch(s.id, pattern) or s.suite.suite == pattern]
            if not hits:
                raise ScenarioError(f"no scenario matches '{pattern}'{nearest_hint(pattern, [s.id for s in scenarios])}")
            picked += [s for s in hits if s not in picked]
        chosen = picked
    return chosen
