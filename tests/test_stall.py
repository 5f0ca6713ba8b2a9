"""The stall detector: a hung rank is declared from heartbeats, long before the timeout,
and a slow but moving rank never is.

The unit tests drive StallWatch with a fake clock, heartbeat files and activity
samples; the e2e tests launch real ranks (tests/ranks/heartbeat.py) with a 600 s
timeout, so a hang verdict can only come from the detector (the reference engine's
through the CLI: tests/test_e2e.py, one run with its hang-location test). No test
asserts a wall-clock time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

import harness.engines.launch.rankside as rankside
from harness.contract.launchplan import LaunchPlan
from harness.engines.launch import Cluster, LaunchOutcome, Node, run_ranks
from harness.engines.launch.stall import (
    STALL_WINDOW_ENV,
    Stall,
    StallWatch,
    stall_window_s,
    tree_activity,
)
from tests.kit.present import present
from tests.kit.ranks import RANKS

HEARTBEAT_RANKS = RANKS / "heartbeat.py"
WINDOW = 20.0


class Fake:
    """Heartbeat files in a tmp dir and activity samples set by hand."""

    def __init__(self, tmp_path: Path, world: int = 2):
        self.files = {r: tmp_path / f"rank{r}.heartbeat" for r in range(world)}
        self.cpu = {r: 0.0 for r in range(world)}
        self.watch = StallWatch(self.files, lambda ranks: {r: (self.cpu[r], 0) for r in ranks}, WINDOW)
        self.beats = 0

    def beat(self, rank: int, phase: str) -> None:
        self.beats += 1
        self.files[rank].write_text(f"{self.beats} {phase}\n")

    def check_over(self, start: float, seconds: float, live=(0, 1), step: float = 1.0, busy: int | None = None):
        """Poll every `step` s from `start` for `seconds`; rank `busy` uses a full core."""
        t = start
        while t <= start + seconds:
            if busy is not None:
                self.cpu[busy] += step
            stall = self.watch.check(t, list(live))
            if stall:
                return t, stall
            t += step
        return t, None


def test_a_rank_idle_outside_a_collective_while_its_peer_waits_is_a_stall(tmp_path):
    f = Fake(tmp_path)
    f.beat(0, "collective")
    f.beat(1, "compute")
    t, stall = f.check_over(100.0, 60)
    assert stall is not None and stall.waiting == [0] and stall.idle == [1]
    assert WINDOW <= stall.quiet_s <= WINDOW + 1 and t <= 100 + WINDOW + 1
    assert "stall detector after 20s without progress" in stall.describe()
    assert "rank 0 waiting in a collective, rank 1 idle outside one" in stall.describe()


def test_a_computing_rank_that_uses_cpu_is_moving(tmp_path):
    f = Fake(tmp_path)
    f.beat(0, "collective")
    f.beat(1, "compute")
    _, stall = f.check_over(100.0, 120, busy=1)  # compiling for two minutes: no beat, but CPU
    assert stall is None
    _, stall = f.check_over(221.0, 60)  # then it stops using CPU: now it is a stall
    assert stall is not None and stall.idle == [1]


def test_cpu_of_a_rank_in_a_collective_is_not_progress(tmp_path):
    f = Fake(tmp_path)
    f.beat(0, "collective")
    f.beat(1, "collective")  # both wait (mismatched collectives); gloo may poll
    _, stall = f.check_over(100.0, 60, busy=0)
    assert stall is not None and stall.waiting == [0, 1] and stall.idle == []


def test_beats_are_progress(tmp_path):
    f = Fake(tmp_path)
    t = 100.0
    for _ in range(30):  # a beat every 5 s, never quiet for the window
        f.beat(0, "collective")
        f.beat(1, "compute")
        _, stall = f.check_over(t, 4.0)
        assert stall is None
        t += 5.0


def test_no_stall_while_nobody_waits_in_a_collective(tmp_path):
    f = Fake(tmp_path)
    f.beat(0, "compute")
    f.beat(1, "compute")
    assert f.check_over(100.0, 120)[1] is None


def test_not_armed_until_every_live_rank_beat(tmp_path):
    f = Fake(tmp_path)
    f.beat(0, "collective")  # rank 1 never beats: still importing, or an engine without heartbeats
    assert f.check_over(100.0, 120)[1] is None
    # rank 1 gone: the live rank alone can stall
    _, stall = f.check_over(221.0, 60, live=(0,))
    assert stall is not None and stall.waiting == [0]


def test_an_exit_is_progress(tmp_path):
    f = Fake(tmp_path, world=3)
    for r in range(3):
        f.beat(r, "collective")
    assert f.check_over(100.0, 15, live=(0, 1, 2))[1] is None
    t, stall = f.check_over(116.0, 60, live=(0, 1))  # rank 2 exits at 116: the clock restarts
    assert stall is not None and t >= 116 + WINDOW


def test_window_zero_switches_the_detector_off(tmp_path, monkeypatch):
    f = Fake(tmp_path)
    f.watch.window_s = 0
    f.beat(0, "collective")
    f.beat(1, "compute")
    assert f.check_over(100.0, 120)[1] is None
    monkeypatch.setenv(STALL_WINDOW_ENV, "0")
    assert stall_window_s() == 0
    monkeypatch.setenv(STALL_WINDOW_ENV, "2.5")
    assert stall_window_s() == 2.5
    monkeypatch.delenv(STALL_WINDOW_ENV)
    assert stall_window_s() == WINDOW


def test_stall_round_trips_through_the_outcome_dict():
    stall = Stall(20.0, 20.3, [0, 2], [1])
    out = LaunchOutcome("hang", 21.0, stall=asdict(stall))
    assert out.hang_reason().startswith("declared by the stall detector after 20s without progress")
    assert "ranks 0, 2 waiting in a collective" in out.hang_reason()
    assert LaunchOutcome("hang", 300.4).hang_reason() == "no result after 300s (the timeout)"


def test_heartbeat_writes_one_fixed_size_record(tmp_path, monkeypatch):
    path = tmp_path / "rank0.heartbeat"
    monkeypatch.setenv(rankside.HEARTBEAT_FILE_ENV, str(path))
    monkeypatch.setattr(rankside, "_beat_fd", None)
    monkeypatch.setattr(rankside, "_beat_count", 0)
    with rankside.in_collective():
        assert path.read_text().split() == ["1", "collective"]
    assert path.read_text().split() == ["2", "compute"]
    for _ in range(1000):
        rankside.heartbeat()
    assert path.read_text().split() == ["1002", "compute"]
    assert path.stat().st_size == rankside.HEARTBEAT_RECORD_BYTES
    os.close(present(rankside._beat_fd))


def test_heartbeat_without_a_launcher_does_nothing(monkeypatch):
    monkeypatch.delenv(rankside.HEARTBEAT_FILE_ENV, raising=False)
    monkeypatch.setattr(rankside, "_beat_fd", None)
    rankside.heartbeat("collective")
    assert rankside._beat_fd == -1


@pytest.mark.e2e  # starts a process that burns CPU
def test_tree_activity_counts_children():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint(flush=True)\ninput()"
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # it has used its 0.5 s of CPU
        child_cpu = tree_activity([child.pid])[child.pid][0]
        assert child_cpu >= 0.4  # clock ticks round down
        assert tree_activity([os.getpid()])[os.getpid()][0] >= child_cpu
    finally:
        child.communicate(b"\n")


# --- real ranks ------------------------------------------------------------------------


def launch_heartbeat_ranks(tmp_path: Path, mode: str, window_s: float, cluster: Cluster | None = None, **env) -> LaunchOutcome:
    plan = LaunchPlan(2, [sys.executable, str(HEARTBEAT_RANKS)], {"RANK_MODE": mode, **env})
    os.environ[STALL_WINDOW_ENV] = str(window_s)
    try:
        return run_ranks(plan, tmp_path / "logs", timeout_s=600, cluster=cluster)
    finally:
        del os.environ[STALL_WINDOW_ENV]


@pytest.mark.e2e
def test_a_sleeping_rank_is_declared_hung_by_the_stall_detector(tmp_path):
    out = launch_heartbeat_ranks(tmp_path, "sleep", window_s=3)
    assert out.status == "hang", out
    assert out.stall is not None, "declared by the timeout, not the stall detector"
    assert out.stall["waiting"] == [0] and out.stall["idle"] == [1], out.stall
    assert out.stuck_at[1].endswith("in sleep_forever"), out.stuck_at
    assert out.stuck_at[0].endswith("in barrier"), out.stuck_at
    assert all("(most recent call first)" in out.stacks[r] for r in (0, 1))


@pytest.mark.e2e
def test_a_rank_computing_longer_than_the_window_is_not_hung(tmp_path):
    # rank 1 computes for 4 windows without a heartbeat while rank 0 waits in a collective
    out = launch_heartbeat_ranks(tmp_path, "busy", window_s=2, BUSY_S="8")
    assert out.status == "ok", (out.status, out.stall, out.stuck_at)


REMOTE_LIKE = ("setsid", "-f", "-w")  # as in test_launch_nodes: /proc of the rank is not the launcher's to read


def remote_like_nodes() -> Cluster:
    return Cluster(tuple(Node(f"n{i}", REMOTE_LIKE, 1) for i in range(2)), "127.0.0.1")


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs util-linux setsid")
def test_on_nodes_a_sleeping_rank_is_declared_hung_by_the_stall_detector(tmp_path):
    out = launch_heartbeat_ranks(tmp_path, "sleep", window_s=3, cluster=remote_like_nodes())
    assert out.status == "hang" and out.stall is not None, (out.status, out.stall)
    assert out.stall["idle"] == [1] and out.stuck_at[1].endswith("in sleep_forever"), (out.stall, out.stuck_at)


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs util-linux setsid")
def test_on_nodes_a_computing_rank_is_seen_moving_through_its_agent(tmp_path):
    out = launch_heartbeat_ranks(tmp_path, "busy", window_s=2, cluster=remote_like_nodes(), BUSY_S="8")
    assert out.status == "ok", (out.status, out.stall, out.stuck_at)
    assert (tmp_path / "logs" / "rank1.heartbeat.activity").exists()


# The detector ending a real reference-engine run through the CLI (the rank-hang fault, a 600 s
# timeout): tests/test_e2e.py, test_rank_that_hangs_is_declared_by_the_stall_detector_with_every_rank_located.
