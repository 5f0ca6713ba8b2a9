"""An engine's known bugs, declared once and matched in every suite.

A known bug is a confirmed engine bug described by its root cause: the failure it gives
(the same fields a scenario file's expectation uses: verdict, exception, message,
traceback, rank, check, metric), the engine releases it is in, where it shows (`where`:
axis values and archs a scenario must have), the runs that showed it, and its upstream
report where there is one. The engine ships the file (`Engine.known_bugs_file`, e.g.
harness/engines/vllm/known_bugs.yaml), so a bug found in one suite is known in every
suite and in every engine repository that runs the harness: a failure with that root
cause on a release in range is `expected-failure` naming the bug, and only news turns a
gate red.

A scenario file keeps its own `expected_failures:` for what is particular to it; those
are tried first (harness/contract/expectations.py applies both).

The file is an input like a scenario file: read within bounds, each entry checked (a `where`
against the axes' declarations and the engine's own axes: a misspelt one would never match),
and a problem named with the file, the entry and the field (KnownBugsError). The engine's
suites are then unusable, as a broken scenario file is (inputs/scenarios/binding.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from harness.contract.axes import AXES, is_one_of, spell
from harness.contract.signature import FailureSignature, Sighting
from harness.contract.yamlfile import YamlFileError, load_bounded

Value = Union[bool, int, str]  # bool first: YAML `true` must stay a bool
# an engine's axis, as its `axes` declares it: the values it runs, or None (any value)
EngineAxisValues = Union[tuple[object, ...], None]
BUG_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
CPU_FLAG = re.compile(r"^!?[a-z0-9_]+$")
# `where` keys beside the axes: the harness's own arch axis (a suite's name for one of its models,
# inputs/scenarios/schema.py ARCH_AXIS) and the checkpoint's model class (inputs/scenarios/scenario.py
# model_facts), each checked for its shape: a misspelt key or value would never match, and the
# failure it describes would end `fail` without naming the bug
ARCH = "arch"
MODEL_ARCH = "model_arch"
ARCH_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")  # as a suite's `archs:` spells it (schema.py ID_PART)
# A class name only: the engine's own list is not cheap to ask. vLLM's model registry is in its own
# interpreter (an import of vLLM, seconds, and absent where vLLM is not installed), and a bug's range
# spans releases whose registries differ from the installed one's. tests/test_known_bugs_file.py
# holds each shipped bug to the scenarios it was seen in, the real check of its `where`.
CLASS_NAME = re.compile(r"^[A-Z][A-Za-z0-9_]*$")


class KnownBug(FailureSignature):
    """A failure of the engine that any suite can meet (contract/signature.py), with its id,
    where it shows, the runs that showed it (at least one) and its upstream report."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    # one line: what is wrong and where in the engine's source
    reason: str = Field(min_length=1)
    engine_version: str  # the releases it is in: `vllm>=0.27,<0.33`
    verdict: Literal["fail", "crash", "hang"]
    # where it shows: every key a setting the scenario must have (a list: any of these values):
    # an axis of the engine, `arch` (a suite's name for its model), or `model_arch`, the checkpoint's model class (Qwen3VLForConditionalGeneration) in every
    # suite that runs it; a scenario outside it never matches, and one inside it that passes
    # reports the bug fixed
    where: dict[str, Union[Value, list[Value]]] = {}
    seen: list[Sighting] = Field(min_length=1)
    upstream: str | None = None
    # the CPUs whose code path meets it, any of: a flag of /proc/cpuinfo (`amx_tile`) or its
    # absence (`!avx512f`); empty: every CPU. A pass on a CPU outside them says nothing of a fix.
    cpu: list[str] = []

    @field_validator("id")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not BUG_ID.match(v):
            raise ValueError(f"{v!r} is not an id of lower-case words joined by '-' (e.g. eager-pp-intermediate-tensors)")
        return v

    @field_validator("where")
    @classmethod
    def _where_known(cls, v: dict[str, Value | list[Value]], info: ValidationInfo) -> dict[str, Value | list[Value]]:
        """Every key an axis of the engine (the validation context's `axes`; none given: a
        declared axis), `arch` or `model_arch`, every value one it can take."""
        context = info.context or {}
        problems = [where_problem(key, wanted, context.get("axes"), context.get("engine")) for key, wanted in v.items()]
        if any(problems):
            raise ValueError("; ".join(p for p in problems if p))
        return v

    def shows_in(self, settings: Mapping[str, object]) -> bool:
        """Is `settings` where this bug shows (every `where` key held by the scenario)?"""
        for key, wanted in self.where.items():
            if key not in settings:
                return False
            allowed = wanted if isinstance(wanted, list) else [wanted]
            if not any(_same(settings[key], w) for w in allowed):
                return False
        return True

    @field_validator("cpu")
    @classmethod
    def _flags(cls, v: list[str]) -> list[str]:
        for cond in v:
            if not CPU_FLAG.match(cond):
                raise ValueError(f"{cond!r} is not a CPU flag as /proc/cpuinfo spells it (avx512f), or one with '!' (!avx512f)")
        return v

    def meets_cpu(self, flags: frozenset[str] | None) -> bool:
        """Can this CPU (its flags; None: not known) take the code path that meets the bug?"""
        if not self.cpu or flags is None:
            return True
        return any((cond[1:] not in flags) if cond.startswith("!") else (cond in flags) for cond in self.cpu)

    def title(self) -> str:
        return f"known bug {self.id}" + (f" ({self.upstream})" if self.upstream else "")


