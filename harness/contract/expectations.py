"""Is this failure the expected one? An expected failure names its bug.

A scenario file's `expected_failures:` entry (scenario.ExpectedFailure) says where a
confirmed engine bug shows, on which engine versions (PEP 440 specifiers over the
versions the engine reports: `vllm==0.32.*`), which verdict it gives, and what it looks
like: for a crash the exception type, a message / traceback pattern and the failing rank
or worker; for a numeric failure the failed check and conditions on its metrics.

`apply_expectations(verdict, expectations)` turns a verdict into `expected-failure` only when an
expectation that applies to the engine version it ran on describes the failure seen.
Anything else stays what it was, and its reason says which expectation was near and why
it did not match: a new engine bug never hides behind an old marker. An expectation whose
versions exclude the running engine does not apply (the scenario is judged as if it had
none). An expected failure that did not happen names the engine version it ran on.
`Verdict.expectation` records what was expected beside what happened, for the reports.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.contract.cpu import cpu_flags
from harness.contract.jsonfile import JSONObject
from harness.contract.verdict import FAILED, Verdict

CONDITION = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*([-+0-9.eE]+)\s*$")
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
# "KeyError: 'residual'", "torch._dynamo.exc.Unsupported: ...", "AssertionError"
EXCEPTION_TEXT = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$", re.S)


# What this module reads of a failure signature (contract/signature.py FailureSignature, a
# layer above: described here by its shape). Properties, read-only, so that the models'
# narrower types fit (a known bug's Literal verdict, its required engine_version).
class Versioned(Protocol):
    @property
    def engine_version(self) -> str | None: ...
    @property
    def versions(self) -> Mapping[str, str]: ...


class Expectation(Versioned, Protocol):
    """A scenario file's ExpectedFailure (inputs/scenarios/schema.py) or an engine's KnownBug
    (contract/known_bugs.py): a FailureSignature with the reason it is expected."""

    @property
    def verdict(self) -> str | None: ...
    @property
    def exception(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def traceback(self) -> str | None: ...
    @property
    def rank(self) -> int | str | None: ...
    @property
    def check(self) -> str | None: ...
    @property
    def metric(self) -> Mapping[str, str]: ...
    @property
    def reason(self) -> str: ...


class Bug(Expectation, Protocol):
    """An engine's known bug (contract/known_bugs.py KnownBug), as this module reads it."""

    @property
    def id(self) -> str: ...
    @property
    def upstream(self) -> str | None: ...
    @property
    def where(self) -> Mapping[str, object]: ...
    @property
    def cpu(self) -> Sequence[str]: ...
    def meets_cpu(self, flags: frozenset[str] | None) -> bool: ...
    def title(self) -> str: ...


