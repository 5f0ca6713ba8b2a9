"""Scenario files: schema, validation and matrix expansion.

A scenario file (scenarios/*.yaml) declares one suite: a model, an engine, its
workloads, the golden's settings and a matrix of parallel settings. Expansion
turns it into Scenario objects with stable ids `<suite>/<axis-values>`, e.g.
`llama-tiny/tp2-pp2-sp-compile`, usable as pytest node ids and make targets.

Every problem with a file is a ScenarioError naming the file, the field and what
is wrong, because a user editing YAML needs to know where to look.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

ID_PART = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
AXIS_NAME = re.compile(r"^[a-z][a-z0-9]*$")
AxisValue = Union[bool, int, str]  # bool first: YAML `true` must stay a bool
DEFAULT_SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with the file and field at fault."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _snake_name(v: str, what: str) -> str:
    """Workload and eval names become output keys and check names: one spelling rule."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", v):
        raise ValueError(f"{what} names are lower-case letters, digits and '_'")
    return v


class WorkloadDef(_Strict):
    name: str
    kind: Literal["logprobs", "greedy"]
    # A named prompt set shipped with the harness ("gsm8k-test") or literal prompts.
    prompts: Union[str, list[str]] = "gsm8k-test"
    num_prompts: int = Field(4, ge=1)
    max_prompt_tokens: int = Field(96, ge=2)
    max_new_tokens: int = Field(16, ge=1)
    top_k: int = Field(20, ge=1)
    # One entry per prompt (vision models): a synthetic image name (harness/images.py,
    # e.g. noise-56x84) or null for a text-only prompt. Empty: every prompt is text.
    images: list[Union[str, None]] = []
    # Record the per-layer hidden states of the first batch (logprobs workloads), which
    # lets a numeric failure name the first diverging layer, stage and SP shard.
    capture_hidden: bool = False

    @field_validator("images")
    @classmethod
    def _images(cls, v: list) -> list:
        from harness.images import parse

        for name in v:
            if name is not None:
                parse(name)
        return v

    @model_validator(mode="after")
    def _options_fit(self) -> "WorkloadDef":
        if self.images and len(self.images) != self.num_prompts:
            raise ValueError(f"images has {len(self.images)} entries for num_prompts={self.num_prompts} (one per prompt, null for none)")
        if self.capture_hidden and self.kind != "logprobs":
            raise ValueError("capture_hidden is for logprobs workloads (teacher-forced prefill)")
        return self

    _name = field_validator("name")(lambda v: _snake_name(v, "workload"))


class EvalDef(_Strict):
    """A task score checked per scenario against the golden, item by item (harness/evals)."""

    name: str
    # A task of the harness's registry (harness/evals/tasks.py): gsm8k (the vendored
    # GSM8K), gsm8k-arith (generated arithmetic in GSM8K format), geo3k-synth (generated
    # diagrams in Geo3K format), geo3k (a hiyouga/geometry3k parquet given as `data`).
    task: str
    data: str | None = None  # a file the task reads instead of its shipped data
    items: int | None = Field(None, ge=1)  # the first N items of the test split; None: all
    pr_items: int | None = Field(None, ge=1)  # items when the run's gate is `pr` (a slice)
    num_fewshot: int | None = Field(None, ge=0)  # None: the task's own (5 for gsm8k)
    max_new_tokens: int | None = Field(None, ge=1)  # None: the task's max_gen_toks
    # The filter whose per-item correctness the check judges; every filter is reported.
    filter: Literal["strict-match", "flexible-extract"] = "flexible-extract"
    # Fail when the score is lower than the golden's by more than max_drop AND the exact
    # McNemar test on the flipped items rejects "no difference" at level alpha.
    max_drop: float = Field(0.0, ge=0, le=1)
    alpha: float = Field(0.05, gt=0, lt=1)
    # Items whose response may differ from the golden's before the check fails (greedy
    # decoding of a correct engine repeats the golden's text; engines give no logprobs
    # for generate, so near-ties cannot be told apart from bugs: allow a few knowingly).
    max_differing_responses: int = Field(0, ge=0)

    _name = field_validator("name")(lambda v: _snake_name(v, "eval"))

    def item_count(self, gate: str | None) -> int | None:
        """How many items a run in `gate` scores (None: all of the task's test split)."""
        if gate == "pr" and self.pr_items is not None:
            return self.pr_items if self.items is None else min(self.pr_items, self.items)
        return self.items


