"""At scale, end to end with real ranks on the llama-tiny suite and its stored golden:
`harness run --jobs 2` and `pytest scenarios/ -n 2` lease disjoint device slots (the
lease log proves it), the PR gate picks by changed files and says why, shards are
disjoint run directories that record the shard, and Ctrl-C with --jobs leaves nothing."""

from __future__ import annotations

import json
import shutil
import signal

import pytest

from harness.contract.rundir import logs_dir
from harness.run.plan.devices import overlapping_leases, read_lease_log
from tests.kit import (
    ROOT,
    communicate,
    harness_cli,
    outcomes,
    pytest_cli,
    run_meta,
    start_harness,
    survivors,
    wait_until,
)

pytestmark = pytest.mark.e2e
CHEAP = ["llama-tiny/tp1-pp1", "llama-tiny/tp2-pp1", "llama-tiny/tp1-pp2", "llama-tiny/tp2-pp2"]
# another suite's smoke set (scenarios/llama-kvc.yaml `changes.smoke`): always picked
SMOKE = ["llama-kvc/tp1-pp2-kvc"]


@pytest.fixture
def env(tmp_path):
    return {"HARNESS_DEVICE_LOCK_DIR": str(tmp_path / "locks"), "HARNESS_LEASE_LOG": str(tmp_path / "leases.jsonl")}


def leases_by_scenario(tmp_path) -> dict[str, dict]:
    records = read_lease_log(tmp_path / "leases.jsonl")
    assert overlapping_leases(records) == [], "two scenarios held one device slot at once"
    by: dict[str, dict] = {}
    for r in records:
        entry = by.setdefault(r["scenario"], {"slots": set(), "acquired": r["acquired"], "released": r["released"]})
        entry["slots"].add(r["slot"])
    return by


