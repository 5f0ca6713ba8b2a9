"""Device slots and leases (harness/run/plan/devices.py), with virtual CPU slots: leases are
disjoint across threads and processes, all-or-nothing, and die with their holder."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import pytest

from harness.run.plan.devices import (
    DeviceError,
    DevicePool,
    configured_count,
    overlapping_leases,
    read_lease_log,
)
from tests.kit import ROOT, wait_process
from tests.kit.present import present


def pool(tmp_path, count=4, kind="cpu", log=True) -> DevicePool:
    return DevicePool(count, kind, lock_dir=tmp_path / "locks", lease_log=tmp_path / "leases.jsonl" if log else None)


def test_leases_are_disjoint_and_all_or_nothing(tmp_path):
    p = pool(tmp_path)
    a = p.try_lease(3, "a")
    assert a is not None and len(a.slots) == 3
    assert p.try_lease(2, "b") is None  # one slot is free, two are asked: nothing is taken
    c = p.try_lease(1, "c")
    assert c is not None and set(c.slots).isdisjoint(a.slots)
    a.release()
    b = p.try_lease(2, "b")
    assert b is not None and set(b.slots).isdisjoint(c.slots)


def test_more_devices_than_exist_is_an_error_not_a_wait(tmp_path):
    with pytest.raises(DeviceError, match="x/tp4-pp2 needs 8 devices; this machine has 4"):
        pool(tmp_path).lease(8, "x/tp4-pp2")


def test_lease_env_names_the_slots_and_on_cuda_the_physical_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gpus = pool(tmp_path, kind="cuda")
    first = gpus.try_lease(1, "first")  # held: the next lease gets slots 1 and 2
    lease = gpus.try_lease(2, "x")
    assert first is not None
    assert first.slots == [0]
    assert lease is not None
    assert lease.env() == {"HARNESS_DEVICE_SLOTS": "1,2", "CUDA_VISIBLE_DEVICES": "5,6"}
    assert "CUDA_VISIBLE_DEVICES" not in present(pool(tmp_path / "c").try_lease(1, "y")).env()


def test_device_count_from_cli_env_or_default(monkeypatch):
    monkeypatch.setenv("HARNESS_DEVICES", "8")
    assert configured_count("cpu") == 8
    assert configured_count("cpu", 3) == 3  # the command line wins
    monkeypatch.setenv("HARNESS_DEVICES", "eight")
    with pytest.raises(DeviceError, match="HARNESS_DEVICES='eight' is not a number"):
        configured_count("cpu")
    monkeypatch.delenv("HARNESS_DEVICES")
    assert configured_count("cpu") >= 4  # a TP2xPP2 scenario fits by default
    with pytest.raises(DeviceError, match=">= 1"):
        configured_count("cpu", 0)


HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from harness.run.plan.devices import DevicePool
lease = DevicePool(2, "cpu", lock_dir={locks!r}).try_lease(2, "holder")
print("held" if lease else "none", flush=True)
time.sleep(600)
"""


def test_a_killed_holder_frees_its_slots(tmp_path):
    p = pool(tmp_path, count=2, log=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(root=str(ROOT), locks=str(p.lock_dir))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert p.try_lease(1, "waiter") is None
        holder.kill()  # SIGKILL: no cleanup code runs, the kernel drops the locks
        holder.wait()
        lease = p.lease(2, "waiter")  # would block forever if the slots leaked
        assert sorted(lease.slots) == [0, 1]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


WORKER = """
import random, sys, time
sys.path.insert(0, {root!r})
from harness.run.plan.devices import DevicePool
p = DevicePool(4, "cpu", lock_dir={locks!r}, lease_log={log!r})
rng = random.Random({seed})
for i in range(12):
    with p.lease(rng.choice([1, 1, 2, 4]), "proc{seed}/%d" % i):
        time.sleep(rng.uniform(0, 0.02))
"""


def test_concurrent_processes_and_threads_never_share_a_slot(tmp_path):
    p = pool(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER.format(root=str(ROOT), locks=str(p.lock_dir), log=str(p.lease_log), seed=seed)]
        )
        for seed in range(3)
    ]

    def thread_worker(seed):
        rng = random.Random(100 + seed)
        for i in range(12):
            with p.lease(rng.choice([1, 2, 3]), f"thread{seed}/{i}"):
                time.sleep(rng.uniform(0, 0.02))

    threads = [threading.Thread(target=thread_worker, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(wait_process(proc, 300, "a lease worker process to finish") == 0 for proc in procs)
    records = read_lease_log(present(p.lease_log))
    assert len({r["scenario"] for r in records}) == 6 * 12  # every lease was logged
    assert overlapping_leases(records) == []


def test_overlap_check_finds_a_shared_slot():
    """The check the lease tests rely on must be able to fail."""
    held = {"pool": "cpu", "slot": 1, "scenario": "a", "acquired": 10.0, "released": 20.0}
    clash = {"pool": "cpu", "slot": 1, "scenario": "b", "acquired": 19.0, "released": 25.0}
    other_pool = {"pool": "nodes-x", "slot": 1, "scenario": "c", "acquired": 15.0, "released": 16.0}
    after = {"pool": "cpu", "slot": 1, "scenario": "d", "acquired": 25.0, "released": 26.0}
    assert overlapping_leases([held, clash, other_pool, after]) == [(held, clash)]
