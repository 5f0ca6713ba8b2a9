"""The machines a run is spread over: nodes, each reached through an exec prefix."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Node:
    """One machine of a multi-node run."""

    name: str
    # runs a command on the node; () is this machine
    exec_prefix: tuple[str, ...]
    ranks: int  # how many ranks it takes (its devices)
    # e.g. GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME of the node
    env: dict = field(default_factory=dict)
    # the prefix hands its arguments to a shell (ssh): pass one quoted string
    shell: bool = False


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    # where every node reaches rank 0 (the first node)
    master_addr: str

    @property
    def ranks(self) -> int:
        return sum(n.ranks for n in self.nodes)

    def place(self, world_size: int) -> list[tuple[Node, int]]:
        """(node, local rank) of every global rank: nodes are filled in order."""
        if world_size > self.ranks:
            raise ValueError(f"{world_size} ranks do not fit on nodes with {self.ranks} devices in all")
        placement = []
        for node in self.nodes:
            placement += [(node, local) for local in range(node.ranks)]
        return placement[:world_size]
