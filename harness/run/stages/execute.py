"""Execute: an admitted run's ranks, started on the devices the run holds (by the launcher, harness/engines/launch/).

The run brief is written where the ranks read it, the engine's launch plan is asked for,
and the launcher (harness/engines/launch/) starts and watches the ranks; the devices are held
for the whole launch and given back whatever happens. What the ranks left, or how they
ended, is the judge's (run/stages/judge.py).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.contract.phases import PHASES_DIR
from harness.contract.rundir import BRIEF, LOGS
from harness.engines.launch import Cluster, LaunchOutcome, run_ranks
from harness.inputs.scenarios.scenario import Scenario
from harness.run.plan.devices import DevicePool, Lease
from harness.run.stages.admit import Admitted
from harness.run.stages.context import RunContext
from harness.run.timings import Stopwatch


def execute(
    admitted: Admitted,
    out_dir: Path,
    scenario: Scenario,
    ctx: RunContext,
    lease: Lease | None = None,
    watch: Stopwatch | None = None,
) -> LaunchOutcome:
    """Run the admitted setting's ranks to their end. `lease`: devices the caller already
    holds for it (a session packing scenarios); `watch` books the device wait and the
    launch by the ranks' phases."""
    watch = watch or Stopwatch()
    prepared = admitted.prepared
    with holding(ctx.devices, ctx.cluster, admitted.need, scenario.id, lease) as (device_env, cluster):
        watch.lap("wait")
        out_dir.mkdir(parents=True, exist_ok=True)
        brief_path = out_dir / BRIEF
        prepared.brief.save(brief_path)
        plan = prepared.engine.launch_plan(prepared.brief, str(brief_path))
        timeout = ctx.config.timeout_s or scenario.suite.timeout_s
        env = {**scenario.extra_env, **ctx.config.env_vars, **device_env}  # the lease wins: no shared devices
        shutil.rmtree(Path(prepared.brief.output_dir) / PHASES_DIR, ignore_errors=True)  # marks of this launch only
        prepared.launched_at = time.time()
        try:
            return run_ranks(plan, out_dir / LOGS, timeout, env=env, cluster=cluster, cancel=ctx.cancel)
        finally:  # an interrupted launch is booked too
            watch.launch(prepared.brief.output_dir, prepared.launched_at, time.time())


@contextmanager
def holding(
    pool: DevicePool | None, cluster: Cluster | None, need: int, owner: str, lease: Lease | None = None
) -> Iterator[tuple[dict[str, str], Cluster | None]]:
    """(rank env, cluster or None) while a run of `owner` holds its `need` devices. A
    run bigger than the machine holds the whole node set of `cluster`; a lease given by
    the caller is used as is and released by the caller."""
    if pool is None:
        yield {}, None
    elif need > pool.count:  # multi-node: the whole node set, waited for
        from harness.run.plan.nodes import cluster_pool

        assert cluster is not None  # admit refused it otherwise (devices_problem)
        nodes = cluster_pool(cluster)
        with nodes.lease(nodes.count, owner):
            yield {}, cluster
    elif lease is not None:
        yield lease.env(), None
    else:
        with pool.lease(need, owner) as own:
            yield own.env(), None
