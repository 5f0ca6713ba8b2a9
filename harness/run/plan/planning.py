"""What a `harness run` runs and where: change-based selection, the shard of this CI
agent, the device slots and nodes, and the cost estimates that order it all.

The CLI calls plan_run() once; everything it decides goes into run.json, so a run
directory says which shard it is and why each scenario was picked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.contract.jsonfile import JSONObject
from harness.engines.launch import Cluster
from harness.inputs.scenarios.scenario import Scenario
from harness.inputs.scenarios.schema import ScenarioError
from harness.run.plan.changes import (
    changed_files_from,
    changed_files_since,
    picked_by_a_rule,
    select_for_changes,
)
from harness.run.plan.devices import DevicePool, configured_count
from harness.run.plan.nodes import cluster_from_env
from harness.run.plan.priority import Suspects, first_failure_order, order_lines, order_meta
from harness.run.plan.schedule import (
    Cost,
    costs,
    load_durations,
    parse_shard,
    recorded_durations,
    split_shards,
)
from harness.run.request import RunConfig


@dataclass
class RunPlan:
    scenarios: list[Scenario]
    devices: DevicePool
    cluster: Cluster | None
    cost: dict[str, Cost]
    meta: JSONObject = field(default_factory=dict)  # what run.json records about these choices


def plan_run(
    args: RunConfig, all_scenarios: list[Scenario], chosen: list[Scenario], repo: Path, suspects: Suspects | None = None
) -> RunPlan:
    """`suspects`: what failed or drifted in the gate's history (report.regressions.gate_suspects)."""
    meta: JSONObject = {}
    changed = _changed_files(args, repo)
    if changed is not None:
        if args.gate != "pr":
            raise ScenarioError("--changed-files / --changed-since choose the pr gate's scenarios: add --gate pr")
        picks = select_for_changes(all_scenarios, changed)
        named = [s for s in chosen if s.id not in picks] if args.ids else []  # asked for by id: never dropped
        chosen = [s for s in all_scenarios if s.id in picks] + named
        meta["selection"] = {"changed_files": changed, "picked": picks, "named": [s.id for s in named]}
        _print_picks(picks, changed)
        if named:
            print(f"harness: and {len(named)} scenarios named on the command line: {', '.join(s.id for s in named)}", flush=True)
    durations = load_durations(args.durations) if args.durations else recorded_durations(args.report_dir)
    cost = costs(chosen, durations)
    if args.shard:
        index, count = parse_shard(args.shard)
        shard = split_shards(chosen, count, cost)[index - 1]
        meta["shard"] = {
            "index": index,
            "count": count,
            "of": len(chosen),
            "device_seconds": round(sum(cost[s.id].device_seconds for s in shard), 1),
            "durations_from": str(args.durations) if args.durations else f"verdicts under {args.report_dir}",
        }
        print(
            f"harness: shard {index}/{count}: {len(shard)} of {len(chosen)} scenarios "
            f"(~{meta['shard']['device_seconds']:.0f} device-seconds)",
            flush=True,
        )
        chosen = shard
    cost = {s.id: cost[s.id] for s in chosen}
    # a gate is waited on for its first failure: what failed before goes first
    if args.gate:
        chosen, cost = _first_failure_first(chosen, cost, suspects or Suspects(), meta)
    devices = DevicePool(configured_count(args.device, args.devices), kind=args.device)
    meta["devices"] = {"kind": args.device, "count": devices.count, "jobs": args.jobs}
    cluster = cluster_from_env(args.nodes)
    if cluster is not None:
        meta["nodes"] = [n.name for n in cluster.nodes]
    return RunPlan(chosen, devices, cluster, cost, meta)


def _first_failure_first(
    chosen: list[Scenario], cost: dict[str, Cost], suspects: Suspects, meta: JSONObject
) -> tuple[list[Scenario], dict[str, Cost]]:
    """The gate's scenarios in the order of harness/run/plan/priority.py, said and recorded."""
    rule_picked = picked_by_a_rule(meta.get("selection", {}).get("picked", {}))
    ordered, tiered = first_failure_order(chosen, cost, suspects, rule_picked)
    meta["order"] = order_meta(ordered, tiered)
    for line in order_lines(meta["order"]):
        print(line, flush=True)
    return ordered, tiered


def _changed_files(args: RunConfig, repo: Path) -> list[str] | None:
    if args.changed_files and args.changed_since:
        raise ScenarioError("give --changed-files or --changed-since, not both")
    if args.changed_files:
        return changed_files_from(args.changed_files)
    if args.changed_since:
        return changed_files_since(args.changed_since, repo)
    return None


def _print_picks(picks: dict[str, list[str]], changed: list[str]) -> None:
    print(f"harness: {len(changed)} changed files -> {len(picks)} scenarios:", flush=True)
    for sid, reasons in picks.items():
        print(f"  {sid:40s} {'; '.join(reasons)}", flush=True)
