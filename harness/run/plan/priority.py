"""The first failure first: the order a gate runs its scenarios in.

A gate is waited on for its first failure: one failing verdict already says the change
is unsafe. So a gate run starts with the scenarios most likely to fail, in tiers:

  0  failed before: its latest result in the history store for this gate was not as
     expected (fail, crash, hang, error, an unexpected pass);
  1  drifted before: its latest result passed with a metric outside its noise band
     (harness/run/report/regressions.py, the same band the report uses);
  2  picked by a change rule: `--changed-since` / `--changed-files` mapped a changed
     path to it through a `changes.rules` entry (not only the smoke set);
  3  the rest.

Within a tier, largest first (device-seconds, harness/run/plan/schedule.py): the tier goes
into each scenario's Cost, and `largest_first` sorts by it, so the packed session
(--jobs) keeps the same order.

The suspects come from the history store (harness/run/report/regressions.py,
`gate_suspects`), read by the CLI and handed to plan_run: planning sits below the reports.
"""

from __future__ import annotations

import dataclasses

from harness.inputs.scenarios.scenario import Scenario
from harness.run.plan.schedule import Cost, largest_first

FAILED_BEFORE, DRIFTED_BEFORE, RULE_PICKED, THE_REST = range(4)
TIER_NAMES = {
    FAILED_BEFORE: "failed before",
    DRIFTED_BEFORE: "drifted before",
    RULE_PICKED: "picked by a change rule",
    THE_REST: "the rest",
}


@dataclasses.dataclass(frozen=True)
class Suspects:
    """What the history store says of a gate's scenarios (their latest results)."""

    failed: frozenset[str] = frozenset()
    drifted: frozenset[str] = frozenset()


def tier_of(scenario_id: str, suspects: Suspects, rule_picked: set[str]) -> int:
    if scenario_id in suspects.failed:
        return FAILED_BEFORE
    if scenario_id in suspects.drifted:
        return DRIFTED_BEFORE
    if scenario_id in rule_picked:
        return RULE_PICKED
    return THE_REST


def first_failure_order(
    scenarios: list[Scenario], cost: dict[str, Cost], suspects: Suspects, rule_picked: set[str]
) -> tuple[list[Scenario], dict[str, Cost]]:
    """The scenarios in the order to run them, and their costs with each one's tier."""
    tiered = {s.id: dataclasses.replace(cost[s.id], tier=tier_of(s.id, suspects, rule_picked)) for s in scenarios}
    return largest_first(scenarios, tiered), tiered


def order_meta(ordered: list[Scenario], cost: dict[str, Cost]) -> dict[str, list[str]]:
    """run.json's record of why the run starts where it does: the ids of each tier before the rest."""
    by_tier: dict[str, list[str]] = {}
    for s in ordered:
        if cost[s.id].tier != THE_REST:
            by_tier.setdefault(TIER_NAMES[cost[s.id].tier], []).append(s.id)
    return by_tier


# a nightly may have dozens in a tier: run.json keeps them all
SHOWN_IDS = 8


def order_lines(by_tier: dict[str, list[str]]) -> list[str]:
    """What the CLI prints before the run: which scenarios go first, and why."""
    return [f"harness: first, {len(ids)} {name}: {_some(ids)}" for name, ids in by_tier.items()]


def _some(ids: list[str]) -> str:
    more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return ", ".join(ids[:SHOWN_IDS]) + more
