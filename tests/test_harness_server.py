"""The test kit's pre-imported harness commands (tests/kit/harness_server.py) and the rank
pool's zygote forked from a process that already imported what its ranks need
(harness.engines.launch.pool.fork_zygote_here): a command forked from the server must be what a
fresh `python -m harness` is (exit code, stdout apart from stderr, working directory, its
own environment), a timeout must take its process group down, and a zygote forked here
serves only the ranks whose environment it accepts."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from harness.engines.launch.stall import STALL_WINDOW_ENV
from tests.kit import scaled, survivors, wait_until
from tests.kit.cli import ROOT, environment, harness_command
from tests.kit.harness_server import COMMAND_ENV, SWITCH, forked_harness, imports_as_command
from tests.kit.procs import alive
from tests.kit.ranks import POOL_PRELOAD
from tests.kit.timing import timeout_message

pytestmark = pytest.mark.e2e  # starts the server, harness commands and ranks


def as_collected(env: dict | None = None) -> dict[str, str]:
    """The environment the server was made for (an earlier test in this process may have
    left its own in os.environ), with `env` laid over it."""
    return {**COMMAND_ENV, **(env or {})}


def both_ways(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    argv, merged = harness_command(*args), as_collected(env)
    forked = forked_harness(argv, merged, ROOT, scaled(120))
    assert forked is not None, "the server did not serve a plain command"
    fresh = subprocess.run(argv, cwd=ROOT, env=merged, capture_output=True, text=True, timeout=scaled(120))
    return forked, fresh


def test_a_forked_command_is_what_a_fresh_one_is():
    forked, fresh = both_ways("list", "--ids-only", "llama-tiny")
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert "llama-tiny/tp2-pp1" in forked.stdout.split()
    usage_forked, usage_fresh = both_ways("run", "--no-such-option")  # argparse: stderr only, exit 2, prog "harness"
    assert usage_forked.returncode == usage_fresh.returncode == 2
    assert usage_forked.stderr == usage_fresh.stderr and usage_forked.stderr.startswith("usage: harness ")
    assert usage_forked.stdout == ""


def test_a_forked_command_has_its_own_environment(tmp_path):
    forked, fresh = both_ways("env", env={"HARNESS_GOLDEN_DIR": str(tmp_path / "mine")})
    assert str(tmp_path / "mine") in forked.stdout and forked.stdout == fresh.stdout


def test_a_command_whose_imports_would_differ_starts_fresh():
    assert imports_as_command(as_collected())
    assert not imports_as_command(as_collected({"OMP_NUM_THREADS": "7"}))  # read when torch is imported
    assert not imports_as_command(as_collected({"PYTHONPATH": "/elsewhere"}))
    assert imports_as_command(as_collected({"TORCHINDUCTOR_CACHE_DIR": "/mine"}))  # read when used
    assert forked_harness(harness_command("list"), as_collected({SWITCH: "0"}), ROOT, 60) is None


def test_a_timeout_kills_the_command_and_what_it_started(tmp_path):
    reports = tmp_path / "reports"
    argv = harness_command(
        "run", "llama-tiny/tp2-pp1", "--fault", "rank-hang@1", "--timeout", "600", "--report-dir", str(reports)
    )
    ranks_seen: set[str] = set()  # the ranks alive before the kill: the test must have something to kill
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            ranks_seen.update(p.split(":")[0] for p in survivors(reports) if "harness.engines.reference.worker" in p)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            # The stall detector off: on a loaded machine scaled(15) outlasts its 20 s window,
            # and the run would end on its own as a hang before the timeout this test is about.
            # The hung rank would then hold the command for 600 s.
            forked_harness(argv, as_collected({STALL_WINDOW_ENV: "0"}), ROOT, scaled(15))
    finally:
        stop.set()
        watcher.join()
    assert len(ranks_seen) == 2, f"the ranks had not started when the command was killed: {ranks_seen}; " + timeout_message(
        "the ranks to start", scaled(15)
    )
    wait_until(lambda: not survivors(reports), scaled(30), "the killed command's ranks to end")


FORKED_POOL = """
import importlib, json, os, sys
from pathlib import Path
from harness.contract.launchplan import LaunchPlan
from harness.engines.launch import pool, run_ranks
for module in {preload!r}:
    importlib.import_module(module)
pool.fork_zygote_here(lambda env: env.get("ACCEPT") == "yes")
forked = pool._waiting[0][2].proc.pid
pids = Path(sys.argv[1])
plan = LaunchPlan(2, [sys.executable, "-m", "tests.ranks.allreduce"],
                  {{"RANK_MODE": "ok", "PID_DIR": str(pids), "ACCEPT": sys.argv[2]}}, preload=list({preload!r}))
out = run_ranks(plan, pids / "logs", timeout_s=120)
parents = sorted({{int((pids / f"parent{{r}}").read_text()) for r in range(2)}})
print(json.dumps({{"status": out.status, "forked": forked, "parents": parents, "me": os.getpid()}}))
"""


@pytest.mark.parametrize("accept", ["yes", "no"])
def test_a_zygote_forked_here_serves_only_the_ranks_it_accepts(tmp_path, accept):
    pids = tmp_path / "pids"
    pids.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", FORKED_POOL.format(preload=POOL_PRELOAD), str(pids), accept],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == "ok"
    (parent,) = seen["parents"]  # both ranks from one zygote
    assert parent != seen["me"]
    assert (parent == seen["forked"]) == (accept == "yes")  # refused: a zygote started as usual
    assert not alive(seen["forked"])  # closed with the process that forked it
