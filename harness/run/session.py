"""A run of many scenarios: the order they run in and what is told while they run.

The CLI builds a session from the chosen scenarios; pytest runs items one by one
through the runner instead. Progress goes through the Progress interface so a live
terminal display and plain CI log lines are interchangeable.

With jobs > 1 the session packs scenarios onto the device slots (harness/run/plan/devices.py):
it goes down the list largest-first and starts every scenario whose devices are free
right now, up to `jobs` at once, each in a worker thread; the others wait for a
release. Progress hooks are called from the session's own thread.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from harness.contract.verdict import Verdict
from harness.engines.launch import SigtermAsInterrupt
from harness.inputs.scenarios.scenario import Scenario
from harness.run.plan.devices import POLL_S, Lease
from harness.run.plan.schedule import Cost, costs, largest_first
from harness.run.runner import RunContext, run_scenario


class Progress:
    """What a session tells while it runs. This base class prints plain lines (CI logs)."""

    def start(self, total: int, run_dir: Path) -> None:
        self.total, self.done = total, 0
        print(f"harness: running {total} scenarios -> {run_dir}", flush=True)

    def scenario_started(self, scenario: Scenario) -> None:
        print(f"[{self.done + 1}/{self.total}] {scenario.id} ...", flush=True)

    def scenario_finished(self, verdict: Verdict) -> None:
        self.done += 1
        mark = "" if verdict.as_expected else "  <-- NOT AS EXPECTED"
        print(f"[{self.done}/{self.total}] {verdict.headline()} ({verdict.duration_s:.1f}s){mark}", flush=True)

    def close(self) -> None:
        pass


def run_session(
    scenarios: list[Scenario],
    run_dir: Path,
    ctx: RunContext,
    progress: Progress | None = None,
    cost: dict[str, Cost] | None = None,
) -> list[Verdict]:
    """Run every scenario: one at a time in order, or (--jobs above 1, device slots given)
    packed largest-first by `cost`. Ctrl-C propagates (as KeyboardInterrupt) after
    every running scenario's ranks are stopped; the verdicts written so far stay on
    disk for the report. --exitfirst: start nothing after the first verdict that is not
    as expected, and stop the running scenarios' ranks as Ctrl-C does; the others are
    left without a verdict (the report lists them as not run). Both options are the
    run's (ctx.config), never given beside it."""
    progress = progress or Progress()
    progress.start(len(scenarios), run_dir)
    if any(s.suite.evals for s in scenarios):
        from harness.run.evals.tasks import settle_environment

        settle_environment()
    try:
        # Ray schedules, places and queues them (harness/run/raycluster)
        if ctx.config.cluster is not None:
            from harness.run.raycluster.connect import parse_cluster
            from harness.run.raycluster.driver import run_on_ray

            return run_on_ray(scenarios, run_dir, ctx, progress, cost or costs(scenarios, {}), parse_cluster(ctx.config.cluster))
        if ctx.config.jobs > 1 and ctx.devices is not None:
            return _run_packed(scenarios, run_dir, ctx, progress, cost or costs(scenarios, {}))
        verdicts = []
        for scenario in scenarios:
            progress.scenario_started(scenario)
            verdict = run_scenario(scenario, run_dir, ctx)
            verdicts.append(verdict)
            progress.scenario_finished(verdict)
            if ctx.config.exitfirst and not verdict.as_expected:
                break
        return verdicts
    finally:
        progress.close()


def _run_packed(
    scenarios: list[Scenario],
    run_dir: Path,
    ctx: RunContext,
    progress: Progress,
    cost: dict[str, Cost],
    run: Callable[[Scenario, Path, RunContext, Lease | None], Verdict] = run_scenario,
) -> list[Verdict]:
    jobs, exitfirst = ctx.config.jobs, ctx.config.exitfirst
    # the session's own stop switch, on a copy: the caller's options stay as given
    if ctx.cancel is None:
        ctx = dataclasses.replace(ctx, cancel=threading.Event())
    cancel = ctx.cancel
    assert cancel is not None
    pending = largest_first(scenarios, cost)
    running: dict[Future[Verdict], Lease | None] = {}
    verdicts: list[Verdict] = []
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="scenario") as pool, SigtermAsInterrupt():
        try:
            while (pending or running) and not (exitfirst and any(not v.as_expected for v in verdicts)):
                for scenario, lease in _startable(pending, running, jobs, ctx, cost):
                    progress.scenario_started(scenario)
                    running[pool.submit(run, scenario, run_dir, ctx, lease)] = lease
                done, _ = wait(list(running), timeout=POLL_S, return_when=FIRST_COMPLETED)
                for future in done:
                    _finish(future, running, verdicts, progress)
            # --exitfirst after a failure: the running ones stop as on Ctrl-C, without a verdict
            if running:
                cancel.set()
                _drain(running)
        except BaseException:
            # every launch stops its ranks (LaunchInterrupted in its thread)
            cancel.set()
            _drain(running)
            raise
    return verdicts


def _startable(
    pending: list[Scenario], running: dict[Future[Verdict], Lease | None], jobs: int, ctx: RunContext, cost: dict[str, Cost]
) -> Iterator[tuple[Scenario, Lease | None]]:
    """Take from `pending`, in order, every scenario whose devices can be leased now,
    with its lease, while fewer than `jobs` run (the caller adds each to `running`)."""
    devices = ctx.devices
    assert devices is not None, "scenarios are packed only onto a device pool (run_session checks)"
    for scenario in list(pending):
        if len(running) >= jobs:
            return
        need = cost[scenario.id].devices
        if need > devices.count:
            # cannot run here: the runner says why (or runs it on --nodes)
            lease = None
        else:
            lease = devices.try_lease(need, scenario.id)
            if lease is None:
                continue
        pending.remove(scenario)
        yield scenario, lease


def _finish(
    future: Future[Verdict], running: dict[Future[Verdict], Lease | None], verdicts: list[Verdict], progress: Progress
) -> None:
    lease = running.pop(future)
    if lease is not None:
        lease.release()
    verdict = future.result()  # run_scenario never raises but for Ctrl-C
    verdicts.append(verdict)
    progress.scenario_finished(verdict)


def _drain(running: dict[Future[Verdict], Lease | None]) -> None:
    """Wait for every cancelled scenario to stop its ranks, then free its devices; a
    second Ctrl-C does not cut this short (the ranks would outlive the harness)."""
    while running:
        try:
            wait(list(running))
        except KeyboardInterrupt:
            continue
        for future, lease in list(running.items()):
            if lease is not None:
                lease.release()
            del running[future]
