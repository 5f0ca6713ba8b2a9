"""The order a gate runs in (harness/run/plan/priority.py), without launching anything: what
failed in the history store for this gate first, then what drifted, then what a change
rule picked, then the rest; largest first within each."""

from __future__ import annotations

import dataclasses

from harness.contract.verdict import Verdict
from harness.run import session
from harness.run.plan.changes import picked_by_a_rule, select_for_changes
from harness.run.plan.devices import DevicePool
from harness.run.plan.planning import plan_run
from harness.run.plan.priority import (
    DRIFTED_BEFORE,
    FAILED_BEFORE,
    RULE_PICKED,
    THE_REST,
    Suspects,
    first_failure_order,
    order_lines,
    order_meta,
)
from harness.run.plan.schedule import costs, largest_first
from harness.run.report import write_report
from harness.run.report.history import load_history
from harness.run.report.regressions import gate_suspects, suspects_from_history
from harness.run.request import RunConfig
from harness.run.runner import RunContext
from harness.run.session import Progress, _run_packed
from tests.kit.handmade import BIG_SUITE, failing, make_run, passing, suite_scenarios

SUITE = (
    BIG_SUITE
    + """gates: {pr: ["*"]}
changes:
  smoke: [tp1-pp1]
  rules:
    - {paths: [src/pp.py], scenarios: ["*-pp2"]}
"""
)


def scenarios(tmp_path):
    return suite_scenarios(tmp_path, SUITE)


def ids(ordered):
    return [s.name for s in ordered]


def test_failed_then_drifted_then_rule_picked_then_the_rest_largest_first_within_each(tmp_path):
    sc = scenarios(tmp_path)
    cost = costs(sc, {})  # unmeasured: device-seconds go by devices alone
    suspects = Suspects(failed=frozenset({"big/tp1-pp1", "big/tp2-pp1"}), drifted=frozenset({"big/tp1-pp2"}))
    ordered, tiered = first_failure_order(sc, cost, suspects, rule_picked={"big/tp2-pp2", "big/tp1-pp2"})
    assert ids(ordered) == [
        "tp2-pp1",
        "tp1-pp1",  # failed before, largest first
        "tp1-pp2",  # drifted (also rule-picked: the higher tier wins)
        "tp2-pp2",  # picked by a change rule
        "tp4-pp2",
        "tp4-pp1",
    ]  # the rest, largest first
    assert [tiered[s.id].tier for s in ordered] == [FAILED_BEFORE] * 2 + [DRIFTED_BEFORE, RULE_PICKED] + [THE_REST] * 2
    assert order_meta(ordered, tiered) == {
        "failed before": ["big/tp2-pp1", "big/tp1-pp1"],
        "drifted before": ["big/tp1-pp2"],
        "picked by a change rule": ["big/tp2-pp2"],
    }
    # the packed session sorts by the same key: it keeps the tiers (schedule.largest_first)
    assert ids(largest_first(list(reversed(sc)), tiered)) == ids(ordered)


def test_without_history_or_changes_the_order_is_largest_first(tmp_path):
    sc = scenarios(tmp_path)
    cost = costs(sc, {"big/tp1-pp1": 100.0})  # measured: one long single-device scenario
    ordered, _ = first_failure_order(sc, cost, Suspects(), rule_picked=set())
    assert ids(ordered) == ["tp1-pp1", "tp4-pp2", "tp2-pp2", "tp4-pp1", "tp1-pp2", "tp2-pp1"]


def test_rule_picks_are_the_scenarios_a_rule_mapped_a_changed_path_to_not_the_smoke_set(tmp_path):
    picks = select_for_changes(scenarios(tmp_path), ["src/pp.py"])
    assert set(picks) == {"big/tp1-pp1", "big/tp1-pp2", "big/tp2-pp2", "big/tp4-pp2"}
    assert picked_by_a_rule(picks) == {"big/tp1-pp2", "big/tp2-pp2", "big/tp4-pp2"}


def record(tmp_path, run_id, verdicts, started, gate="pr", **meta):
    write_report(
        make_run(tmp_path / "reports", run_id, verdicts, gate=gate, started=started, **meta), history_dir=tmp_path / "history"
    )


def test_suspects_are_the_latest_failures_and_drifts_of_this_gate(tmp_path):
    for n in range(5):  # a steady band for tp1-pp1's metric
        record(tmp_path, f"r{n}", [passing("big/tp1-pp1"), passing("big/tp2-pp1"), failing("big/tp4-pp1")], 1000.0 + n)
    record(
        tmp_path, "latest", [passing("big/tp1-pp1", max_dlogprob=1e-4), failing("big/tp2-pp1"), passing("big/tp4-pp1")], 2000.0
    )
    record(tmp_path, "other-gate", [failing("big/tp1-pp2")], 3000.0, gate="nightly")
    suspects = suspects_from_history(load_history(tmp_path / "history"), "pr")
    assert suspects.failed == {"big/tp2-pp1"}  # tp4-pp1 failed before, passes now: fixed, no suspect
    assert suspects.drifted == {"big/tp1-pp1"}  # passed, 10x its band
    assert suspects_from_history(load_history(tmp_path / "history"), "nightly").failed == {"big/tp1-pp2"}
    assert suspects_from_history(load_history(tmp_path / "nothing"), "pr") == Suspects()


