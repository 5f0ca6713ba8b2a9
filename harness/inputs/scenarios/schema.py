"""The schema of a scenario file: what a suite may say, checked without any engine.

A scenario file (scenarios/*.yaml) declares one suite: a model, an engine, its
workloads, the golden's settings and a matrix of parallel settings. This module
checks the file's own shape (fields, names, types, cross-field rules); whether its
axes, values and faults are the engine's is binding.py's, and expansion into
scenarios is scenario.py's.

Every problem with a file is a ScenarioError naming the file, the field and what
is wrong, because a user editing YAML needs to know where to look.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from harness.contract.axes import AXES, LAYOUT_AXES
from harness.contract.runbrief import MEDIA, entry_list
from harness.contract.signature import FailureSignature
from harness.inputs.models import ArchModel, HubModel, ModelRef, PathModel

if TYPE_CHECKING:
    from harness.inputs.scenarios.registry import Resolution

# Checked with fullmatch: `$` also matches before a final newline, and an id part ending
# in one splits summary rows, make lines and run directory names.
ID_PART = re.compile(r"[a-z0-9][a-z0-9.-]*")
AXIS_NAME = re.compile(r"[a-z][a-z0-9_]*")  # prefix_cache, chunked_prefill


def _plain_axis_value(value: object) -> object:
    """An axis value as the file wrote it: left to pydantic's lax union, YAML's `1.0` would
    become `true` (a switch on) and `2.0` the size 2, read as what the file did not say."""
    if isinstance(value, (bool, int, str)):
        return value
    raise ValueError(f"{value!r} is not an axis value: write an integer, true or false, or a name of [a-z0-9.-]")


# bool first: YAML `true` must stay a bool
AxisValue = Annotated[Union[bool, int, str], BeforeValidator(_plain_axis_value)]
# The model axis: its values name the entries of a suite's `archs:`, each its own model
# with its own golden; the engine never sees it (it is not a parallel setting).
ARCH_AXIS = "arch"


# Axes that test an engine feature on a model or workloads made for it (an MoE model,
# shared prompt prefixes, long decodes, a KV store): every declared axis but the layout
# (LAYOUT_AXES: the sizes and how the layout runs). A first suite (`harness init`) leaves
# them out, a suite written for the feature sets them.
FEATURE_AXES = tuple(a for a in AXES if a not in LAYOUT_AXES)


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with the file and field at fault."""


