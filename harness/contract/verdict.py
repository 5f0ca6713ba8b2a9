"""The verdict: how every scenario ends, in exactly one of seven ways.

  pass              the checks held against the golden
  fail              a numeric check broke: the metric, its bound, where it first diverged
  crash             a rank died: which rank, its exception and traceback
  hang              the run outlived its timeout: where each rank was stuck
  unsupported       the engine cannot run these settings, and says why
  expected-failure  failed as the scenario file says it should (a known engine bug)
  error             the harness itself (or its inputs: golden, scenario file) is at fault

`error` is kept apart from the engine's verdicts so a harness bug never looks
like an engine bug.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.contract.jsonfile import JSONObject, from_fields, read_json

VERDICTS = ("pass", "fail", "crash", "hang", "unsupported", "expected-failure", "error")
FAILED = ("fail", "crash", "hang")


# How a failure's narrowing (harness/run/stages/interaction.py) ends its reason; one-line lists
# cut a reason before it, never inside it (harness/run/report/markdown.py brief)
INTERACTION_SEP = "; interaction: "


@dataclass
class Verdict:
    scenario: str
    verdict: str
    reason: str  # one line, the first thing a reader sees
    settings: JSONObject = field(default_factory=dict)
    duration_s: float = 0.0
    # The scenario file's expected-failure reason, if any.
    expected_failure: str | None = None
    # Under expected-failure: the verdict actually observed (fail/crash/hang).
    observed: str | None = None
    # The scenario file's expectation beside what happened (harness/contract/expectations.py):
    # status matched | mismatch | not-applicable | not-fired, reason, expected, why, happened, ran_on
    expectation: JSONObject | None = None
    tolerance: str = ""
    checks: list[JSONObject] = field(default_factory=list)
    crash: JSONObject | None = None
    hang: JSONObject | None = None
    error: JSONObject | None = None
    logs: JSONObject = field(default_factory=dict)
    golden: JSONObject = field(default_factory=dict)
    reproduce: str = ""
    # The engine that produced it: its name and versions (history rows, reports).
    versions: JSONObject = field(default_factory=dict)
    # fail: the first diverging layer / pp stage / SP tp rank, where the engine captured them;
    # vLLM: the first diverging module, its class and source line, its TP ranks, or for a
    # compiled row whether the eager twin agrees (harness/run/compare/modules.py, `text`)
    localization: JSONObject | None = None
    # Where the time went: the runner's and the ranks' phases (harness/run/timings.py)
    timings: JSONObject = field(default_factory=dict)
    # Each tested axis: did the engine really apply it, and its evidence (harness/run/compare/applied.py)
    applied: JSONObject = field(default_factory=dict)
    # A failure of several changed axis values: the smallest combination of them it needs,
    # and the trial runs that showed it (harness/run/stages/interaction.py)
    interaction: JSONObject | None = None
    # A row added for known bugs (the suite's lock, covering.py plan_bug_rows): {"bugs": their
    # ids, "standing": those in range on the versions it ran on}; none standing: not needed there
    for_bugs: JSONObject | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict '{self.verdict}'")

    @property
    def as_expected(self) -> bool:
        """False for anything a gate must stop on: failures, harness errors, and an
        expected failure that now passes (a fixed bug should be noticed too)."""
        if self.verdict in ("expected-failure", "unsupported"):
            return True
        if self.verdict == "pass":
            return self.expected_failure is None
        return False

    @property
    def unexpected_pass(self) -> bool:
        return self.verdict == "pass" and self.expected_failure is not None

    def headline(self) -> str:
        tag = "pass (UNEXPECTED: marked as expected failure)" if self.unexpected_pass else self.verdict
        return f"{self.scenario}: {tag} - {self.reason}"

    def explain(self) -> str:
        """The full text a failing CI job or test shows: checks, rank, traceback, how to reproduce."""
        lines = [self.headline()]
        if self.tolerance:
            lines.append(f"tolerance: {self.tolerance}")
        for c in self.checks:
            lines.append(f"  [{'ok' if c['passed'] else 'FAIL'}] {c['name']} ({c['kind']}): {c['summary']}")
        for axis, a in self.applied.items():
            state = {True: "applied", False: "NOT APPLIED", None: "?"}[a["applied"]]
            lines.append(f"  [{state}] {axis}={a['value']!r}: {a['evidence']}")
        if self.crash:
            lines += [f"rank {self.crash['rank']} log: {self.crash['log']}", self.crash.get("traceback") or ""]
        if self.hang:
            lines += [f"rank {r} stuck at {loc}" for r, loc in sorted(self.hang["stuck_at"].items())]
        if self.error:
            lines.append(self.error.get("traceback") or self.error.get("exception", ""))
        if self.interaction:
            lines.append(f"interaction: {self.interaction['text']}")
            lines += [f"  without {t['without']}: {t['verdict']} ({t['scenario']})" for t in self.interaction["trials"]]
        if self.reproduce:
            lines.append(f"reproduce: {self.reproduce}")
        return "\n".join(lines)

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        d["as_expected"] = self.as_expected
        d["digest"] = record_digest(asdict(self))
        return d

    def save(self, path: Path) -> None:
        """Whole or not at all (a temporary file, then a rename; as rundir.write_json, which
        this layer cannot import): a harness killed mid-write leaves no half verdict."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_dict(), f, indent=1)
            # mkstemp makes it private; run directories are shared
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @classmethod
    def load(cls, path: Path) -> Verdict:
        """The verdict a file holds; one edited after the harness wrote it (its digest no longer
        matches, or it says pass beside a failed check) is read as `error`, TAMPERED, never as
        what it now claims: a report must not turn a failure into an OK."""
        d = read_json(path)
        # derived: to_dict writes it for readers of the file
        d.pop("as_expected", None)
        # absent (or null) in files written before verdicts carried one
        digest = d.pop("digest", None)
        verdict = from_fields(cls, d, f"{path} is not a verdict")
        problem = contradiction(verdict)
        if digest is None:
            # Nothing proves such a file: one that stops a gate is believed (it cannot turn a
            # failure into an OK), one a gate would accept is not (deleting the digest of an
            # edited crash must not make it a pass).
            if verdict.as_expected:
                problem = "it carries no digest, so nothing proves the outcome it claims" + (f" ({problem})" if problem else "")
        elif digest != record_digest(d):
            problem = "its digest does not match its content" + (f" ({problem})" if problem else "")
        return verdict.tampered(path, problem) if problem else verdict

    def tampered(self, path: Path, problem: str) -> Verdict:
        return Verdict(
            scenario=self.scenario,
            verdict="error",
            settings=self.settings,
            duration_s=self.duration_s,
            reason=f"TAMPERED: {path} was changed after the harness wrote it: {problem}; "
            f"it now says '{self.verdict}: {self.reason}'. Run the scenario again",
            error={"kind": "tampered", "file": str(path), "problem": problem, "claimed": self.verdict},
            checks=self.checks,
            versions=self.versions,
            reproduce=self.reproduce,
        )


def record_digest(record: JSONObject) -> str:
    """sha256 of a verdict's fields as JSON (keys sorted, after one JSON round trip so that
    int keys read back as strings give the same text)."""
    canonical = json.dumps(json.loads(json.dumps(record)), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def contradiction(v: Verdict) -> str | None:
    """What in a verdict contradicts its class: a pass cannot have a failed check, a crash,
    a hang or an error (the others may carry what led to them)."""
    if v.verdict != "pass":
        return None
    failed = [c.get("name", "?") for c in v.checks if not c.get("passed")]
    if failed:
        return f"it says pass but its checks {', '.join(failed)} failed"
    for what in ("crash", "hang", "error"):
        if getattr(v, what):
            return f"it says pass but records a {what}"
    return None