def parse_requirement(text: str) -> tuple[str, SpecifierSet]:
    """`vllm>=0.30,<0.33` -> ("vllm", >=0.30,<0.33); ValueError says what is wrong."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise ValueError(
            f"engine_version {text!r} is not '<package><PEP 440 specifier>' such as 'vllm>=0.30,<0.33': {exc}"
        ) from None
    if req.extras or req.marker or req.url:
        raise ValueError(f"engine_version {text!r}: only a package name and version specifier, no extras, markers or URL")
    if not str(req.specifier):
        raise ValueError(f"engine_version {text!r} names no version range (e.g. '{req.name}>=0.30')")
    return req.name.lower(), req.specifier


def parse_specifier(name: str, text: str) -> SpecifierSet:
    try:
        version_range = SpecifierSet(str(text))
    except InvalidSpecifier:
        raise ValueError(f"versions.{name}: {text!r} is not a PEP 440 specifier such as '>=0.30,<0.33'") from None
    if not str(version_range):
        raise ValueError(f"versions.{name}: empty version range")
    return version_range


def parse_condition(name: str, text: str) -> tuple[str, float]:
    m = CONDITION.match(str(text))
    if not m:
        raise ValueError(f"metric.{name}: {text!r} is not a condition such as '>=0.1' or '<0.9'")
    try:
        return m[1], float(m[2])
    except ValueError:
        raise ValueError(f"metric.{name}: {m[2]!r} is not a number") from None


def version_ranges(x: Versioned) -> dict[str, SpecifierSet]:
    """package -> the range the expectation is for (engine_version and versions combined)."""
    ranges: dict[str, SpecifierSet] = {}
    if x.engine_version:
        name, version_range = parse_requirement(x.engine_version)
        ranges[name] = version_range
    for name, text in (x.versions or {}).items():
        version_range = parse_specifier(name, text)
        key = name.lower()
        ranges[key] = ranges[key] & version_range if key in ranges else version_range
    return ranges


def engine_label(versions: Mapping[str, object]) -> str:
    """`vllm 0.32.0 (torch 2.13.0)`, `reference (torch 2.13.0)`: what a verdict ran on."""
    if not versions:
        return "an unrecorded engine version"
    engine = str(versions.get("engine", "engine"))
    own = versions.get(engine)
    torch = versions.get("torch")
    head = f"{engine} {own}" if own else engine
    return f"{head} (torch {torch})" if torch and engine != "torch" else head


def version_problem(x: Versioned, versions: Mapping[str, object]) -> str | None:
    """Why the expectation does not apply to the engine these versions describe; None: it applies."""
    for name, version_range in version_ranges(x).items():
        have = _lookup(versions, name)
        if have is None:
            known = ", ".join(sorted(versions)) or "none"
            return f"it is for {name}{version_range}, and the engine reported no {name} version (it reported: {known})"
        try:
            ok = version_range.contains(Version(str(have)), prereleases=True)
        except InvalidVersion:
            return f"it is for {name}{version_range}, and {name} {have} is not a PEP 440 version"
        if not ok:
            return f"it is for {name}{version_range}; this ran {name} {have}"
    return None


def _lookup(versions: Mapping[str, object], name: str) -> str | None:
    for k, v in versions.items():
        if str(k).lower().replace("_", "-") == name.replace("_", "-"):
            return str(v)
    return None


def split_exception(text: str | None) -> tuple[str, str]:
    """("KeyError", "'residual'") from "KeyError: 'residual'"; ("", text) if it names no type."""
    if not text:
        return "", ""
    m = EXCEPTION_TEXT.match(text.strip())
    if not m or " " in m["type"]:
        return "", text
    return m["type"], (m["msg"] or "").strip()


def _type_matches(expected: str, actual: str) -> bool:
    if not actual:
        return False
    return actual == expected or actual.endswith("." + expected) or expected.endswith("." + actual)


def mismatch(x: Expectation, v: Verdict) -> str | None:
    """Why the failure in `v` is not the one `x` describes; None when it is."""
    if x.verdict and x.verdict != v.verdict:
        return f"expected a {x.verdict}, this is a {v.verdict}"
    if v.verdict == "unsupported" and x.message is not None and not re.search(x.message, v.reason):
        return f"expected a reason matching /{x.message}/, got {v.reason!r}"
    if v.verdict == "crash":
        crash = v.crash or {}
        etype, msg = split_exception(crash.get("exception"))
        if x.exception:
            wtype, _ = split_exception(crash.get("wrapper"))
            if not (_type_matches(x.exception, etype) or _type_matches(x.exception, wtype)):
                return f"expected {x.exception}, the crash raised {crash.get('exception') or 'no exception'}"
        if x.message is not None and not re.search(x.message, msg):
            return f"expected a message matching /{x.message}/, got {msg!r}"
        if x.traceback is not None and not re.search(x.traceback, crash.get("traceback") or ""):
            return f"expected a traceback matching /{x.traceback}/, it does not"
        if x.rank is not None:
            rank = crash.get("rank")
            ok = rank == x.rank if isinstance(x.rank, int) else bool(re.search(x.rank, str(rank)))
            if not ok:
                return f"expected rank {x.rank}, rank {rank} crashed"
    if v.verdict == "fail" and (x.check or x.metric):
        failed = [c for c in v.checks if not c.get("passed")]
        chosen = [c for c in failed if not x.check or fnmatch.fnmatch(str(c.get("name")), x.check)]
        if not chosen:
            return f"expected check {x.check} to fail, the failed checks are {[c.get('name') for c in failed] or 'none'}"
        problems = []
        for c in chosen:
            bad = _metric_problem(x.metric, c)
            if bad is None:
                return None
            problems.append(bad)
        return "; ".join(problems)
    return None


def _metric_problem(conditions: Mapping[str, str], check: JSONObject) -> str | None:
    metrics = check.get("metrics") or {}
    for name, text in (conditions or {}).items():
        op, bound = parse_condition(name, text)
        value = metrics.get(name)
        if not isinstance(value, (int, float)):
            return f"check {check.get('name')} has no metric {name} (it has {sorted(metrics)})"
        if not OPS[op](float(value), bound):
            return f"check {check.get('name')}: {name}={value:.3g} is not {op}{bound:g}"
    return None


def describe(x: Expectation) -> str:
    """What the expectation expects, in one line: `crash AssertionError on /Worker_PP1/ (vllm==0.32.*)`."""
    parts = [x.verdict or "any failure"]
    if x.exception:
        parts.append(x.exception)
    if x.message is not None:
        parts.append(f"message /{x.message}/")
    if x.traceback is not None:
        parts.append(f"traceback /{x.traceback}/")
    if x.rank is not None:
        parts.append(f"on rank {x.rank}" if isinstance(x.rank, int) else f"on /{x.rank}/")
    if x.check:
        parts.append(f"check {x.check}")
    parts += [f"{k}{c}" for k, c in (x.metric or {}).items()]
    ranges = version_ranges(x)
    if ranges:
        parts.append("(" + ", ".join(f"{n}{s}" for n, s in ranges.items()) + ")")
    return " ".join(parts)


def happened(v: Verdict) -> str:
    """What the scenario did, in the same words: `crash KeyError: 'x' on rank 1`."""
    if v.crash:
        return f"crash {v.crash.get('exception') or 'without an exception'} on rank {v.crash.get('rank')}"
    if v.checks and (v.observed or v.verdict) == "fail":
        failed = [c for c in v.checks if not c.get("passed")]
        return "fail " + "; ".join(f"{c.get('name')}: {c.get('summary')}" for c in failed)
    return v.observed or v.verdict


def _record(x: Expectation, status: str, why: str | None, v: Verdict) -> dict[str, str | None]:
    return {
        "status": status,
        "reason": x.reason,
        "expected": describe(x),
        "why": why,
        "happened": happened(v),
        "ran_on": engine_label(v.versions),
    }


def _declared_unsupported(v: Verdict, applicable: Sequence[Expectation]) -> None:
    """An `unsupported` that an expectation for this engine version declares (`verdict:
    unsupported`, its `message` matching the engine's reason) is recorded as matched: the
    setting is known not to apply there, so it is no lost coverage (run/report/regressions.py)."""
    declared = [x for x in applicable if x.verdict == "unsupported"]
    for x in declared:
        why = mismatch(x, v)
        if why is None:
            v.expectation = _record(x, "matched", None, v)
            return
    if declared:
        v.expectation = _record(declared[0], "mismatch", mismatch(declared[0], v), v)


def declares_unsupported(v: Verdict) -> bool:
    """Is `v` an `unsupported` its scenario file declares for the engine version it ran on?"""
    return v.verdict == "unsupported" and (v.expectation or {}).get("status") == "matched"


def apply_expectations(v: Verdict, expectations: Sequence[Expectation], known_bugs: Sequence[Bug] = ()) -> Verdict:
    """Apply a scenario's expectations, then its engine's known bugs, to its verdict (see the
    module docstring and harness/contract/known_bugs.py).

    `expectations` are the scenario file's entries that select the scenario, `known_bugs` the
    engine's bugs that can show in it. A verdict with only `expected_failure` set (a reason,
    no entries) keeps the old rule: any failure is the expected one."""
    reason = v.reason
    v = _apply_own(v, expectations)
    if known_bugs and v.verdict in FAILED:
        return _known_failure(v, reason, known_bugs)
    if known_bugs and v.verdict == "pass" and (v.expectation or {}).get("status", "not-applicable") == "not-applicable":
        return _known_bug_absent(v, known_bugs)
    return v


def _in_range(v: Verdict, bugs: Sequence[Bug]) -> list[Bug]:
    return [b for b in bugs if version_problem(b, v.versions) is None]


def _known_failure(v: Verdict, reason: str, bugs: Sequence[Bug]) -> Verdict:
    """A failure no expectation of the file describes but a known bug of the engine does:
    expected, naming the bug (the file's near miss, if any, is dropped with its words)."""
    in_range = _in_range(v, bugs)
    for bug in in_range:
        if mismatch(bug, v) is None:
            v.expectation = {**_record(bug, "matched", None, v), "known_bug": bug.id, "upstream": bug.upstream}
            v.expected_failure = bug.reason
            v.observed = v.verdict
            v.verdict = "expected-failure"
            v.reason = f"{v.observed} as expected ({bug.title()}: {bug.reason}): {reason}"
            return v
    v.reason += _known_near_miss(v, bugs, in_range)
    return v


def _known_near_miss(v: Verdict, bugs: Sequence[Bug], in_range: list[Bug]) -> str:
    """The words that keep a failure new while pointing at the known bug it resembles: the
    same failure on a release outside the bug's range (widen the range with this run), or
    a bug of this release whose failure differs (and how)."""
    for bug in bugs:
        if bug not in in_range and mismatch(bug, v) is None:
            return (
                f" (the failure of {bug.title()}, but {version_problem(bug, v.versions)}: if it is the same "
                "bug, add this run to its `seen` and widen its range)"
            )
    if in_range:
        bug = in_range[0]
        return f" (NOT {bug.title()}: it expects {describe(bug)}; {mismatch(bug, v)})"
    return ""


def _known_bug_absent(v: Verdict, bugs: Sequence[Bug]) -> Verdict:
    """A pass where a known bug should show on this release: the bug may be fixed. Reported,
    not a gate failure (the bugs file is shared by every suite; its range is then narrowed)."""
    not_met = []
    for bug in _in_range(v, bugs):
        if not bug.where:
            continue
        if not bug.meets_cpu(cpu_flags()):
            # in this release, on a code path this CPU does not take: no news of a fix; another bug may be
            not_met.append(f"{bug.title()} is not met on this CPU: it shows where the CPU has {' or '.join(bug.cpu)}")
            continue
        why = f"it passed on {engine_label(v.versions)}"
        v.expectation = {**_record(bug, "fixed", why, v), "known_bug": bug.id, "upstream": bug.upstream}
        v.reason = f"{v.reason} ({bug.title()} did not show where it should on {engine_label(v.versions)}: fixed?)"
        return v
    if not_met:
        v.reason = f"{v.reason} ({'; '.join(not_met)})"
    return v


def _apply_own(v: Verdict, expectations: Sequence[Expectation]) -> Verdict:
    if not expectations:
        if v.expected_failure and v.verdict in FAILED:
            v.observed = v.verdict
            v.verdict = "expected-failure"
            v.reason = f"{v.observed} as expected ({v.expected_failure}): {v.reason}"
        return v
    applicable: list[tuple[Expectation, str | None]] = []
    excluded: list[tuple[Expectation, str | None]] = []
    for x in expectations:
        problem = version_problem(x, v.versions)
        (excluded if problem else applicable).append((x, problem))
    if not applicable:  # judged as if it had no expectation
        x, problem = excluded[0]
        v.expected_failure = None
        v.expectation = _record(x, "not-applicable", problem, v)
        if v.verdict in FAILED:
            v.reason = f"{v.reason} (expected failure '{x.reason}' does not apply: {problem})"
        return v
    first = applicable[0][0]
    v.expected_failure = first.reason
    if v.verdict in FAILED:
        misses = []
        for x, _ in applicable:
            why = mismatch(x, v)
            if why is None:
                v.expectation = _record(x, "matched", None, v)
                v.observed = v.verdict
                v.verdict = "expected-failure"
                v.reason = f"{v.observed} as expected ({x.reason}): {v.reason}"
                return v
            misses.append((x, why))
        x, why = misses[0]
        v.expectation = _record(x, "mismatch", why, v)
        v.reason = f"{v.reason} (NOT the expected failure: '{x.reason}' expects {describe(x)}; {why})"
        return v
    if v.verdict == "unsupported":
        _declared_unsupported(v, [x for x, _ in applicable])
        return v
    if v.verdict == "pass":
        v.expectation = _record(first, "not-fired", f"it passed on {engine_label(v.versions)}", v)
        v.reason = f"expected {describe(first)} did not happen on {engine_label(v.versions)} ({first.reason}): {v.reason}"
    return v