def env_problem(name: str, value: str) -> str | None:
    """Why the OS would refuse NAME=VALUE in a process's environment, or None. Checked
    where the user gives one (--env, a suite's env:): a rank given it dies before it
    can open its log, and says nothing."""
    if not name:
        return "the name is empty"
    if "=" in name:
        return f"the name {name!r} contains '='"
    if "\0" in name:
        return f"the name {name!r} contains a NUL byte"
    if "\0" in value:
        return f"the value of {name} contains a NUL byte"
    return None


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
    # One entry per prompt (vision models): a synthetic image name (harness/inputs/images.py,
    # e.g. noise-56x84), a list of them (several images in one prompt) or null for a
    # text-only prompt. Empty: every prompt is text.
    images: list[Union[str, list[str], None]] = []
    # The same for videos (harness/inputs/media.py, e.g. gradient-56x56x4: 4 frames) and audio
    # clips (e.g. tone-500ms), for models that take them.
    videos: list[Union[str, list[str], None]] = []
    audios: list[Union[str, list[str], None]] = []
    # Record the per-layer hidden states of the first batch (logprobs workloads), which
    # lets a numeric failure name the first diverging layer, stage and SP shard.
    capture_hidden: bool = False
    # vLLM's workers record every module's inputs and outputs (harness/engines/vllm/record.py):
    # what the localization stage's recording runs set. Apart from `capture_hidden` (which
    # `harness init` writes for the reference engine's per-layer states) because a recording
    # run also allocates a later PP stage's receive buffer as vLLM's warm-up would, and a
    # scenario's own run must meet vLLM as it is (eager PP's known bug then stays seen)
    record_modules: bool = False
    # Prompts that share their start, for prefix caching: this many tokens of one fixed
    # passage after BOS, before each prompt's own text (0: none). Longer than the engine's
    # cache block, the shared blocks are what a prefix cache hits.
    shared_prefix: int = Field(0, ge=0)
    # The prompt list this many times over: a later pass meets a warm prefix cache.
    passes: int = Field(1, ge=1)

    @field_validator("images", "videos", "audios")
    @classmethod
    def _media_names(cls, v: list, info) -> list:
        from harness.inputs.images import parse
        from harness.inputs.media import parse_audio, parse_video

        check = {"images": parse, "videos": parse_video, "audios": parse_audio}[info.field_name]
        for entry in v:
            for name in entry_list(entry):
                check(name)
        return v

    def media_of(self, field: str, prompt: int) -> list[str]:
        """The names of one prompt's images, videos or audios (`field`): none for a text-only prompt."""
        entries = getattr(self, field)
        return entry_list(entries[prompt] if prompt < len(entries) else None)

    @model_validator(mode="after")
    def _options_fit(self) -> WorkloadDef:
        for kind in MEDIA:
            entries = getattr(self, kind)
            if entries and len(entries) != self.num_prompts:
                raise ValueError(
                    f"{kind} has {len(entries)} entries for num_prompts={self.num_prompts} (one per prompt, null for none)"
                )
        if self.shared_prefix and self.shared_prefix >= self.max_prompt_tokens - 1:
            raise ValueError(
                f"shared_prefix={self.shared_prefix} leaves no room for a prompt's own text "
                f"within max_prompt_tokens={self.max_prompt_tokens}"
            )
        if (self.capture_hidden or self.record_modules) and self.kind != "logprobs":
            raise ValueError("capture_hidden and record_modules are for logprobs workloads (teacher-forced prefill)")
        return self

    _name = field_validator("name")(lambda v: _snake_name(v, "workload"))


class EvalDef(_Strict):
    """A task score checked per scenario against the golden, item by item (harness/run/evals)."""

    name: str
    # A task of the harness's registry (harness/run/evals/tasks.py): gsm8k (the vendored
    # GSM8K), gsm8k-arith (generated arithmetic in GSM8K format), geo3k-synth (generated
    # diagrams in Geo3K format), geo3k (a hiyouga/geometry3k parquet given as `data`).
    task: str
    # a file the task reads instead of its shipped data
    data: str | None = None
    # the first N items of the test split; None: all
    items: int | None = Field(None, ge=1)
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
    # Why the eval stays in a gate where its score cannot fail (a model at a real task's floor:
    # its responses alone are held); without it a gate refuses such an eval (run/evals/paired.py)
    score_cannot_fail: str | None = Field(None, min_length=1)

    _name = field_validator("name")(lambda v: _snake_name(v, "eval"))

    def item_count(self, gate: str | None) -> int | None:
        """How many items a run in `gate` scores (None: all of the task's test split)."""
        if gate == "pr" and self.pr_items is not None:
            return self.pr_items if self.items is None else min(self.pr_items, self.items)
        return self.items


class ExpectedFailure(FailureSignature):
    """A confirmed engine bug particular to this suite: where it shows (`match`), and what it
    looks like on which engine versions (contract/signature.py), so that only THAT failure is
    expected (harness/contract/expectations.py). An entry that names only `match` and `reason`
    expects any failure (the old form). Bugs any suite can meet are the engine's known bugs."""

    match: dict[str, AxisValue]
    reason: str = Field(min_length=1)


class ToleranceOverride(_Strict):
    logprob_atol: float | None = Field(default=None, gt=0)
    kl_max: float | None = Field(default=None, gt=0)
    top1_min: float | None = Field(default=None, gt=0, le=1)
    near_tie: float | None = Field(default=None, ge=0)


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
                raise ValueError(f"path glob '{p}' must be relative to the repository root, like harness/inputs/zoo/*.py")
        return paths


