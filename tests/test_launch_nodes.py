"""The launcher across nodes, on this machine: a node is an exec prefix.

`setsid -f -w` stands in for a remote machine the way ssh is one: the rank runs in
another session (out of reach of the launcher's process-group kill, like a process on
another host) behind a prefix process that neither forwards signals nor carries the
launcher's environment. What must still hold: the crash and hang verdicts, stack dumps
of every rank, and no survivors, also when the launcher itself is SIGKILLed.
(The real network case, two network namespaces, is in test_multinode.py.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.contract.launchplan import LaunchPlan
from harness.engines.launch import Cluster, LaunchOutcome, Node, run_ranks
from tests.kit import alive, assert_no_survivors, ranks_ready, scaled, timeout_message, wait_process, wait_until
from tests.kit.procs import pids_in
from tests.kit.ranks import ALLREDUCE, RANKS, launch_until_hung

REMOTE_LIKE = ("setsid", "-f", "-w")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("setsid") is None, reason="needs util-linux setsid")]


def cluster(prefix: tuple[str, ...], ranks_per_node: list[int], **node_env) -> Cluster:
    nodes = tuple(Node(f"n{i}", prefix, n, env=dict(node_env)) for i, n in enumerate(ranks_per_node))
    return Cluster(nodes, "127.0.0.1")


def launch_on_nodes(
    tmp_path,
    mode: str,
    nodes: Cluster,
    world_size: int,
    timeout_s: float = 60,
    budget_s: float | None = None,
    started: int | None = None,
    **plan_env,
):
    """`budget_s`: the launcher's timeout as given, else scaled(timeout_s); `started`: how
    many ranks must have started (world_size unless given, tests/kit/ranks.py)."""
    logs, pids = tmp_path / "logs", tmp_path / "pids"
    pids.mkdir()
    plan = LaunchPlan(world_size, [sys.executable, str(ALLREDUCE)], {"RANK_MODE": mode, "PID_DIR": str(pids), **plan_env})
    out = run_ranks(plan, logs, timeout_s=scaled(timeout_s) if budget_s is None else budget_s, cluster=nodes)
    assert_no_survivors(pids, world_size if started is None else started)
    if out.status == "hang" and mode != "hang":  # a slow machine, not the case under test
        pytest.fail(timeout_message(f"the {mode!r} ranks to end", out.duration_s))
    return out, pids


def test_ranks_fill_nodes_in_order_with_local_ranks(tmp_path):
    out, pids = launch_on_nodes(tmp_path, "ok", cluster((), [2, 2]), 4, ECHO_ENV="LOCAL_RANK")
    assert out.status == "ok", out
    assert [(pids / f"rank{r}.env").read_text() for r in range(4)] == ["0", "1", "0", "1"]


def test_node_env_reaches_its_ranks_through_the_prefix(tmp_path):
    out, pids = launch_on_nodes(tmp_path, "ok", cluster(REMOTE_LIKE, [1, 1], NODE_TOKEN="node-env"), 2, ECHO_ENV="NODE_TOKEN")
    assert out.status == "ok", out
    assert (pids / "rank1.env").read_text() == "node-env"


def test_more_ranks_than_the_nodes_hold_is_refused():
    with pytest.raises(ValueError, match="3 ranks do not fit on nodes with 2 devices"):
        cluster((), [1, 1]).place(3)


def test_crash_on_a_remote_like_node_names_the_rank(tmp_path):
    out, _ = launch_on_nodes(tmp_path, "raise", cluster(REMOTE_LIKE, [1, 1]), 2)
    assert out.status == "crash", out
    assert out.failure.rank == 1 and "KeyError" in out.failure.exception


def test_hang_on_remote_like_nodes_dumps_every_rank_through_the_channel(tmp_path):
    # on a loaded machine ranks may still be in rendezvous after 10 s, which is no hang of theirs:
    # a short budget first, the long one where the ranks were not there yet (tests/kit/ranks.py)
    def launch(name: str, budget: float, started: int) -> tuple[LaunchOutcome, Path]:
        (tmp_path / name).mkdir()
        return launch_on_nodes(tmp_path / name, "hang", cluster(REMOTE_LIKE, [1, 1]), 2, budget_s=budget, started=started)

    out, _ = launch_until_hung(launch)
    assert out.status == "hang", out
    assert out.stuck_at[1].endswith("in hang_forever"), out.stuck_at
    assert out.stuck_at[0].endswith("in barrier"), out.stuck_at


def test_sigkilled_launcher_leaves_no_rank_on_remote_like_nodes(tmp_path):
    """Nothing can clean up after a SIGKILLed launcher; the closed channel must."""
    logs, pids = tmp_path / "logs", tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "RANK_MODE": "hang", "PID_DIR": str(pids), "DRIVER_NODE_PREFIX": " ".join(REMOTE_LIKE)}
    driver = subprocess.Popen([sys.executable, str(RANKS / "driver.py"), str(logs)], env=env, stdout=subprocess.PIPE)
    try:
        wait_until(lambda: ranks_ready(pids, 2), 60, "the ranks to get ready", proc=driver)
        driver.send_signal(signal.SIGKILL)
        wait_process(driver, 30, "the SIGKILLed driver to be reaped")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    started = pids_in(pids)
    # the kernel closes the channel at once; allow a slow machine
    wait_until(lambda: not any(alive(p) for p in started), 30, "the ranks to end after their channel closed", poll_s=0.2)
    assert_no_survivors(pids, 2)
