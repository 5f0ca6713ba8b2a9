"""Ranks without the whole harness: a RunBrief's ranks through the harness's own launcher
(or in this process, world size 1), and the rank programs of the launcher tests.

Multi-rank runs are real processes started by harness.engines.launch.run_ranks under a budget
scaled by HARNESS_TEST_TIME_SCALE (tests/kit/timing.py): a run that outlives it ends as
"hang" with every rank's stack, and `explain` says it was the test's timeout.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from harness.contract.outputs import EngineOutputs
from harness.contract.runbrief import RunBrief
from harness.engines.launch import LaunchOutcome, free_port, run_ranks
from tests.kit.cli import ROOT
from tests.kit.timing import scaled, timeout_message

# tests/ranks/: small rank programs for the launcher (allreduce.py: modes ok, raise, hang...;
# driver.py: run_ranks in a process of its own, for the signal tests)
RANKS = ROOT / "tests" / "ranks"
ALLREDUCE = RANKS / "allreduce.py"
# what tests/ranks/allreduce.py imports, for ranks forked from the rank pool
POOL_PRELOAD = ("torch", "torch.distributed", "harness.engines.launch.rankside")

#: budget of one multi-rank run on an unloaded 2-core machine, before HARNESS_TEST_TIME_SCALE:
#: generous, as torch.compile alone takes ~100 s there under load
RUN_BUDGET_S = 600

#: A hang test of tests/ranks/allreduce.py waits the launcher's whole timeout: its budget is
#: what the test costs. First a short one: those ranks pass their all-reduce in ~2 s on an idle
#: 2-core machine (before HARNESS_TEST_TIME_SCALE); then, only where they had not all passed it
#: by a second before the dump (the machine was slower than its load said), the long one that
#: every hang test had alone before.
HANG_TRIES_S = (8, 30)


def launch_ranks(brief: RunBrief, workdir: Path, budget_s: float = RUN_BUDGET_S) -> LaunchOutcome:
    """Every rank of the brief's launch plan (reference engine) as a real process, through
    the harness's own launcher: ranks are watched, a crash stops the siblings, and a run
    that outlives scaled(budget_s) ends as "hang" with each rank's stack; nothing survives."""
    from harness.engines.reference import ReferenceEngine

    brief_path = workdir / "spec.json"
    brief.save(brief_path)
    plan = ReferenceEngine().launch_plan(brief, str(brief_path))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return run_ranks(plan, workdir / "logs", timeout_s=scaled(budget_s), env=env)


def launch_until_hung(
    launch: Callable[[str, float, int], tuple[LaunchOutcome, Path]], world_size: int = 2
) -> tuple[LaunchOutcome, float]:
    """A hang test's run under the budgets of HANG_TRIES_S: `launch(name, budget_s, started)`
    starts the ranks of tests/ranks/allreduce.py in mode hang (logs and pid files in a
    directory of that name) with the launcher's timeout budget_s, checks that nothing of it
    survived and that at least `started` ranks started (world_size on the last try; none
    before it, which a slow machine may end before a rank started), and gives back the
    outcome and the pid directory. A try whose ranks were all at their hang point a second
    before the dump (their ready files), or that did not end as a hang, is the one the test
    asserts on; so is the last, as it finds it. The outcome and the budget it had."""
    for n, seconds in enumerate(HANG_TRIES_S):
        last = n == len(HANG_TRIES_S) - 1
        budget = scaled(seconds)
        start = time.time()
        out, pids = launch(f"try{n}", budget, world_size if last else 0)
        ready = [p.stat().st_mtime for p in Path(pids).glob("ready*")]
        if out.status != "hang" or (len(ready) >= world_size and max(ready) <= start + budget - scaled(1)):
            break
    return out, budget


def explain(outcome: LaunchOutcome) -> str:
    """What went wrong with a run, in words: a timeout says it was one."""
    if outcome.status == "hang":
        where = "; ".join(f"rank {r} at {loc}" for r, loc in sorted(outcome.stuck_at.items())) or "no stack dump"
        if outcome.stall:  # the launcher saw no progress: not this test's budget
            return f"hang {outcome.hang_reason()}; {where}"
        return f"{timeout_message('the ranks to finish', outcome.duration_s)}; {where}"
    f = outcome.failure
    if f is None:
        return f"launcher ended with status {outcome.status!r}"
    what = f.exception or (f"killed by {f.signal}" if f.signal else f"exit code {f.exitcode}")
    return f"rank {f.rank} crashed: {what}\n{f.traceback or ''}\n(log: {f.log})"


def run_in_process(brief: RunBrief) -> EngineOutputs:
    """World size 1 in this process (no spawn), through the reference engine's worker entry."""
    from harness.engines.reference.worker import run

    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    with mock.patch.dict(os.environ, env):
        run(brief)
    return EngineOutputs.load(brief.output_dir)
