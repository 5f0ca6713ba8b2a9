"""What a failed vLLM driver waits for before it exits (harness/engines/vllm/driver.py,
wait_for_own_processes): the processes it started, followed by pid even when their parent
ended first; never a sibling of its process group (under DP, the other DP ranks' drivers,
each draining too) and never multiprocessing's resource tracker, which ends with it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.engines.launch.procgroup import live, own_processes
from tests.kit.timing import scaled

pytestmark = [
    pytest.mark.e2e,  # starts processes
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)"),
]

SLEEP_FOREVER = "import time; time.sleep(3600)"


def test_own_processes_follow_a_grandchild_whose_parent_ended():
    # the child starts a grandchild that outlives it, prints its pid and exits
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; g = subprocess.Popen([sys.executable, '-c', {SLEEP_FOREVER!r}]); print(g.pid, flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    try:
        assert grandchild in (own_processes(child.pid) or [])  # the tree while the child lives
        child.wait()
        assert live([grandchild, child.pid]) == [grandchild]  # the child ended (reaped); its grandchild is followed by pid
    finally:
        subprocess.run(["kill", "-9", str(grandchild)], check=False)


def test_a_failed_driver_waits_for_its_own_processes_not_its_group_siblings():
    """The drain ends when what the driver started has ended, though a sibling in its
    process group and a resource tracker still run (before: the whole group, so two DP drivers
    each waited out the other's DRAIN_S)."""
    sibling = subprocess.Popen([sys.executable, "-c", SLEEP_FOREVER])  # another DP rank's driver, say
    driver = textwrap.dedent(
        """
        import subprocess, sys
        from harness.engines.vllm.driver import wait_for_own_processes
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])  # a worker ending on its own
        tracker = subprocess.Popen([sys.executable, "-c", "import time  # resource_tracker\\ntime.sleep(3600)"])
        wait_for_own_processes(3600)
        tracker.kill()
        print("drained", flush=True)
        """
    )
    try:
        done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=scaled(120))
        assert done.returncode == 0 and done.stdout.strip() == "drained", done.stderr
        assert live([sibling.pid]) == [sibling.pid]  # never waited for
    finally:
        sibling.kill()
        sibling.wait()
