"""Runs run_ranks in its own process, for the Ctrl-C / SIGTERM tests.

usage: driver.py LOG_DIR   (the rank behaviour comes from the environment)
Prints one JSON line with the outcome and exits 130 on an interrupt.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.engines.base import LaunchPlan  # noqa: E402
from harness.launch import LaunchInterrupted, run_ranks  # noqa: E402

plan = LaunchPlan(world_size=2, argv=[sys.executable, str(Path(__file__).with_name("allreduce.py"))])
try:
    out = run_ranks(plan, Path(sys.argv[1]), timeout_s=120)
except LaunchInterrupted as exc:
    print(json.dumps({"status": exc.outcome.status, "raised": "LaunchInterrupted"}), flush=True)
    sys.exit(130)
print(json.dumps({"status": out.status}), flush=True)
