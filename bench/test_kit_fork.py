"""One scenario command of the harness's own tests, fresh and forked from the test kit's
server (tests/kit/harness_server.py), alternately: the table in docs/BENCHMARKS.md
("Harness commands forked from a pre-imported server").

    python3 bench/test_kit_fork.py [--rounds 3] [--scenario llama-tiny/tp2-pp1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.run.plan.devices import LOCK_DIR_ENV  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenario", default="llama-tiny/tp2-pp1")
    args = parser.parse_args()
    os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="bench-fork-devices-")  # not the machine's slots
    from tests.kit.cli import harness_cli  # after the lock dir: the server is made for this environment

    reports = tempfile.mkdtemp(prefix="bench-fork-reports-")
    harness_cli("list")  # the server starts here, outside the timings
    rows: dict[str, list[float]] = {"fresh `python -m harness`": [], "forked from the server": []}
    for _ in range(args.rounds):
        for fork, row in (("0", "fresh `python -m harness`"), ("1", "forked from the server")):
            start = time.monotonic()
            done = harness_cli("run", args.scenario, "--report-dir", reports, env={"HARNESS_TEST_FORK": fork})
            if done.returncode != 0:
                sys.exit(f"{args.scenario} failed ({row}):\n{done.stdout}\n{done.stderr}")
            rows[row].append(time.monotonic() - start)
    print(f"| `harness run {args.scenario}` | " + " | ".join(f"run {i + 1}" for i in range(args.rounds)) + " |")
    print("|---|" + "---|" * args.rounds)
    for row, seconds in rows.items():
        print(f"| {row} | " + " | ".join(f"{s:.1f} s" for s in seconds) + " |")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
