"""Scenarios run as Ray work on a Ray cluster (`harness run --cluster ray:local | ray://ADDR | auto`).

The driver (the machine that runs `harness run`) plans as usual, then hands each planned
scenario to Ray with its device needs: a placement group of one bundle per rank (a
`harness_device` slot on CPU, a `GPU` on CUDA; placement.py). Ray does the queueing and
the device exclusivity; the harness's lock files stay for runs without a cluster.

A scenario that fits one node runs the harness's own single-scenario entry point
(runner.run_scenario: the launcher, rank pool, stall detector, stacks, no-survivor rule)
inside one Ray task on the node Ray chose (nodetask.py), in a run directory of the
node's own; its files (verdict, outputs, rank logs) come back to the driver's run
directory as bytes through Ray (transfer.py): nothing shared but Ray. Goldens go out the
same way; built models are built on the node (deterministic, checksummed).

A scenario bigger than every node runs one rank per bundle across nodes (spread.py):
the task on bundle 0's node runs the launcher's own multi-node mode, the other nodes'
ranks reached through a Ray actor each (rankhost.py) instead of ssh, torch.distributed
meeting at bundle 0's node.

Ray is an extra (`pip install harness[ray]`); without it `--cluster` says how to get it.
"""

from __future__ import annotations

import importlib

__all__ = ["ClusterChoice", "ClusterError", "parse_cluster", "run_on_ray"]
_HOME = {"ClusterChoice": "connect", "ClusterError": "connect", "parse_cluster": "connect", "run_on_ray": "driver"}


def __getattr__(name: str):
    # loaded when a run asks for it, not when a rank host (rankhost.py, started for every
    # remote rank) imports this package: the driver brings the runner and torch with it
    if name not in _HOME:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"harness.run.raycluster.{_HOME[name]}"), name)
