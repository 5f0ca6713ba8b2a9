"""A scenario bigger than every node: one rank per bundle, across the nodes Ray chose.

Runs as the Ray task on bundle 0's node, like a scenario that fits one node (nodetask.py),
with the launcher's own multi-node mode (engines/launch/cluster.py, the `--nodes` machinery): the
nodes are those of the placement group's bundles in bundle order, bundle 0's node is
this one (no prefix), the others are reached through the rank host (rankhost.py) instead
of ssh, and torch.distributed meets at this node's address. The node agent, crash blame,
stack dumps and stall detector are the launcher's, unchanged.
"""

from __future__ import annotations

import dataclasses
import sys

from harness.contract.rundir import scenario_dir
from harness.engines.launch import Cluster, Node
from harness.run.plan.devices import DevicePool
from harness.run.raycluster.nodetask import NodeResult, NodeWork, run_on_node


def run_spread(work: NodeWork, group: str) -> NodeResult:
    import ray

    context = ray.get_runtime_context()

    def with_cluster(run_dir):
        cluster = nodes_of(group, context.namespace, context.gcs_address, str(scenario_dir(run_dir, work.scenario.id)))
        # fewer slots here than the scenario needs: the runner leases the node set (execute.holding)
        here = DevicePool(cluster.nodes[0].ranks, kind=f"ray-{group}")
        return dataclasses.replace(work.opts, cluster=cluster, devices=here)

    return run_on_node(work, with_cluster)


def nodes_of(group: str, namespace: str, address: str, mirror: str) -> Cluster:
    import ray
    from ray.util import get_placement_group, placement_group_table

    table = placement_group_table(get_placement_group(group))["bundles_to_node_id"]
    by_node: dict[str, list[int]] = {}
    for bundle in sorted(table):
        by_node.setdefault(table[bundle], []).append(bundle)
    me = ray.get_runtime_context().get_node_id()
    addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    # this node first: rank 0 and the rendezvous here
    order = sorted(by_node, key=lambda node: node != me)
    nodes = []
    for node in order:
        prefix: tuple[str, ...] = (
            ()
            if node == me
            else (
                sys.executable,
                "-m",
                "harness.run.raycluster.rankhost",
                "--address",
                address,
                "--namespace",
                namespace,
                "--group",
                group,
                "--bundle",
                str(by_node[node][0]),
                "--mirror",
                mirror,
                "--",
            )
        )
        nodes.append(Node(f"ray-{node[:8]}", prefix, len(by_node[node])))
    return Cluster(tuple(nodes), addresses[me])
