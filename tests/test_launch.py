"""The launcher, with real processes and real torch.distributed (gloo).

Every case checks afterwards that no process of the run survives: the ranks write
their pids and the pid of a grandchild (`sleep 600`) they spawn into $PID_DIR.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import harness.engines.launch as launch
from harness.contract.launchplan import LaunchPlan
from harness.engines.launch import LaunchOutcome, parse_stack_dump, run_ranks
from tests.kit import (
    assert_no_survivors,
    communicate,
    ranks_ready,
    scaled,
    sigint_as_from_a_terminal,
    timeout_message,
    wait_until,
)
from tests.kit.present import present
from tests.kit.ranks import ALLREDUCE, POOL_PRELOAD, RANKS, launch_until_hung

pytestmark = pytest.mark.e2e  # starts real rank processes


@pytest.fixture
def dirs(tmp_path):
    logs, pids = tmp_path / "logs", tmp_path / "pids"
    pids.mkdir()
    return logs, pids


# How a rank process comes to be: started fresh (python SCRIPT), or forked from the
# rank pool's zygote (python -m MODULE with preload modules, harness/engines/launch/pool.py).
# The launcher's promises (verdicts, blame, stacks, no survivors) hold for both.
WAYS = ("fresh", "pool")


def rank_command(way: str) -> dict:
    if way == "pool":
        return {"argv": [sys.executable, "-m", "tests.ranks.allreduce"], "preload": list(POOL_PRELOAD)}
    return {"argv": [sys.executable, str(ALLREDUCE)]}


def launch_case(
    dirs,
    mode: str,
    world_size: int = 2,
    timeout_s: float = 60,
    env=None,
    way: str = "fresh",
    budget_s: float | None = None,
    started: int | None = None,
    **plan_env,
) -> LaunchOutcome:
    """`budget_s`: the launcher's timeout as given (a test that compares with it reads it once);
    else scaled(timeout_s). `started`: how many ranks must have started (world_size unless
    given: a hang test's short try, tests/kit/ranks.py, may end before any did)."""
    logs, pids = dirs
    plan = LaunchPlan(
        world_size=world_size,
        env={"RANK_MODE": mode, "PID_DIR": str(pids), **plan_env},
        **rank_command(way),
    )
    out = run_ranks(plan, logs, timeout_s=scaled(timeout_s) if budget_s is None else budget_s, env=env)
    started = world_size if started is None else started
    assert_no_survivors(pids, started)
    parents = {int((pids / f"parent{r}").read_text()) for r in range(world_size) if (pids / f"parent{r}").exists()}
    assert parents or not started, sorted(os.listdir(pids))
    # the way under test, not a silent fall back to the other
    assert not parents or (os.getpid() in parents) == (way == "fresh"), (way, parents)
    if out.status == "hang" and mode != "hang":  # a slow machine, not the case under test
        pytest.fail(timeout_message(f"the {mode!r} ranks to end", out.duration_s))
    assert out.logs == {r: str(logs / f"rank{r}.log") for r in range(world_size)}
    return out


@pytest.mark.parametrize("way", WAYS)
def test_all_ok(dirs, way):
    out = launch_case(dirs, "ok", way=way)
    assert out.status == "ok", out
    assert out.failure is None and out.stacks == {} and out.stuck_at == {}
    assert out.port > 0 and out.duration_s > 0
    for r in range(2):
        assert "all_reduce ok (3.0)" in Path(out.logs[r]).read_text()


@pytest.mark.parametrize(("world_size", "way"), [(2, "fresh"), (4, "fresh"), (4, "pool")])
def test_rank_raises(dirs, world_size, way):
    out = launch_case(dirs, "raise", world_size=world_size, way=way)
    assert out.status == "crash", out
    f = present(out.failure)
    # the other ranks die too ("Connection closed by peer"), but rank 1 is the cause
    assert f.rank == 1, f
    assert f.exitcode == 1 and f.signal is None
    assert f.exception is not None and f.traceback is not None
    assert "KeyError" in f.exception and "residual" in f.exception
    assert "Traceback" in f.traceback and 'raise KeyError("residual")' in f.traceback
    assert f.log == out.logs[1]


@pytest.mark.parametrize("way", WAYS)
def test_rank_sigkilled(dirs, way):
    out = launch_case(dirs, "sigkill", way=way)
    assert out.status == "crash", out
    f = present(out.failure)
    assert (f.rank, f.exitcode, f.signal, f.exception) == (1, None, "SIGKILL", None)
    assert "all_reduce ok" in present(f.traceback)  # no error record: the tail of the log instead


@pytest.mark.parametrize("way", WAYS)
def test_rank_exits_nonzero_without_record(dirs, way):
    out = launch_case(dirs, "exit3", way=way)
    assert out.status == "crash", out
    assert out.failure is not None
    assert (out.failure.rank, out.failure.exitcode, out.failure.signal) == (1, 3, None)


@pytest.mark.parametrize("way", WAYS)
def test_a_rank_that_dies_before_writing_its_log_says_so(dirs, tmp_path, way):
    """A rank that never got to run its program leaves nothing to see in its log: fresh,
    an interpreter shim that fails at once (a broken venv); forked from the rank pool, an
    environment the OS refuses (the child dies before it opens its log). The verdict says
    so, with the exit and the command, not "crashed: exit code 1" beside a log with nothing."""
    from harness.engines import get_engine
    from harness.run.stages.ended import launch_verdict

    logs, _ = dirs
    if way == "fresh":
        shim = tmp_path / "python"
        shim.write_text("#!/bin/sh\nexit 1\n")
        shim.chmod(0o755)
        plan, env = LaunchPlan(1, [str(shim), "-m", "tests.ranks.allreduce"]), None
    else:
        plan = LaunchPlan(1, **rank_command("pool"))
        env = {"": "an empty name"}  # the CLI and scenario files refuse it; the launcher is the last line
    out = run_ranks(plan, logs, timeout_s=scaled(60), env=env)
    assert out.status == "crash" and out.failure is not None and out.failure.exitcode == 1, out
    assert not Path(out.logs[0]).exists() if way == "pool" else Path(out.logs[0]).read_text() == ""
    engine = get_engine("reference")
    v = present(launch_verdict("s/x", out, engine))
    assert v.verdict == "crash"
    assert v.reason.startswith("rank 0 died before writing anything to its log (exit code 1)"), v.reason
    assert "-m tests.ranks.allreduce" in v.reason, v.reason


@pytest.mark.parametrize("way", WAYS)
def test_hang_dumps_every_rank(tmp_path, way):
    # The deadline must outlast torch's import and the rendezvous on a loaded machine,
    # or the dump catches the ranks before they reach their hang point: a short budget
    # first, the long one where the ranks were not there yet (tests/kit/ranks.py).
    # The budget is read once: scaled() follows the machine's load, which is another by the
    # time of the assertion (71 s >= 81.5 s failed on a machine at load 5-16).
    def launch(name: str, budget: float, started: int) -> tuple[LaunchOutcome, Path]:
        logs, pids = tmp_path / name / "logs", tmp_path / name / "pids"
        pids.mkdir(parents=True)
        return launch_case((logs, pids), "hang", budget_s=budget, way=way, started=started), pids

    out, budget = launch_until_hung(launch)
    assert out.status == "hang", out
    assert out.failure is None
    assert set(out.stacks) == {0, 1} and set(out.stuck_at) == {0, 1}
    for r in (0, 1):
        assert "(most recent call first)" in out.stacks[r]
        assert "allreduce.py" in out.stacks[r]
    assert out.stuck_at[1].endswith("in hang_forever") and "allreduce.py:" in out.stuck_at[1]
    assert out.stuck_at[0].endswith("in barrier"), out.stuck_at
    # ranks that report no heartbeat keep the timeout: the stall detector never arms
    assert out.stall is None and out.duration_s >= budget


@pytest.mark.parametrize("way", WAYS)
def test_env_reaches_every_rank(dirs, way):
    _, pids = dirs
    out = launch_case(
        dirs,
        "ok",
        way=way,
        env={"HARNESS_TEST_TOKEN": "from-harness", "CUDA_VISIBLE_DEVICES": ""},
        ECHO_ENV="HARNESS_TEST_TOKEN",
    )
    assert out.status == "ok", out
    for r in range(2):
        assert (pids / f"rank{r}.env").read_text() == "from-harness"


def test_plan_env_wins_over_harness_env(dirs):
    _, pids = dirs
    out = launch_case(dirs, "ok", env={"HARNESS_TEST_TOKEN": "harness"}, ECHO_ENV="HARNESS_TEST_TOKEN", HARNESS_TEST_TOKEN="plan")
    assert out.status == "ok", out
    assert (pids / "rank0.env").read_text() == "plan"


def test_port_in_use_is_retried(dirs, monkeypatch):
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("", 0))
    busy.listen(16)
    busy_port = busy.getsockname()[1]
    real_free_port = launch.free_port
    handed: list[int] = []

    def fake_free_port():
        port = busy_port if not handed else real_free_port()
        handed.append(port)
        return port

    monkeypatch.setattr(launch, "free_port", fake_free_port)
    try:
        out = launch_case(dirs, "ok")
    finally:
        busy.close()
    assert out.status == "ok", out
    assert handed[0] == busy_port and len(handed) == 2
    assert out.port == handed[1] != busy_port