def test_pr_gate_by_changed_files_packs_two_jobs_on_disjoint_slots(tmp_path, env):
    changed = tmp_path / "changed.txt"
    changed.write_text("harness/engines/launch/__init__.py\n")
    # llama-tiny and one other suite whose smoke set is cheap: what a rule picks and what a
    # smoke set adds; more suites only add scenarios (the eval suites' take a minute each)
    suites = tmp_path / "scenarios"
    suites.mkdir()
    for name in ("llama-tiny", "llama-kvc"):
        shutil.copy(ROOT / "scenarios" / f"{name}.yaml", suites)
    result = harness_cli(
        "run",
        "--gate",
        "pr",
        "--changed-files",
        str(changed),
        "--jobs",
        "2",
        "--devices",
        "4",
        "--report-dir",
        str(tmp_path),
        "--run-id",
        "gate",
        scenarios=suites,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 changed files -> 5 scenarios" in result.stdout
    assert (
        "llama-tiny/tp2-pp2" in result.stdout
        and "smoke set; harness/engines/launch/__init__.py (changes.rules.3" in result.stdout
    )
    assert outcomes(tmp_path / "gate") == {sid: "pass" for sid in CHEAP + SMOKE}
    meta = run_meta(tmp_path / "gate")
    assert meta["selection"]["changed_files"] == ["harness/engines/launch/__init__.py"]
    assert meta["devices"] == {"kind": "cpu", "count": 4, "jobs": 2}
    leases = leases_by_scenario(tmp_path)
    assert {sid: len(lease["slots"]) for sid, lease in leases.items()} == {
        "llama-tiny/tp1-pp1": 1,
        "llama-tiny/tp2-pp1": 2,
        "llama-tiny/tp1-pp2": 2,
        "llama-tiny/tp2-pp2": 4,
        "llama-kvc/tp1-pp2-kvc": 2,
    }
    # largest first: every 2-slot scenario started after tp2-pp2 gave its 4 slots back ...
    pairs = [lease for lease in leases.values() if len(lease["slots"]) == 2]
    assert min(p["acquired"] for p in pairs) >= leases["llama-tiny/tp2-pp2"]["released"]
    # ... and two of them then ran side by side, on disjoint slots
    together = [
        (a, b)
        for i, a in enumerate(pairs)
        for b in pairs[i + 1 :]
        if a["acquired"] < b["released"] and b["acquired"] < a["released"]
    ]
    assert together and all(a["slots"].isdisjoint(b["slots"]) for a, b in together)
    assert not survivors(tmp_path / "gate")


def test_pytest_under_xdist_leases_disjoint_slots(tmp_path, env):
    # two 2-slot scenarios on 4 slots: xdist hands one to each worker (fewer items than twice
    # the workers go round-robin) and each leases while its rank pool starts, so the two
    # leases are held at once; the scenarios are the cheap part of a worker, its start is not.
    pair = ["llama-tiny/tp2-pp1", "llama-tiny/tp1-pp2"]
    items = [f"scenarios/llama-tiny.yaml::{sid.split('/')[1]}" for sid in pair]
    result = pytest_cli(
        *items,
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "--harness-devices",
        "4",
        "--harness-report-dir",
        str(tmp_path / "reports"),
        env=env,
        what="pytest -n 2 over two scenarios",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout
    leases = leases_by_scenario(tmp_path)
    assert set(leases) == set(pair) and all(len(lease["slots"]) == 2 for lease in leases.values())
    assert len({r["pid"] for r in read_lease_log(tmp_path / "leases.jsonl")}) == 2  # both xdist workers leased


def test_shards_are_disjoint_run_directories_that_record_the_shard(tmp_path, env):
    # two scenarios, one a shard: how a shard is packed (largest first, LPT) is test_schedule.py's;
    # here the measured durations must decide it. Without them tp1-pp2 (2 devices) is the
    # bigger; with them tp1-pp1 is (5.0 device-seconds against 2 x 2.0).
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"llama-tiny/tp1-pp1": 5.0, "llama-tiny/tp1-pp2": 2.0}))
    ids = ["llama-tiny/tp1-pp1", "llama-tiny/tp1-pp2"]
    runs = {}
    for shard in ("1/2", "2/2"):
        result = harness_cli(
            "run",
            *ids,
            "--shard",
            shard,
            "--durations",
            str(durations),
            "--devices",
            "4",
            "--report-dir",
            str(tmp_path / "reports"),
            "--run-id",
            "shard" + shard[0],
            env=env,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs[shard] = tmp_path / "reports" / ("shard" + shard[0])
    assert outcomes(runs["1/2"]) == {"llama-tiny/tp1-pp1": "pass"}
    assert outcomes(runs["2/2"]) == {"llama-tiny/tp1-pp2": "pass"}
    shard = run_meta(runs["2/2"])["shard"]
    assert (shard["index"], shard["count"], shard["of"], shard["device_seconds"]) == (2, 2, 2, 4.0)
    result = harness_cli(
        "durations", "--report-dir", str(tmp_path / "reports"), "--out", str(tmp_path / "measured.json"), env=env
    )
    assert result.returncode == 0, result.stderr
    assert set(json.loads((tmp_path / "measured.json").read_text())) == set(ids)
    merged = tmp_path / "merged"
    result = harness_cli("report", "--merge", str(runs["1/2"]), str(runs["2/2"]), "-o", str(merged), env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert outcomes(merged) == {sid: "pass" for sid in ids}


def test_ctrl_c_with_two_jobs_stops_both_runs_and_frees_the_slots(tmp_path, env):
    run_dir = tmp_path / "r" / "int"
    proc = start_harness(
        "run",
        "llama-tiny/tp1-pp1",
        "llama-tiny/tp2-pp1",
        "--jobs",
        "2",
        "--devices",
        "4",
        "--fault",
        "rank-hang@0",
        "--report-dir",
        str(tmp_path / "r"),
        "--run-id",
        "int",
        env={**env, "HARNESS_STALL_WINDOW_S": "0"},
    )  # hung until the Ctrl-C, however slow the start
    try:
        logs = [logs_dir(run_dir, sid) / "rank0.log" for sid in ("llama-tiny/tp1-pp1", "llama-tiny/tp2-pp1")]
        wait_until(
            lambda: all(log.exists() for log in logs) and len(survivors(run_dir)) >= 3,
            120,
            "the ranks of both scenarios to start",
            poll_s=0.2,
            proc=proc,
        )
        proc.send_signal(signal.SIGINT)
        out, _ = communicate(proc, 120, "the interrupted harness to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert run_meta(run_dir)["interrupted"] is True
    assert not survivors(run_dir)
    assert set(leases_by_scenario(tmp_path)) == {"llama-tiny/tp1-pp1", "llama-tiny/tp2-pp1"}  # both released
