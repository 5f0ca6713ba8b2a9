"""Costs, largest-first packing, shards and change-based selection, without launching
ranks: the session is driven with a stand-in for run_scenario that holds its lease
for a while, so the packing logic itself is what is tested."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from harness.contract.rundir import VERDICT, scenarios_root, verdict_path
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.schema import ScenarioError
from harness.run.plan.changes import select_for_changes
from harness.run.plan.devices import DevicePool, overlapping_leases, read_lease_log
from harness.run.plan.schedule import (
    FALLBACK_S,
    costs,
    largest_first,
    load_durations,
    lower_bound_s,
    parse_shard,
    recorded_durations,
    split_shards,
)
from harness.run.request import RunConfig
from harness.run.runner import RunContext
from harness.run.session import Progress, _run_packed
from tests.kit.handmade import BIG_SUITE, suite_scenarios
from tests.kit.present import present

SUITE = BIG_SUITE + "gates: {pr: [tp1-pp1, tp2-pp2]}\n"


def scenarios(tmp_path, text=SUITE, name="big.yaml"):
    return suite_scenarios(tmp_path, text, name)


def test_cost_is_devices_times_recorded_or_fallback_duration(tmp_path):
    sc = scenarios(tmp_path)
    cost = costs(sc, {"big/tp1-pp1": 3.0})
    assert (cost["big/tp1-pp1"].devices, cost["big/tp1-pp1"].seconds, cost["big/tp1-pp1"].measured) == (1, 3.0, True)
    assert (cost["big/tp4-pp2"].devices, cost["big/tp4-pp2"].seconds, cost["big/tp4-pp2"].measured) == (8, FALLBACK_S, False)
    assert [s.name for s in largest_first(sc, cost)] == ["tp4-pp2", "tp2-pp2", "tp4-pp1", "tp1-pp2", "tp2-pp1", "tp1-pp1"]
    assert lower_bound_s(cost, 8) == pytest.approx((3 + 10 * (2 + 2 + 4 + 4 + 8)) / 8)


def test_recorded_durations_take_the_newest_verdict(tmp_path):
    for run, seconds, mtime in (("old", 9.0, 1000), ("new", 4.0, 2000)):
        path = verdict_path(tmp_path / run, "big/tp1-pp1")
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"scenario": "big/tp1-pp1", "duration_s": seconds}))
        os.utime(path, (mtime, mtime))
    broken = scenarios_root(tmp_path / "x") / "y" / VERDICT
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    not_an_object = scenarios_root(tmp_path / "x") / "z" / VERDICT  # JSON, but no verdict
    not_an_object.parent.mkdir(parents=True)
    not_an_object.write_text("[]")
    assert recorded_durations(tmp_path) == {"big/tp1-pp1": 4.0}


def test_durations_file_is_validated(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"big/tp1-pp1": 2.5}')
    bad.write_text('{"big/tp1-pp1": -1}')
    assert load_durations(good) == {"big/tp1-pp1": 2.5}
    with pytest.raises(ScenarioError, match="bad entries: \\['big/tp1-pp1'\\]"):
        load_durations(bad)
    with pytest.raises(ScenarioError, match="cannot read the durations file"):
        load_durations(tmp_path / "missing.json")


def test_shards_are_disjoint_complete_deterministic_and_balanced(tmp_path):
    sc = scenarios(tmp_path)
    cost = costs(sc, {s.id: 1.0 + i for i, s in enumerate(sc)})
    shards = split_shards(sc, 3, cost)
    ids = [s.id for shard in shards for s in shard]
    assert sorted(ids) == sorted(s.id for s in sc) and len(ids) == len(set(ids))
    assert shards == split_shards(list(sc), 3, cost)
    loads = [sum(cost[s.id].device_seconds for s in shard) for shard in shards]
    biggest = max(c.device_seconds for c in cost.values())
    assert max(loads) - min(loads) <= biggest  # greedy LPT: never off by more than one item


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_bad_shard_is_a_clear_error(text):
    with pytest.raises(ScenarioError, match="--shard must be I/N"):
        parse_shard(text)


# --- packing -------------------------------------------------------------------------


class Recorder(Progress):
    def __init__(self):
        self.started, self.finished = [], []

    def start(self, total, run_dir):
        pass

    def scenario_started(self, scenario):
        self.started.append(scenario.id)

    def scenario_finished(self, verdict):
        self.finished.append(verdict.scenario)


def fake_run(hold_s: float, concurrent: list, lock: threading.Lock):
    """Stands in for run_scenario: holds its lease for hold_s and records how many run."""
    running = [0]

    def run(scenario, run_dir, opts, lease):
        with lock:
            running[0] += 1
            concurrent.append(running[0])
        time.sleep(hold_s)
        with lock:
            running[0] -= 1
        verdict = "unsupported" if lease is None else "pass"
        return Verdict(scenario.id, verdict, f"slots {lease.slots if lease else None}")

    return run


def test_packed_session_runs_everything_on_disjoint_slots_within_jobs(tmp_path):
    sc = scenarios(tmp_path)
    devices = DevicePool(8, "cpu", lock_dir=tmp_path / "locks", lease_log=tmp_path / "leases.jsonl")
    concurrent: list[int] = []
    lock = threading.Lock()
    progress = Recorder()
    verdicts = _run_packed(
        sc, tmp_path, RunContext(RunConfig(jobs=3), devices), progress, costs(sc, {}), run=fake_run(0.3, concurrent, lock)
    )
    assert sorted(v.scenario for v in verdicts) == sorted(s.id for s in sc)
    assert progress.started[0] == "big/tp4-pp2"  # largest first
    assert sorted(progress.finished) == sorted(progress.started)
    assert max(concurrent) <= 3
    records = read_lease_log(present(devices.lease_log))
    assert overlapping_leases(records) == []
    assert {r["scenario"] for r in records} == {s.id for s in sc}
    assert sum(1 for r in records if r["scenario"] == "big/tp4-pp2") == 8


def test_a_scenario_bigger_than_the_machine_does_not_wait(tmp_path):
    sc = [s for s in scenarios(tmp_path) if s.name in ("tp4-pp2", "tp1-pp1")]
    devices = DevicePool(4, "cpu", lock_dir=tmp_path / "locks")
    verdicts = _run_packed(
        sc, tmp_path, RunContext(RunConfig(jobs=2), devices), Recorder(), costs(sc, {}), run=fake_run(0.1, [], threading.Lock())
    )
    by_id = {v.scenario: v.verdict for v in verdicts}
    # the stand-in marks "ran without a lease" as unsupported; the runner says why (test_scale_e2e)
    assert by_id == {"big/tp4-pp2": "unsupported", "big/tp1-pp1": "pass"}


# --- change-based selection ------------------------------------------------------------

MAPPED = (
    SUITE
    + """
