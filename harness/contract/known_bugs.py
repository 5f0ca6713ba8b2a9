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
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal, Union

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from harness.contract.signature import FailureSignature, Sighting

Value = Union[bool, int, str]  # bool first: YAML `true` must stay a bool
BUG_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
CPU_FLAG = re.compile(r"^!?[a-z0-9_]+$")


class KnownBug(FailureSignature):
    """A failure of the engine that any suite can meet (contract/signature.py), with its id,
    where it shows, the runs that showed it (at least one) and its upstream report."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    # one line: what is wrong and where in the engine's source
    reason: str = Field(min_length=1)
    engine_version: str  # the releases it is in: `vllm>=0.27,<0.33`
    verdict: Literal["fail", "crash", "hang"]
    # where it shows: every key a setting the scenario must have (a list: any of these values),
    # or `model_arch`, the checkpoint's model class (Qwen3VLForConditionalGeneration) in every
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

    def shows_in(self, settings: dict) -> bool:
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


def _same(have: object, want: object) -> bool:
    """1 == True in Python; an axis value of 1 is not the switch `true`."""
    return type(have) is type(want) and have == want


class KnownBugsError(ValueError):
    pass


@functools.cache
def load_known_bugs(path: Path) -> tuple[KnownBug, ...]:
    """The bugs of one engine's file, each checked; a bad file says which entry and why."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KnownBugsError(f"{path}: cannot read the known bugs: {exc}") from None
    entries = data.get("known_bugs") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise KnownBugsError(f"{path}: expected a mapping with a `known_bugs:` list")
    bugs = []
    for i, entry in enumerate(entries):
        try:
            bugs.append(KnownBug.model_validate(entry))
        except ValidationError as exc:
            name = entry.get("id", f"entry {i}") if isinstance(entry, dict) else f"entry {i}"
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise KnownBugsError(f"{path}: known bug {name}: {problems}") from None
    ids = [b.id for b in bugs]
    doubles = sorted({i for i in ids if ids.count(i) > 1})
    if doubles:
        raise KnownBugsError(f"{path}: known bug ids used twice: {', '.join(doubles)}")
    return tuple(bugs)


def load_releases(path: Path) -> tuple[str, ...]:
    """The engine's releases the file was checked against (its `releases:` list)."""
    data = yaml.safe_load(path.read_text()) or {}
    return tuple(str(r) for r in data.get("releases") or ())


def series(release: str) -> str:
    """`0.27` of 0.27.1: a bug's range is backed by a run in each release series it covers."""
    return ".".join(release.split(".")[:2])


def unbacked_series(x: object, releases: tuple[str, ...], package: str) -> list[str]:
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


def known_bugs_where(bugs: tuple[KnownBug, ...], settings: dict) -> tuple[KnownBug, ...]:
    """The bugs that can show in a scenario of these settings."""
    return tuple(b for b in bugs if b.shows_in(settings))
