"""Runs run_ranks in its own process, for the Ctrl-C / SIGTERM tests.

usage: driver.py LOG_DIR   (the rank behaviour comes from the environment)
Prints one JSON line with the outcome and exits 130 on an interrupt.
With $DRIVER_NODE_PREFIX (a shell-quoted exec prefix), each rank runs on its own "node"
behind that prefix. With $DRIVER_RANK_WAY=pool, the ranks are forked from the rank pool.
"""

import json
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness, tests.kit

from harness.contract.launchplan import LaunchPlan  # noqa: E402
from harness.engines.launch import Cluster, LaunchInterrupted, Node, run_ranks  # noqa: E402
from tests.kit.timing import scaled  # noqa: E402

prefix = os.environ.get("DRIVER_NODE_PREFIX")
cluster = None
if prefix is not None:
    nodes = tuple(Node(f"n{i}", tuple(shlex.split(prefix)), 1) for i in range(2))
    cluster = Cluster(nodes, "127.0.0.1")

if os.environ.get("DRIVER_RANK_WAY") == "pool":  # ranks forked from the rank pool's zygote
    from tests.kit.ranks import POOL_PRELOAD

    plan = LaunchPlan(2, [sys.executable, "-m", "tests.ranks.allreduce"], preload=list(POOL_PRELOAD))
else:
    plan = LaunchPlan(world_size=2, argv=[sys.executable, str(Path(__file__).with_name("allreduce.py"))])
try:
    # outlasts the test's own (scaled) wait for the ranks: the test interrupts the run first
    out = run_ranks(plan, Path(sys.argv[1]), timeout_s=scaled(120), cluster=cluster)
except LaunchInterrupted as exc:
    print(json.dumps({"status": exc.outcome.status, "raised": "LaunchInterrupted"}), flush=True)
    sys.exit(130)
print(json.dumps({"status": out.status}), flush=True)