class ExpectedFailure(_Strict):
    match: dict[str, AxisValue]
    reason: str = Field(min_length=1)
    # The verdict the harness gave when the failure was confirmed (crash, fail, hang...).
    verdict: str | None = None


class ToleranceOverride(_Strict):
    logprob_atol: float | None = Field(None, gt=0)
    kl_max: float | None = Field(None, gt=0)
    top1_min: float | None = Field(None, gt=0, le=1)
    near_tie: float | None = Field(None, ge=0)


class ChangeRule(_Strict):
    # fnmatch globs over paths relative to the repository root (`*` also crosses `/`)
    paths: list[str] = Field(min_length=1)
    # patterns over the axis part of the ids; [] = a change there can break nothing here
    scenarios: list[str]

    @field_validator("paths")
    @classmethod
    def _relative(cls, paths: list[str]) -> list[str]:
        for p in paths:
            if not p or p.startswith("/"):
                raise ValueError(f"path glob '{p}' must be relative to the repository root, like harness/zoo/*.py")
        return paths


class ChangeMap(_Strict):
    """What `harness run --gate pr --changed-files F` runs for this suite."""

    smoke: list[str] = Field(min_length=1)  # always run, whatever changed
    rules: list[ChangeRule] = []


class SuiteFile(_Strict):
    suite: str
    description: str = ""
    engine: str = "reference"
    # engine settings that are not matrix axes, e.g. {python: .venv-vllm/bin/python}
    engine_options: dict[str, str] = {}
    model: str
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    timeout_s: float = Field(600, gt=0)
    workloads: list[WorkloadDef] = []
    evals: list[EvalDef] = []
    golden: dict[str, AxisValue]
    matrix: dict[str, list[AxisValue]] = Field(min_length=1)
    exclude: list[dict[str, AxisValue]] = []
    gates: dict[str, list[str]] = {}
    expected_failures: list[ExpectedFailure] = []
    env: dict[str, str] = {}
    faults: list[str] = []
    tolerances: ToleranceOverride = ToleranceOverride()
    changes: ChangeMap | None = None

    @field_validator("suite")
    @classmethod
    def _suite(cls, v: str) -> str:
        if not ID_PART.match(v):
            raise ValueError(f"'{v}' is not a valid suite name (use [a-z0-9.-], starting with a letter or digit)")
        return v

    @field_validator("matrix")
    @classmethod
    def _matrix(cls, matrix: dict) -> dict:
        for axis, values in matrix.items():
            if not AXIS_NAME.match(axis):
                raise ValueError(f"axis '{axis}' must be lower-case letters and digits")
            if not values:
                raise ValueError(f"axis '{axis}' has no values")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"axis '{axis}' repeats a value: {values}")
            for v in values:
                if isinstance(v, str) and not ID_PART.match(v):
                    raise ValueError(f"axis '{axis}' value '{v}' must use [a-z0-9.-] (it becomes part of the id)")
        return matrix

    @field_validator("workloads", "evals")
    @classmethod
    def _unique_names(cls, entries: list, info) -> list:
        names = [e.name for e in entries]
        if len(set(names)) != len(names):
            raise ValueError(f"{info.field_name} names repeat: {names}")
        return entries

    @model_validator(mode="after")
    def _something_to_check(self) -> "SuiteFile":
        if not self.workloads and not self.evals:
            raise ValueError("a suite needs at least one workload or eval (nothing would be checked)")
        return self

    @model_validator(mode="after")
    def _axes_known(self) -> "SuiteFile":
        axes = set(self.matrix)
        for where, selector in [("golden", self.golden)] + [
            (f"exclude[{i}]", e) for i, e in enumerate(self.exclude)
        ] + [(f"expected_failures[{i}].match", x.match) for i, x in enumerate(self.expected_failures)]:
            unknown = set(selector) - axes
            if unknown:
                raise ValueError(f"{where} names axes not in the matrix: {sorted(unknown)} (matrix axes: {sorted(axes)})")
        if set(self.golden) != axes:
            raise ValueError(f"golden must set every matrix axis; missing: {sorted(axes - set(self.golden))}")
        return self


