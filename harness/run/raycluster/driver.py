"""The driver's side: every planned scenario to Ray, largest first, and its files back.

Scenarios are handed to Ray in the session's largest-first order, as many at once as
the cluster has device slots for (Ray queues the rest of what is handed over, and holds
each placement group's slots exclusively while its scenario runs). Each result is
unpacked into the run directory as it arrives, so a killed driver leaves every scenario
that ended on disk for the report.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path

from harness.contract.rundir import scenario_dir
from harness.contract.settings.project import project
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.scenario import Scenario
from harness.run.plan.schedule import Cost, largest_first
from harness.run.raycluster import placement
from harness.run.raycluster.connect import ClusterChoice, connected, driver_env, import_ray, stay_connected
from harness.run.raycluster.lost import lost_verdict, note_nodes
from harness.run.raycluster.nodetask import NodeResult, NodeWork, run_on_node
from harness.run.raycluster.spread import run_spread
from harness.run.raycluster.transfer import pack, unpack_scenario
from harness.run.runner import RunContext, record_verdict

TIMINGS = "ray-timings.jsonl"
# how long cancelled scenarios get to stop their ranks on Ctrl-C
CANCEL_WAIT_S = 15.0


class NodeLost(RuntimeError):
    """Ray declared a node of a running scenario dead."""


@dataclasses.dataclass
class InFlight:
    scenario: Scenario
    pg: object  # its placement group
    need: int
    submitted: float
    nodes: list[str] = dataclasses.field(default_factory=list)  # the node of each bundle, once placed
    addresses: dict[str, str] = dataclasses.field(default_factory=dict)


def run_on_ray(
    scenarios: list[Scenario], run_dir: Path, opts: RunContext, progress, cost: dict[str, Cost], cluster: ClusterChoice
) -> list[Verdict]:
    """Run `scenarios` on the Ray cluster of `spec`; the verdicts, each saved in `run_dir`."""
    resource = placement.slot_resource(opts.config.device)
    local_slots = opts.devices.count if opts.devices is not None else 4
    with connected(cluster, resource, local_slots) as ray:
        return _Driver(ray, run_dir, opts, progress, cost, resource).run(largest_first(scenarios, cost))


def run_one_on_ray(scenario: Scenario, run_dir: Path, opts: RunContext, cluster: ClusterChoice) -> Verdict:
    """One scenario on the Ray cluster of `spec`, the connection kept for the next (pytest items)."""
    from harness.run.plan.schedule import costs

    resource = placement.slot_resource(opts.config.device)
    ray = stay_connected(cluster, resource, opts.devices.count if opts.devices is not None else 4)
    return _Driver(ray, run_dir, opts, _Silent(), costs([scenario], {}), resource).run([scenario])[0]


class _Silent:
    """No progress lines: pytest says what runs and how it ended."""

    def scenario_started(self, scenario) -> None:
        pass

    def scenario_finished(self, verdict) -> None:
        pass


class _Driver:
    def __init__(self, ray, run_dir: Path, opts: RunContext, progress, cost: dict[str, Cost], resource: str):
        self.ray, self.run_dir, self.progress, self.cost, self.resource = ray, run_dir, progress, cost, resource
        self.opts = opts
        self.node_opts = dataclasses.replace(
            opts, devices=None, cluster=None, cancel=None, config=dataclasses.replace(opts.config, cluster=None)
        )
        self.capacity = placement.capacity(ray, resource)
        self.env = driver_env()
        self.project_root = str(project().root)
        self.running: dict[object, InFlight] = {}
        self.verdicts: list[Verdict] = []
        # made remote once: Ray exports a function once per remote-function object
        self.on_one_node, self.across_nodes = ray.remote(run_on_node), ray.remote(run_spread)

    def run(self, pending: list[Scenario]) -> list[Verdict]:
        if not self.capacity.per_node:
            from harness.run.raycluster.connect import ClusterError

            raise ClusterError(
                f"no live node of the Ray cluster offers '{self.resource}' slots: start its nodes with "
                f"`ray start --resources '{{\"{self.resource}\": N}}'`"
                if self.resource != "GPU"
                else "no live node of the Ray cluster has a GPU"
            )
        try:
            while pending or self.running:
                self._submit_what_fits(pending)
                self._collect()
        except BaseException:
            self._cancel_all()
            raise
        return self.verdicts

    def _submit_what_fits(self, pending: list[Scenario]) -> None:
        busy = sum(f.need for f in self.running.values())
        for scenario in list(pending):
            need = self.cost[scenario.id].devices
            problem = self.capacity.problem(need, self.resource)
            if problem is not None:
                pending.remove(scenario)
                self.progress.scenario_started(scenario)
                self._finished(self._unsupported(scenario, problem))
                continue
            if self.running and busy + need > self.capacity.total:
                # Ray would only queue it: keep the order and the display honest
                return
            pending.remove(scenario)
            self._submit(scenario, need)
            busy += need

    def _submit(self, scenario: Scenario, need: int) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        # by name: the rank hosts of a spread scenario find it
        group = f"harness-{uuid.uuid4().hex[:12]}"
        pg = placement_group(placement.bundles(need, self.resource), strategy=placement.strategy(need, self.capacity), name=group)
        work = NodeWork(scenario, self.node_opts, self.project_root, self._golden(scenario), self.env)
        # the task holds bundle 0's slot; the group holds the others for its ranks. No retry: a
        # scenario is never run twice behind the user's back (lost.py says what happened)
        on_bundle_0 = {
            "num_cpus": 0,
            "max_retries": 0,
            "resources": {self.resource: 1},
            "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
        }
        # ranks across nodes, launched from bundle 0's
        if need > self.capacity.largest_node:
            ref = self.across_nodes.options(**on_bundle_0).remote(work, group)
        else:
            ref = self.on_one_node.options(**on_bundle_0).remote(work)
        self.progress.scenario_started(scenario)
        self.running[ref] = InFlight(scenario, pg, need, time.monotonic())

    def _golden(self, scenario: Scenario) -> bytes | None:
        from harness.contract.roots import golden_dir

        where = golden_dir(scenario.golden_key)
        return pack(where) if where.is_dir() else None

    def _collect(self) -> None:
        done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=1.0)
        for flight in self.running.values():
            note_nodes(self.ray, flight)
        self._give_up_on_lost_nodes([ref for ref in self.running if ref not in done])
        for ref in done:
            flight = self.running.pop(ref)
            try:
                verdict = self._arrived(flight, self.ray.get(ref))
            except self.ray.exceptions.RayError as exc:
                verdict = lost_verdict(self.ray, flight, exc, self.run_dir, self.opts)
            finally:
                self._release(flight)
            self._finished(verdict)

    def _give_up_on_lost_nodes(self, refs: list) -> None:
        """A scenario whose node Ray declared dead ends `crash` now: its task's failure may never
        reach us (a worker can outlive its raylet, and the owner is told only when it dies)."""
        dead = {n["NodeID"] for n in self.ray.nodes() if not n.get("Alive")}
        for ref in refs:
            flight = self.running[ref]
            lost = sorted(set(flight.nodes) & dead)
            if not lost:
                continue
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - its worker is gone already
                pass
            del self.running[ref]
            self._release(flight)
            self._finished(lost_verdict(self.ray, flight, NodeLost(f"Ray marked node {lost[0]} dead"), self.run_dir, self.opts))

    def _arrived(self, flight: InFlight, result: NodeResult) -> Verdict:
        verdict = unpack_scenario(result.files, scenario_dir(self.run_dir, flight.scenario.id), result.node_dir)
        self._book(flight, result)
        return verdict

    def _book(self, flight: InFlight, result: NodeResult) -> None:
        """Where a scenario's time on Ray went, one JSON line each in <run>/ray-timings.jsonl:
        its task's own time on the node, and the rest of the round trip (placement, worker
        start and imports, the files' way back): Ray's overhead (docs/SCALE.md)."""
        round_trip = time.monotonic() - flight.submitted
        line = {
            "scenario": flight.scenario.id,
            "ranks": flight.need,
            "nodes": len(set(flight.nodes)) or None,
            "round_trip_s": round(round_trip, 2),
            "on_node_s": round(result.seconds, 2),
            "overhead_s": round(round_trip - result.seconds, 2),
            "bytes_back": len(result.files),
        }
        try:
            with open(self.run_dir / TIMINGS, "a") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:
            # a measurement, not a result: the verdict is what must be written
            pass

    def _unsupported(self, scenario: Scenario, reason: str) -> Verdict:
        return record_verdict(scenario, Verdict(scenario.id, "unsupported", reason), self.run_dir, self.opts, time.monotonic())

    def _finished(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        self.progress.scenario_finished(verdict)

    def _release(self, flight: InFlight) -> None:
        from ray.util import remove_placement_group

        try:
            remove_placement_group(flight.pg)
        except Exception:  # noqa: BLE001 - a group whose node is gone is already released
            pass

    def _cancel_all(self) -> None:
        """Ctrl-C (or a fault of the driver): this run's tasks are cancelled (a KeyboardInterrupt
        in each, which stops its ranks), waited for a while, and their devices released; other
        runs on the cluster are untouched."""
        for ref in self.running:
            try:
                self.ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001 - already finished
                pass
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self.running and time.monotonic() < deadline:
            try:
                done, _ = self.ray.wait(list(self.running), num_returns=len(self.running), timeout=1.0)
            except KeyboardInterrupt:
                # a second Ctrl-C does not cut the ranks' stop short
                continue
            if len(done) == len(self.running):
                break
        for flight in self.running.values():
            self._release(flight)
        self.running.clear()


__all__ = ["run_on_ray", "run_one_on_ray", "import_ray"]