def test_launcher_exception_leaves_nothing(dirs, monkeypatch):
    logs, pids = dirs
    real_poll = launch.Attempt.poll

    def broken_poll(self):
        if len(list(pids.glob("ready*"))) == 2:
            raise RuntimeError("bug in the launcher")
        return real_poll(self)

    monkeypatch.setattr(launch.Attempt, "poll", broken_poll)
    plan = LaunchPlan(2, [sys.executable, str(ALLREDUCE)], {"RANK_MODE": "hang", "PID_DIR": str(pids)})
    with pytest.raises(RuntimeError, match="bug in the launcher"):
        run_ranks(plan, logs, timeout_s=scaled(60))
    assert_no_survivors(pids, 2)


@pytest.mark.parametrize(("sig", "way"), [(signal.SIGINT, "fresh"), (signal.SIGTERM, "fresh"), (signal.SIGINT, "pool")])
def test_interrupt_leaves_nothing(dirs, sig, way):
    logs, pids = dirs
    env = {**os.environ, "RANK_MODE": "hang", "PID_DIR": str(pids), "DRIVER_RANK_WAY": way}
    driver = subprocess.Popen(
        [sys.executable, str(RANKS / "driver.py"), str(logs)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_from_a_terminal,
    )
    try:
        wait_until(lambda: ranks_ready(pids, 2), 60, "the ranks to get ready", proc=driver)
        driver.send_signal(sig)
        stdout, _ = communicate(driver, 30, "the interrupted driver to exit")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 130, stdout
    assert json.loads(stdout.strip().splitlines()[-1]) == {"status": "interrupted", "raised": "LaunchInterrupted"}
    assert_no_survivors(pids, 2)


# --- pure functions -----------------------------------------------------------------

DUMP = """\
some earlier output
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f0000000001 (most recent call first):
  File "/work/engine.py", line 42 in forward
  File "/work/engine.py", line 7 in <module>
later output
"""


def test_parse_stack_dump_main_thread_is_last():
    dump, stuck = parse_stack_dump(DUMP)
    assert dump.startswith("Thread 0x00007f0000000002") and dump.endswith("line 7 in <module>")
    assert "later output" not in dump and "earlier" not in dump
    assert stuck == "/work/engine.py:42 in forward"
    assert parse_stack_dump("no dump here\n") == ("", None)


def test_pick_first_prefers_real_exception_over_peer_error():
    from harness.engines.launch.blame import RankExit, pick_first

    peer = RankExit(0, 1, None, 1.0, {"exception_type": "RuntimeError", "message": "Connection closed by peer", "time": 10.0})
    real = RankExit(1, 1, None, 1.0, {"exception_type": "KeyError", "message": "'residual'", "time": 10.5})
    killed = RankExit(2, None, "SIGKILL", 1.0)
    assert pick_first([peer, real]).rank == 1
    assert pick_first([peer, killed]).rank == 2
    early = RankExit(3, 1, None, 1.0, {"exception_type": "ValueError", "message": "x", "time": 9.0})
    assert pick_first([real, early]).rank == 3