def where_problem(key: str, wanted: object, axes: Mapping[str, EngineAxisValues] | None, engine: str | None) -> str | None:
    """Why `where: {key: wanted}` can never hold in a scenario of the engine (`axes`: its axes and
    the values it runs, None: any value; no `axes`: every declared axis), or None."""
    values = wanted if isinstance(wanted, list) else [wanted]
    if not values:
        return f"{key}: an empty list; one value, or a list of the values where the bug shows"
    if key in (ARCH, MODEL_ARCH):
        shape, example = (
            (ARCH_NAME, "a suite's arch name, e.g. qwen3-moe")
            if key == ARCH
            else (CLASS_NAME, "a model class, e.g. Qwen3VLForConditionalGeneration")
        )
        bad = [v for v in values if not (isinstance(v, str) and shape.match(v))]
        return f"{key}: {bad[0]!r} is not {example}" if bad else None
    known = axes if axes is not None else dict.fromkeys(AXES)
    if key not in known:
        whose = f"engine '{engine}'" if engine else "any engine"
        return f"{key!r} is not an axis of {whose} (where takes: {', '.join([*sorted(known), ARCH, MODEL_ARCH])})"
    for value in values:
        problem = AXES[key].problem(value) if key in AXES else None
        allowed = known[key]
        if problem is None and allowed is not None and not is_one_of(value, allowed):
            problem = f"axis '{key}' value {spell(value)}: engine '{engine}' runs {', '.join(spell(a) for a in allowed)}"
        if problem:
            return problem
    return None


def _same(have: object, want: object) -> bool:
    """1 == True in Python; an axis value of 1 is not the switch `true`."""
    return type(have) is type(want) and have == want


class KnownBugsError(ValueError):
    """A known-bugs file that cannot be used; the message names the file, the entry and the field."""


def load_known_bugs(
    path: Path, engine: str | None = None, axes: Mapping[str, EngineAxisValues] | None = None
) -> tuple[KnownBug, ...]:
    """The bugs of one engine's file, each checked (its `where` against `axes`, the engine's:
    axis -> the values it runs, None any; without them, against every declared axis);
    KnownBugsError names the file, the entry and the field of what is wrong."""
    return _load(Path(path), engine, tuple(axes.items()) if axes is not None else None)