@dataclass(frozen=True)
class Scenario:
    id: str
    suite: SuiteFile
    source: Path
    settings: dict
    gates: frozenset[str]
    expected_failure: str | None = None
    faults: tuple[str, ...] = ()
    extra_env: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The axis part of the id (`tp2-pp2-sp`)."""
        return self.id.split("/", 1)[1]

    @property
    def is_golden_setting(self) -> bool:
        return self.settings == dict(self.suite.golden)


def settings_label(settings: dict, axes: list[str]) -> str:
    """`tp2-pp2-sp-compile`: ints as <axis><n>, true bools by name, false bools omitted."""
    parts = []
    for axis in axes:
        value = settings[axis]
        if isinstance(value, bool):
            if value:
                parts.append(axis)
        elif isinstance(value, int):
            parts.append(f"{axis}{value}")
        else:
            parts.append(f"{axis}-{value}")
    return "-".join(parts) or "default"


def _matches(settings: dict, selector: dict) -> bool:
    return all(settings.get(k) == v for k, v in selector.items())


def expand(suite: SuiteFile, source: Path) -> list[Scenario]:
    axes = list(suite.matrix)
    scenarios = []
    for combo in itertools.product(*(suite.matrix[a] for a in axes)):
        settings = dict(zip(axes, combo))
        if any(_matches(settings, ex) for ex in suite.exclude):
            continue
        label = settings_label(settings, axes)
        gates = {"nightly"} if "nightly" not in suite.gates else set()
        gates |= {g for g, patterns in suite.gates.items() if any(fnmatch.fnmatch(label, p) for p in patterns)}
        xfail = next((x.reason for x in suite.expected_failures if _matches(settings, x.match)), None)
        scenarios.append(
            Scenario(
                id=f"{suite.suite}/{label}",
                suite=suite,
                source=source,
                settings=settings,
                gates=frozenset(gates),
                expected_failure=xfail,
                faults=tuple(suite.faults),
                extra_env=dict(suite.env),
            )
        )
    ids = [s.id for s in scenarios]
    if len(set(ids)) != len(ids):
        raise ScenarioError(f"{source}: matrix expansion gives duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    _check_change_patterns(suite, source, [s.name for s in scenarios])
    return scenarios


def _check_change_patterns(suite: SuiteFile, source: Path, names: list[str]) -> None:
    """A pattern that picks nothing is a typo that would silently drop scenarios from a gate."""
    if suite.changes is None:
        return
    fields = [("changes.smoke", suite.changes.smoke)]
    fields += [(f"changes.rules.{i}.scenarios", r.scenarios) for i, r in enumerate(suite.changes.rules)]
    for where, patterns in fields:
        for pattern in patterns:
            if not any(fnmatch.fnmatch(n, pattern) for n in names):
                raise ScenarioError(f"{source}: invalid scenario file:\n  {where}: pattern '{pattern}' matches no "
                                    f"scenario of suite '{suite.suite}' (they are: {', '.join(names)})")


def load_suite(path: Path) -> SuiteFile:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: a scenario file is a mapping (suite:, model:, matrix: ...), got {type(raw).__name__}")
    try:
        return SuiteFile.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            problems.append(f"  {where}: {err['msg']}")
        raise ScenarioError(f"{path}: invalid scenario file:\n" + "\n".join(problems)) from None


def load_scenarios(paths: list[Path] | None = None) -> list[Scenario]:
    """Every scenario of the given files or directories (default: scenarios/)."""
    files: list[Path] = []
    for p in paths or [DEFAULT_SCENARIO_DIR]:
        p = Path(p)
        if p.is_dir():
            files += sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
        else:
            files.append(p)
    scenarios: list[Scenario] = []
    suites: dict[str, Path] = {}
    for f in files:
        suite = load_suite(f)
        if suite.suite in suites:
            raise ScenarioError(f"{f}: suite '{suite.suite}' is already defined in {suites[suite.suite]}")
        suites[suite.suite] = f
        scenarios += expand(suite, f)
    return scenarios


def select(scenarios: list[Scenario], ids: list[str] | None = None, gate: str | None = None) -> list[Scenario]:
    """Scenarios by id (glob patterns allowed, a bare suite name means the whole suite) and/or gate."""
    chosen = scenarios
    if gate:
        chosen = [s for s in chosen if gate in s.gates]
    if ids:
        picked = []
        for pattern in ids:
            hits = [s for s in chosen if fnmatch.fnmatch(s.id, pattern) or s.suite.suite == pattern]
            if not hits:
                known = ", ".join(s.id for s in scenarios[:8])
                raise ScenarioError(f"no scenario matches '{pattern}' (try `harness list`; e.g. {known})")
            picked += [s for s in hits if s not in picked]
        chosen = picked
    return chosen