def test_a_failure_of_a_run_stopped_early_still_goes_first(tmp_path):
    # --exitfirst (or Ctrl-C) leaves a run incomplete: never the report's "previous run",
    # but its failure is the best guess of what fails next
    record(tmp_path, "whole", [passing("big/tp1-pp1"), passing("big/tp4-pp2")], 1000.0)
    record(tmp_path, "stopped", [failing("big/tp4-pp2")], 2000.0, scenarios=["big/tp4-pp2", "big/tp1-pp1"])
    assert suspects_from_history(load_history(tmp_path / "history"), "pr").failed == {"big/tp4-pp2"}


def test_a_gate_run_is_planned_failures_first_and_says_so(tmp_path, capsys):
    sc = scenarios(tmp_path)
    record(tmp_path, "before", [passing("big/tp4-pp2"), failing("big/tp1-pp1")], 1000.0)
    request = RunConfig(report_dir=tmp_path / "reports", gate="pr", devices=8)
    plan = plan_run(request, sc, sc, tmp_path, gate_suspects(tmp_path / "history", "pr"))
    assert ids(plan.scenarios)[0] == "tp1-pp1"
    assert plan.meta["order"] == {"failed before": ["big/tp1-pp1"]}
    assert "harness: first, 1 failed before: big/tp1-pp1" in capsys.readouterr().out
    adhoc = plan_run(
        RunConfig(report_dir=tmp_path / "reports", devices=8), sc, sc, tmp_path, gate_suspects(tmp_path / "history", None)
    )
    assert ids(adhoc.scenarios) == ids(sc) and "order" not in adhoc.meta  # hand-picked ids: as given


# --- --exitfirst in the session, with a stand-in for run_scenario (no ranks) -------------


def test_exitfirst_starts_nothing_after_a_failure_and_stops_what_runs_beside_it(tmp_path):
    sc = [s for s in scenarios(tmp_path) if s.name in ("tp2-pp1", "tp1-pp2", "tp1-pp1", "tp2-pp2")]
    cost = costs(sc, {"big/tp2-pp1": 5.0, "big/tp1-pp2": 500.0})
    stopped = []

    def run(scenario, run_dir, opts, lease):
        if scenario.name == "tp2-pp1":
            return Verdict(scenario.id, "crash", "rank 1 crashed")
        opts.cancel.wait(30)  # a long scenario: ends only when cancelled, as a launch does
        stopped.append(scenario.id)
        raise KeyboardInterrupt("cancelled")

    devices = DevicePool(4, "cpu", lock_dir=tmp_path / "locks")
    tiered = {sid: dataclasses.replace(c, tier=0 if sid == "big/tp2-pp1" else 3) for sid, c in cost.items()}
    progress = Progress()
    progress.start(len(sc), tmp_path)
    verdicts = _run_packed(sc, tmp_path, RunContext(RunConfig(jobs=2, exitfirst=True), devices), progress, tiered, run=run)
    assert [v.scenario for v in verdicts] == ["big/tp2-pp1"]
    assert stopped == ["big/tp1-pp2"]  # started beside the failure (the largest of the rest), then stopped
    assert devices.try_lease(4, "after") is not None  # every lease was given back


def test_exitfirst_in_order_stops_after_the_first_failure(tmp_path, monkeypatch):
    sc = scenarios(tmp_path)[:4]
    ran = []

    def run_scenario(scenario, run_dir, opts):
        ran.append(scenario.id)
        return Verdict(scenario.id, "fail" if len(ran) == 2 else "pass", "r")

    monkeypatch.setattr(session, "run_scenario", run_scenario)
    verdicts = session.run_session(sc, tmp_path, RunContext(RunConfig(exitfirst=True)), Progress())
    assert [v.verdict for v in verdicts] == ["pass", "fail"] and ran == [s.id for s in sc[:2]]
    assert len(session.run_session(sc, tmp_path, RunContext(), Progress())) == 4  # without it, all of them


def test_a_long_tier_is_said_in_part_and_kept_whole_in_run_json():
    many = [f"s/tp{i}" for i in range(12)]
    assert order_lines({"failed before": many}) == [
        "harness: first, 12 failed before: s/tp0, s/tp1, s/tp2, s/tp3, s/tp4, s/tp5, s/tp6, s/tp7 and 4 more"
    ]
