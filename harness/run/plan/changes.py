"""Change-based selection for the PR gate: run what a change can break, and say why.

Each scenario file may map source paths to the scenarios they can break (`changes:`,
see harness/inputs/scenarios/schema.py). For a list of changed files the PR gate runs:
  * every suite's smoke set, always;
  * for each changed file, the scenarios of every rule whose paths match it;
  * the whole static PR gate (`gates: pr`) of a suite without a change map, and of
    every suite when a changed file is matched by no rule of any suite: a file
    nobody mapped is a file whose effect nobody knows, so nothing is skipped for it.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

from harness.inputs.scenarios.scenario import Scenario
from harness.inputs.scenarios.schema import ScenarioError


def changed_files_from(path: str | Path) -> list[str]:
    """One path per line (as `git diff --name-only` prints them); blank lines ignored."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScenarioError(f"--changed-files {path}: cannot read: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def resolve_commit(base: str, repo: Path) -> str:
    """The commit id `base` names. Only this id reaches `git diff`: a value that looks
    like an option (`--output=FILE` makes git write a file) is never an argument of its
    own, and `--end-of-options` keeps rev-parse from reading it as one either."""
    out = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    commit = out.stdout.strip()
    if out.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40,64}", commit):
        raise ScenarioError(
            f"--changed-since {base}: not a commit of the repository at {repo} "
            "(give a branch, tag or commit, e.g. origin/main; fetch it first in a shallow CI clone)"
        )
    return commit


def changed_files_since(base: str, repo: Path) -> list[str]:
    """Files changed between the merge base of `base` and HEAD, plus uncommitted ones."""
    commit = resolve_commit(base, repo)
    out = subprocess.run(["git", "diff", "--name-only", f"{commit}...HEAD"], cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise ScenarioError(f"--changed-since {base}: git diff failed: {out.stderr.strip()}")
    local = subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=repo, capture_output=True, text=True)
    return sorted(set(out.stdout.split()) | set(local.stdout.split()))


# in the reason of a pick that a rule made (not the smoke set, not a whole gate)
RULE_REASON = "changes.rules"


def picked_by_a_rule(picks: dict[str, list[str]]) -> set[str]:
    """The scenarios of `select_for_changes`' picks that a `changes.rules` entry mapped a
    changed path to: the ones the change itself points at, run before the smoke set."""
    return {sid for sid, reasons in picks.items() if any(f"({RULE_REASON}." in r for r in reasons)}


def _matches_any(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def select_for_changes(scenarios: list[Scenario], changed: list[str]) -> dict[str, list[str]]:
    """{scenario id: why it was picked}, in the order of `scenarios`."""
    why: dict[str, list[str]] = {}

    def pick(s: Scenario, reason: str) -> None:
        reasons = why.setdefault(s.id, [])
        if reason not in reasons:
            reasons.append(reason)

    in_pr_gate = {s.suite.suite for s in scenarios if "pr" in s.gates}
    mapped: set[str] = set()
    for s in scenarios:
        if s.suite.suite not in in_pr_gate:
            continue
        changes = s.suite.changes
        if changes is None:
            if "pr" in s.gates:
                pick(s, f"suite '{s.suite.suite}' has no change map: its whole pr gate")
            continue
        if _matches_any(s.name, changes.smoke):
            pick(s, "smoke set")
        for i, rule in enumerate(changes.rules):
            for path in changed:
                if _matches_any(path, rule.paths):
                    mapped.add(path)
                    if _matches_any(s.name, rule.scenarios):
                        pick(s, f"{path} ({RULE_REASON}.{i} of {s.source.name})")
    unmapped = [p for p in changed if p not in mapped]
    for path in unmapped:
        for s in scenarios:
            if "pr" in s.gates:
                pick(s, f"{path} is mapped by no scenario file: the whole pr gate")
    return {s.id: why[s.id] for s in scenarios if s.id in why}