class ChangeMap(_Strict):
    """What `harness run --gate pr --changed-files F` runs for this suite."""

    smoke: list[str] = Field(min_length=1)  # always run, whatever changed
    rules: list[ChangeRule] = []


class CoveringGroup(_Strict):
    axes: list[str] = Field(min_length=2)
    strength: int = Field(ge=1)

    @model_validator(mode="after")
    def _distinct_axes(self) -> CoveringGroup:
        # an axis twice asks for a combination of two of its own values, which no setting
        # holds: the planner would search for it for ever
        repeated = sorted({a for a in self.axes if self.axes.count(a) > 1})
        if repeated:
            raise ValueError(f"axes name {repeated} more than once; give each axis once")
        if self.strength > len(self.axes):
            raise ValueError(f"strength {self.strength} is more than its {len(self.axes)} axes: give 1 to {len(self.axes)}")
        return self


class Covering(_Strict):
    """The matrix as a covering array (harness/inputs/scenarios/covering.py) instead of its full
    product: every `strength`-way combination of axis values (the arch axis included) in
    some scenario, and each group's axes combined at the group's own strength."""

    strength: int = Field(ge=1)
    groups: list[CoveringGroup] = []


class SuiteFile(_Strict):
    suite: str
    description: str = ""
    engine: str = "reference"
    # engine settings that are not matrix axes, e.g. {python: .venv-vllm/bin/python}
    engine_options: dict[str, str] = {}
    # a zoo name, or {path:}, {hub:, revision:}, {arch:} (harness/inputs/models)
    model: ModelRef | None = None
    # instead of `model:`, one model per value of the `arch` axis: an architecture class
    # name (a tiny random checkpoint of it) or any model entry
    archs: dict[str, Union[PathModel, HubModel, ArchModel]] = {}
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # a run that may never end is a hang nobody reports
    timeout_s: float = Field(600, gt=0, allow_inf_nan=False)
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
    # Axes of features that must not change what the model computes (speculative decoding,
    # batch composition): a scenario that sets one is also held to its own layout without
    # them (harness/run/stages/same_layout.py), not only to the golden's layout
    same_layout: list[str] = []
    # the matrix as a covering array (`covering: 3`, or {strength: 2, groups: [{axes: [...],
    # strength: 3}]}); absent: every combination of the matrix, as always
    covering: Covering | None = None
    # how `archs: {from: registry}` was resolved (registry.py); None for an archs table written out
    _registry: Resolution | None = PrivateAttr(None)

    @property
    def registry(self) -> Resolution | None:
        return self._registry

    @field_validator("covering", mode="before")
    @classmethod
    def _covering_short(cls, v):
        return {"strength": v} if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("archs", mode="before")
    @classmethod
    def _arch_names(cls, archs):
        # `qwen3: Qwen3ForCausalLM` is short for {arch: Qwen3ForCausalLM}
        if isinstance(archs, dict):
            archs = {k: {"arch": v} if isinstance(v, str) else v for k, v in archs.items()}
        return archs

    @model_validator(mode="after")
    def _one_model_or_archs(self) -> SuiteFile:
        if self.archs:
            if self.model is not None:
                raise ValueError("give either model: or archs: (one model per value of the arch axis), not both")
            bad = [k for k in self.archs if not ID_PART.fullmatch(k)]
            if bad:
                raise ValueError(f"archs names {bad} must use [a-z0-9.-] (they become part of the id)")
            if ARCH_AXIS not in self.matrix:  # every arch, as the first axis of the id
                self.matrix = {ARCH_AXIS: list(self.archs), **self.matrix}
            values = self.matrix[ARCH_AXIS]
            unknown = [v for v in values if v not in self.archs]
            if unknown:
                raise ValueError(f"matrix axis arch names {unknown}, which archs: does not define (it has: {list(self.archs)})")
        elif self.model is None:
            raise ValueError("model: is missing (or archs:, one model per value of the arch axis)")
        elif ARCH_AXIS in self.matrix:
            raise ValueError("matrix axis arch needs archs: (the model of each of its values)")
        return self

    @field_validator("gates")
    @classmethod
    def _gate_names(cls, gates: dict) -> dict:
        # a gate ends the default run id (a directory) and is a pytest marker
        for name in gates:
            if not ID_PART.fullmatch(name):
                raise ValueError(f"gate name {name!r} must use [a-z0-9.-], starting with a letter or digit")
        return gates

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            problem = env_problem(name, value)
            if problem:
                raise ValueError(f"{problem} (env: sets environment variables of every rank)")
        return env

    @field_validator("suite")
    @classmethod
    def _suite(cls, v: str) -> str:
        if not ID_PART.fullmatch(v):
            raise ValueError(f"{v!r} is not a valid suite name (use [a-z0-9.-], starting with a letter or digit)")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, ref):
        """A plain name is a zoo model: a typo is the file's error now, not every
        scenario's at run time. Other sources are resolved (and checked) when run."""
        from harness.inputs import zoo  # stdlib only until a model is built

        if isinstance(ref, str) and not zoo.has_model(ref):  # the table, or a package's entry point
            raise ValueError(
                f"unknown model '{ref}': the zoo has {', '.join(zoo.model_names())}; for any other model "
                "write model: {path: DIR}, {hub: ORG/NAME, revision: REV} or {arch: CLASS} (harness/inputs/models)"
            )
        return ref

    @field_validator("matrix")
    @classmethod
    def _matrix(cls, matrix: dict) -> dict:
        """The matrix's shape; whether its axes and values are the engine's (and within each
        declared axis's domain, harness/contract/axes.py) is binding.py's, every one listed."""
        for axis, values in matrix.items():
            if not AXIS_NAME.fullmatch(axis):
                raise ValueError(f"axis {axis!r} must be lower-case letters, digits and '_'")
            if not values:
                raise ValueError(f"axis '{axis}' has no values")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"axis '{axis}' repeats a value: {values}")
            for v in values:
                if isinstance(v, str) and not ID_PART.fullmatch(v):
                    raise ValueError(f"axis '{axis}' value {v!r} must use [a-z0-9.-] (it becomes part of the id)")
        return matrix

    @field_validator("workloads", "evals")
    @classmethod
    def _unique_names(cls, entries: list, info) -> list:
        names = [e.name for e in entries]
        if len(set(names)) != len(names):
            raise ValueError(f"{info.field_name} names repeat: {names}")
        return entries

    @model_validator(mode="after")
    def _something_to_check(self) -> SuiteFile:
        if not self.workloads and not self.evals:
            raise ValueError("a suite needs at least one workload or eval (nothing would be checked)")
        return self

    @model_validator(mode="after")
    def _axes_known(self) -> SuiteFile:
        axes = set(self.matrix)
        for where, selector in (
            [("golden", self.golden)]
            + [(f"exclude[{i}]", e) for i, e in enumerate(self.exclude)]
            + [(f"expected_failures[{i}].match", x.match) for i, x in enumerate(self.expected_failures)]
        ):
            unknown = set(selector) - axes
            if unknown:
                raise ValueError(f"{where} names axes not in the matrix: {sorted(unknown)} (matrix axes: {sorted(axes)})")
        unknown = set(self.same_layout) - axes
        if unknown:
            raise ValueError(f"same_layout names axes not in the matrix: {sorted(unknown)} (matrix axes: {sorted(axes)})")
        if self.covering is not None and self.covering.strength > len(axes):
            raise ValueError(
                f"covering.strength {self.covering.strength} is more than the matrix's {len(axes)} axes "
                f"({', '.join(self.matrix)}): give 1 to {len(axes)}"
            )
        for i, group in enumerate(self.covering.groups if self.covering else []):
            unknown = set(group.axes) - axes
            if unknown:
                raise ValueError(
                    f"covering.groups[{i}] names axes not in the matrix: {sorted(unknown)} (matrix axes: {sorted(axes)})"
                )
        missing = axes - set(self.golden) - {ARCH_AXIS}  # each arch is its own golden
        if missing:
            raise ValueError(f"golden must set every matrix axis; missing: {sorted(missing)}")
        return self