changes:
  smoke: [tp1-pp1]
  rules:
    - {paths: ["src/pipeline.py"], scenarios: ["*-pp2"]}
    - {paths: ["docs/*"], scenarios: []}
"""
)


def test_changes_pick_mapped_scenarios_plus_smoke_with_reasons(tmp_path):
    sc = scenarios(tmp_path, MAPPED)
    picks = select_for_changes(sc, ["src/pipeline.py", "docs/guide/x.md"])
    assert list(picks) == ["big/tp1-pp1", "big/tp1-pp2", "big/tp2-pp2", "big/tp4-pp2"]
    assert picks["big/tp1-pp1"] == ["smoke set"]
    assert picks["big/tp2-pp2"] == ["src/pipeline.py (changes.rules.0 of big.yaml)"]
    assert select_for_changes(sc, ["docs/a.md"]) == {"big/tp1-pp1": ["smoke set"]}


def test_an_unmapped_change_runs_the_whole_pr_gate(tmp_path):
    sc = scenarios(tmp_path, MAPPED)
    picks = select_for_changes(sc, ["src/unknown.py"])
    assert set(picks) == {"big/tp1-pp1", "big/tp2-pp2"}
    assert picks["big/tp2-pp2"] == ["src/unknown.py is mapped by no scenario file: the whole pr gate"]


def test_a_suite_outside_the_pr_gate_is_not_enlisted_by_its_change_map(tmp_path):
    other = MAPPED.replace("suite: big", "suite: other")
    other = other[: other.index("gates:")] + "gates: {vllm: [tp1-pp1]}\n" + other[other.index("changes:") :]
    sc = scenarios(tmp_path, MAPPED) + scenarios(tmp_path, other, "other.yaml")
    picks = select_for_changes(sc, ["src/pipeline.py"])
    assert picks and not any(sid.startswith("other/") for sid in picks)  # neither its smoke set nor its rules


def test_a_suite_without_a_change_map_keeps_its_pr_gate(tmp_path):
    sc = scenarios(tmp_path, MAPPED) + scenarios(tmp_path, SUITE.replace("suite: big", "suite: other"), "other.yaml")
    picks = select_for_changes(sc, ["docs/a.md"])
    assert picks["other/tp2-pp2"] == ["suite 'other' has no change map: its whole pr gate"]
    assert "big/tp2-pp2" not in picks


@pytest.mark.parametrize(
    "changes, message",
    [
        ("changes: {smoke: [tp8-pp1]}", "changes.smoke: pattern 'tp8-pp1' matches no scenario of suite 'big'"),
        (
            "changes: {smoke: [tp1-pp1], rules: [{paths: [a.py], scenarios: ['tp3*']}]}",
            "changes.rules.0.scenarios: pattern 'tp3*' matches no scenario",
        ),
        ("changes: {smoke: [tp1-pp1], rules: [{paths: [/abs/a.py], scenarios: []}]}", "must be relative to the repository root"),
        ("changes: {smoke: [tp1-pp1], rules: [{paths: [], scenarios: []}]}", "changes.rules.0.paths"),
        ("changes: {smoke: []}", "changes.smoke"),
        ("changes: {smoke: [tp1-pp1], extra: 1}", "changes.extra"),
    ],
)
def test_bad_change_maps_name_file_and_field(tmp_path, changes, message):
    with pytest.raises(ScenarioError, match="big.yaml") as info:
        scenarios(tmp_path, SUITE + changes + "\n")
    assert message in str(info.value)