@functools.cache
def _load(path: Path, engine: str | None, axes: tuple[tuple[str, EngineAxisValues], ...] | None) -> tuple[KnownBug, ...]:
    data = _read_mapping(path)
    entries = data.get("known_bugs")
    if not isinstance(entries, list):
        raise KnownBugsError(f"{path}: known_bugs: a list of known bugs (- id: ..., reason: ...), got {_kind(entries)}")
    context = {"engine": engine, "axes": dict(axes) if axes is not None else None}
    bugs = [_entry(path, i, entry, context) for i, entry in enumerate(entries)]
    ids = [b.id for b in bugs]
    doubles = sorted({i for i in ids if ids.count(i) > 1})
    if doubles:
        where = "; ".join(f"{d} (entries {', '.join(str(n) for n, i in enumerate(ids) if i == d)})" for d in doubles)
        raise KnownBugsError(f"{path}: known bug ids used twice: {where}; each bug has one id of its own")
    return tuple(bugs)


def _entry(path: Path, index: int, entry: object, context: Mapping[str, object]) -> KnownBug:
    try:
        return KnownBug.model_validate(entry, context=context)
    except ValidationError as exc:
        bug_id = entry.get("id") if isinstance(entry, dict) else None
        name = f"{bug_id} (entry {index})" if isinstance(bug_id, str) and bug_id else f"entry {index}"
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise KnownBugsError(f"{path}: known bug {name}: {problems}") from None


def _problem(error: ErrorDetails) -> str:
    """One pydantic error as `field: what is wrong` (an unknown field with the fields there are)."""
    where = ".".join(map(str, error["loc"])) or "entry"
    if error["type"] == "extra_forbidden":
        return f"{where}: not a field of a known bug (fields: {', '.join(KnownBug.model_fields)})"
    return f"{where}: {error['msg'].removeprefix('Value error, ')}"  # pydantic's prefix says nothing


def _read_mapping(path: Path) -> dict[str, Any]:  # a YAML mapping: its values any YAML
    """The file's YAML mapping, read within bounds; only `known_bugs:` and `releases:` at its top."""
    try:  # within the bounds of any user's YAML file: size, nesting, aliases expanded
        data = load_bounded(path, "a known-bugs file")
    except YamlFileError as exc:
        raise KnownBugsError(str(exc)) from None
    if not isinstance(data, dict):
        raise KnownBugsError(f"{path}: a known-bugs file is a mapping with a `known_bugs:` list, got {_kind(data)}")
    unknown = sorted(str(k) for k in data if k not in TOP_LEVEL)
    if unknown:
        raise KnownBugsError(f"{path}: {', '.join(unknown)}: not a field of a known-bugs file (fields: {', '.join(TOP_LEVEL)})")
    releases = data.get("releases") or []
    bad = [r for r in releases if not _is_version(r)] if isinstance(releases, list) else [releases]
    if bad:
        raise KnownBugsError(f"{path}: releases: {bad[0]!r} is not a release; a list of versions such as [0.27.0, 0.27.1]")
    return data


TOP_LEVEL = ("releases", "known_bugs")


def _is_version(value: object) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(str(value))
    except InvalidVersion:
        return False
    return not isinstance(value, bool)


def _kind(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:80]


def load_releases(path: Path) -> tuple[str, ...]:
    """The engine's releases the file was checked against (its `releases:` list)."""
    data = _read_mapping(Path(path))
    return tuple(str(r) for r in data.get("releases") or ())


def series(release: str) -> str:
    """`0.27` of 0.27.1: a bug's range is backed by a run in each release series it covers."""
    return ".".join(release.split(".")[:2])


def unbacked_series(x: FailureSignature, releases: tuple[str, ...], package: str) -> list[str]:
    """The release series inside an expectation's (or known bug's) range of `package` that no run
    in its `seen` showed it on: where its range says more than was measured."""
    from packaging.version import Version

    from harness.contract.expectations import version_ranges

    version_range = version_ranges(x).get(package)
    if version_range is None:
        return []
    covered = {series(r) for r in releases if version_range.contains(Version(r), prereleases=True)}
    shown = {series(s.release) for s in getattr(x, "seen", ()) if s.verdict != "pass"}
    return sorted(covered - shown, key=Version)


def known_bugs_where(bugs: tuple[KnownBug, ...], settings: Mapping[str, object]) -> tuple[KnownBug, ...]:
    """The bugs that can show in a scenario of these settings."""
    return tuple(b for b in bugs if b.shows_in(settings))
