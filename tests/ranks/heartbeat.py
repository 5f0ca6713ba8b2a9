"""A rank program for the stall detector's tests: ranks that report heartbeats.

Every rank joins a gloo process group (env://) inside rankside.in_collective(), then
the target rank ($RANK_TARGET, default 1) does what $RANK_MODE says while the others
wait for it in a barrier, inside in_collective() too (as the reference engine's
collectives are):
  busy    computes (pure Python, no collective, no heartbeat) for $BUSY_S seconds,
          then joins the barrier: slow but moving, never a hang
  sleep   sleeps forever in sleep_forever(), outside any collective: a hang
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.engines.launch.rankside import heartbeat, in_collective, run_rank  # noqa: E402


def sleep_forever():
    while True:
        time.sleep(600)


def compute_for(seconds: float) -> int:
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(1000))
    return n


def main():
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    target = int(os.environ.get("RANK_TARGET", "1"))
    mode = os.environ.get("RANK_MODE", "busy")
    with in_collective():
        dist.init_process_group("gloo", init_method="env://")
    heartbeat()
    print(f"rank {rank}: joined", flush=True)
    if rank == target:
        if mode == "busy":
            compute_for(float(os.environ.get("BUSY_S", "8")))
        elif mode == "sleep":
            sleep_forever()
    with in_collective():
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    run_rank(main)
