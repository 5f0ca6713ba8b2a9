"""The failing interaction: which of a failed scenario's axis values its failure needs.

A scenario of a covering array switches on several things at once (`tp2-pp2-spec-ngram-
prefix_cache`); when it fails, the engine developer's first question is which of them the
bug lives between. This stage answers with real runs: the scenario again with one of its
non-golden axis values set back to the golden's, one value at a time (a value whose removal
still gives the same failure was not needed and stays out), so what remains is a smallest
combination each of whose values the failure needs: "fails with pp=2 + spec=ngram; passes
without either". Bounded (RunConfig.interaction_trials runs at most); every trial is kept
under `<run>/interaction/<id>/` and shared by the scenarios of the run that ask for it.

The same failure: the same verdict, and for a crash the same exception type. A trial that
cannot run (its setting breaks a rule, the engine refuses it) or fails another way keeps
the value in: the answer then says what that trial gave.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.contract.axes import Rule, spell
from harness.contract.jsonfile import JSONObject
from harness.contract.rundir import scenario_dir_name
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.binding import engine_rules
from harness.inputs.scenarios.scenario import Scenario

INTERACTION_DIR = "interaction"
# a trial's verdict, not a scenario's (the reports never read it)
TRIAL = "trial.json"
FAILED = ("fail", "crash", "hang")


def changed_values(scenario: Scenario) -> dict[str, object]:
    """The scenario's axis values that differ from its golden setting, in matrix order."""
    golden = scenario.suite.golden
    return {a: v for a, v in scenario.engine_settings.items() if a in golden and golden[a] != v}


def same_failure(first: Verdict, other: Verdict) -> bool:
    if other.verdict != first.verdict:
        return False
    if first.verdict == "crash":
        return (first.crash or {}).get("exception") == (other.crash or {}).get("exception")
    return True


def describe_values(values: Mapping[str, object]) -> str:
    return " + ".join(f"{a}={spell(v)}" for a, v in values.items())


def minimal_interaction(
    scenario: Scenario, verdict: Verdict, run_dir: Path, trials: int, run: Callable[[Scenario, Path], Verdict]
) -> JSONObject | None:
    """The smallest combination of the scenario's changed axis values its failure needs,
    found by at most `trials` runs of `run(trial scenario, its run directory)`; None when
    there is nothing to narrow (not a failure, one changed value, no trials allowed)."""
    changed = changed_values(scenario)
    if verdict.verdict not in FAILED or len(changed) < 2 or trials < 1:
        return None
    rules = engine_rules(scenario.suite.engine)
    needed, tried = dict(changed), list[JSONObject]()
    for axis in list(changed):
        if axis not in needed:
            continue  # gone with a value it required
        if len(needed) == 1 or len(tried) >= trials:
            break
        without = _without(scenario, needed, axis, rules)
        trial = _trial(scenario.narrowed(without), run_dir, run)
        same = same_failure(verdict, trial)
        gone = [a for a in needed if a not in without]
        tried.append(
            {
                "axis": axis,
                "without": describe_values({a: needed[a] for a in gone}),
                "scenario": trial.scenario,
                "verdict": trial.verdict,
                "reason": trial.reason,
                "same_failure": same,
            }
        )
        if same:
            needed = without
    complete = len(needed) == 1 or set(needed) <= {t["axis"] for t in tried}
    return {"needs": needed, "text": _text(needed, tried, complete), "trials": tried, "complete": complete}


def _without(scenario: Scenario, needed: Mapping[str, object], axis: str, rules: Sequence[Rule]) -> dict[str, object]:
    """`needed` with `axis` back at the golden's, and with every value that then breaks a
    rule (block_size requires prefix_cache: without the cache, its block size goes too)."""
    golden = scenario.suite.golden
    without = {a: v for a, v in needed.items() if a != axis}
    while True:
        settings = {**scenario.engine_settings, **{a: golden[a] for a in needed if a not in without}}
        broken = [r.when.axis for r in rules if r.broken(settings) and r.when.axis in without]
        if not broken:
            return without
        without = {a: v for a, v in without.items() if a not in broken}


def _text(needed: Mapping[str, object], tried: list[JSONObject], complete: bool) -> str:
    names = describe_values(needed)
    if len(needed) == 1:
        return f"fails with {names} alone"
    asked = {t["axis"]: t for t in tried if t["axis"] in needed}
    without = "; ".join(f"without {t['without']}: {t['verdict']}" for t in asked.values())
    if complete and all(t["verdict"] == "pass" for t in asked.values()):
        alone = "either alone" if len(needed) == 2 else "any one of them left out"
        return f"fails with {names}; passes with {alone} ({without})"
    bound = "" if complete else " (trials ran out before every value was tried)"
    return f"fails with {names}{bound}; {without}" if without else f"fails with {names}{bound}"


def _trial(scenario: Scenario, run_dir: Path, run: Callable[[Scenario, Path], Verdict]) -> Verdict:
    """One trial's verdict, run once per run directory: another scenario's minimisation that
    asks for the same setting reads it (under a lock: --jobs may ask for it at once)."""
    directory = Path(run_dir) / INTERACTION_DIR / scenario_dir_name(scenario.id)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (directory / TRIAL).exists():
            return Verdict.load(directory / TRIAL)
        verdict = run(scenario, directory)
        verdict.save(directory / TRIAL)
        return verdict
