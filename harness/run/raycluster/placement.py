"""A scenario's devices as a Ray placement group: one bundle per rank.

A bundle is one device slot: `{"GPU": 1}` on CUDA, `{"harness_device": 1}` on CPU (a
custom resource each node declares: `ray start --resources '{"harness_device": 4}'`).
A scenario that fits one node asks for STRICT_PACK, so its ranks share a node as in a
local run; one bigger than every node asks for PACK, which fills nodes and spreads
over as few as it can (as vLLM's Ray executor places its workers).
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_SLOT = "harness_device"


def slot_resource(device: str) -> str:
    return "GPU" if device == "cuda" else CPU_SLOT


@dataclass(frozen=True)
class Capacity:
    """Device slots of the cluster's live nodes, by node id."""

    per_node: dict[str, int]

    @property
    def largest_node(self) -> int:
        return max(self.per_node.values(), default=0)

    @property
    def total(self) -> int:
        return sum(self.per_node.values())

    def problem(self, need: int, resource: str) -> str | None:
        """Why a scenario of `need` devices can never run on this cluster (its `unsupported` reason), or None."""
        if need <= self.total:
            return None
        return (
            f"needs {need} devices, the Ray cluster's nodes offer {self.total} '{resource}' slots in all "
            f"({len(self.per_node)} nodes); add nodes, or declare more slots per node (ray start --resources)"
        )


def capacity(ray, resource: str) -> Capacity:
    slots = {n["NodeID"]: int(n["Resources"].get(resource, 0)) for n in ray.nodes() if n.get("Alive")}
    return Capacity({node: count for node, count in slots.items() if count > 0})


def bundles(need: int, resource: str) -> list[dict[str, float]]:
    return [{resource: 1} for _ in range(need)]


def strategy(need: int, cap: Capacity) -> str:
    return "STRICT_PACK" if need <= cap.largest_node else "PACK"


def bundle_nodes(ray, pg) -> list[str]:
    """The node id of each bundle, in bundle order (what a lost node is named by)."""
    from ray.util import placement_group_table

    table = placement_group_table(pg).get("bundles_to_node_id", {})
    return [table.get(i, "?") for i in range(len(table))]


def node_address(ray, node_id: str) -> str:
    for n in ray.nodes():
        if n["NodeID"] == node_id:
            return n.get("NodeManagerAddress", "?")
    return "?"
