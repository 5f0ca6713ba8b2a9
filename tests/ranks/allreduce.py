"""A tiny rank program for the launcher's tests.

Every rank joins a gloo process group (env://), all-reduces its rank + 1 and checks
the sum, then behaves as $RANK_MODE says on rank $RANK_TARGET (default 1):
  ok       every rank passes a barrier and exits 0
  raise    the target raises KeyError('residual'); the others wait in a barrier
  sigkill  the target SIGKILLs itself; the others wait in a barrier
  exit3    the target exits with code 3 without an error record
  hang     the target sleeps forever in hang_forever(); the others wait in a barrier
With $PID_DIR set, each rank writes rank{r}-{pid}.pid there, and the pid of a
grandchild it spawns (`sleep`) to grand{r}-{pid}.pid, so a test can check that
nothing survives the run; after the all-reduce it writes ready{r}.
Each also writes its parent's pid to parent{r}: the launcher's when started fresh, a
zygote's when forked from the rank pool.
With $ECHO_ENV=NAME, each rank writes the value of $NAME to $PID_DIR/rank{r}.env.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.engines.launch.rankside import run_rank  # noqa: E402


def hang_forever():
    while True:
        time.sleep(600)


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    mode = os.environ.get("RANK_MODE", "ok")
    target = int(os.environ.get("RANK_TARGET", "1"))
    pid_dir = os.environ.get("PID_DIR")
    if pid_dir:
        grand = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        # one file per process (a port retry starts the ranks again)
        Path(pid_dir, f"grand{rank}-{grand.pid}.pid").write_text(str(grand.pid))
        Path(pid_dir, f"rank{rank}-{os.getpid()}.pid").write_text(str(os.getpid()))
        Path(pid_dir, f"parent{rank}").write_text(str(os.getppid()))  # the launcher, or the rank pool's zygote
        if os.environ.get("ECHO_ENV"):
            Path(pid_dir, f"rank{rank}.env").write_text(os.environ.get(os.environ["ECHO_ENV"], "<unset>"))

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t
    print(f"rank {rank}: all_reduce ok ({t.item()})", flush=True)
    if pid_dir:
        Path(pid_dir, f"ready{rank}").write_text("1")

    if rank == target:
        if mode == "raise":
            raise KeyError("residual")
        if mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "exit3":
            os._exit(3)
        if mode == "hang":
            hang_forever()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    run_rank(main)
