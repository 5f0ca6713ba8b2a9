"""The nodes file: the machines a scenario bigger than one machine runs on.

    # nodes.yaml  (harness run --nodes nodes.yaml, or HARNESS_NODES=nodes.yaml)
    master_addr: 10.0.0.1          # the first node's address, reachable from every node
    nodes:
      - name: gpu-a
        exec: [ssh, -T, gpu-a]     # how a command runs there; [] is this machine
        shell: true                # ssh hands its arguments to a shell: quote them
        devices: 8                 # ranks it takes
        env: {NCCL_SOCKET_IFNAME: eth0}
      - name: gpu-b
        exec: [ssh, -T, gpu-b]
        shell: true
        devices: 8

Ranks fill the nodes in order (TP groups inside a node, PP across nodes). Every node
needs the harness, its Python and the run directory at the same paths (a shared
filesystem). A multi-node scenario leases the whole node set, so two of them never
share it; see harness/engines/launch for how ranks are watched there.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.contract.settings.variables import NODES
from harness.engines.launch import Cluster, Node
from harness.run.plan.devices import DevicePool

NODES_ENV = NODES.name


class NodesError(ValueError):
    """A nodes file the harness cannot use, with the file and field at fault."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeDef(_Strict):
    name: str = Field(min_length=1)
    exec: list[str]
    shell: bool = False
    devices: int = Field(ge=1)
    env: dict[str, str] = {}


class NodesFile(_Strict):
    master_addr: str = Field(min_length=1)
    nodes: list[NodeDef] = Field(min_length=2)


def load_cluster(path: Path | str) -> Cluster:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise NodesError(f"{path}: cannot read the nodes file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise NodesError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise NodesError(f"{path}: a nodes file is a mapping (master_addr:, nodes:), got {type(raw).__name__}")
    try:
        nodes_file = NodesFile.model_validate(raw)
    except ValidationError as exc:
        problems = "\n".join(f"  {'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise NodesError(f"{path}: invalid nodes file:\n{problems}") from None
    names = [n.name for n in nodes_file.nodes]
    if len(set(names)) != len(names):
        raise NodesError(f"{path}: nodes: names repeat: {names}")
    nodes = tuple(Node(n.name, tuple(n.exec), n.devices, dict(n.env), n.shell) for n in nodes_file.nodes)
    return Cluster(nodes, nodes_file.master_addr)


def cluster_from_env(cli_path: Path | None) -> Cluster | None:
    path = cli_path or NODES.raw()
    return load_cluster(path) if path else None


def cluster_pool(cluster: Cluster) -> DevicePool:
    """One slot per node, locked by this machine's harness processes: a multi-node run
    leases all of them, so two multi-node runs never share the nodes."""
    digest = hashlib.sha256(repr(cluster).encode()).hexdigest()[:12]
    return DevicePool(len(cluster.nodes), kind=f"nodes-{digest}")
