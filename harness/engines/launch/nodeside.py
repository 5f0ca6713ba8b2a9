"""The node agent: what the launcher runs behind a node's exec prefix, around one rank.

    python harness/engines/launch/nodeside.py --cwd DIR -- RANK COMMAND...

On a machine of its own the launcher's process group does not reach, so this agent
does there what the launcher does at home. It starts the rank in a new process group
on the node and:
  * serves the control channel on its stdin, a pipe from the launcher through the
    exec prefix: "dump" -> SIGUSR1 to the rank (the rank's stack dump, see rankside);
    end-of-file (the launcher stopped the run, died, or lost the connection) -> the
    rank's group is stopped;
  * on SIGTERM/SIGINT stops the rank's group (SIGTERM, a short grace, SIGKILL);
  * when the rank exits, kills whatever it left in its group, then exits the way the
    rank did (same code, or the same signal), so the launcher's crash verdict names it;
  * every second, writes the CPU and disk use of the rank's process tree beside its
    heartbeat file (<heartbeat>.activity), which the launcher's stall detector reads
    for a rank whose /proc it cannot see (see stall.py).

Run as a script by path (no package on sys.path needed before it starts); standard
library only, like the rest of the launcher.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.contract.settings.variables import RANK_HEARTBEAT_FILE  # noqa: E402
from harness.engines.launch.blame import peek_exit  # noqa: E402
from harness.engines.launch.procgroup import group_alive, killpg  # noqa: E402
from harness.engines.launch.stall import ACTIVITY_SAMPLE_S, tree_activity, write_activity_file  # noqa: E402

DUMP_COMMAND = b"dump\n"
# shorter than the launcher's TERM_GRACE_S, so the agent finishes its cleanup first
STOP_GRACE_S = 1.5


def stop_group(pgid: int, grace_s: float) -> None:
    if group_alive(pgid):
        killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
    killpg(pgid, signal.SIGKILL)


def serve_channel(rank: subprocess.Popen) -> None:
    # raw reads of fd 0: a thread blocked in a buffered stdin would stop the interpreter's exit
    for line in os.fdopen(0, "rb", buffering=0, closefd=False):
        if line == DUMP_COMMAND:
            try:
                os.kill(rank.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
    # end-of-file: the run is over, or nobody watches it any more
    stop_group(rank.pid, STOP_GRACE_S)


def exit_like(rank: subprocess.Popen) -> None:
    code, sig = peek_exit(rank) or (1, None)
    rank.wait()
    if sig is not None:
        signum = getattr(signal, sig, signal.SIGKILL)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    # the channel thread may still be blocked in a read
    os._exit(1 if code is None else code)


def report_activity(pid: int, path: Path) -> None:
    activity = tree_activity([pid]).get(pid)
    if activity is not None:
        try:
            write_activity_file(path, activity)
        except OSError:
            # the launcher then sees no activity: at worst the timeout decides
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cwd", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.chdir(args.cwd)
    rank = subprocess.Popen(command, stdin=subprocess.DEVNULL, process_group=0)

    def on_stop(signum, frame):
        stop_group(rank.pid, STOP_GRACE_S)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    threading.Thread(target=serve_channel, args=(rank,), daemon=True).start()
    heartbeat = RANK_HEARTBEAT_FILE.raw()
    next_sample = 0.0
    # WNOWAIT: the group id stays ours until we reap
    while peek_exit(rank) is None:
        if heartbeat and time.monotonic() >= next_sample:
            next_sample = time.monotonic() + ACTIVITY_SAMPLE_S
            report_activity(rank.pid, Path(heartbeat + ".activity"))
        time.sleep(0.1)
    stop_group(rank.pid, 0.0)  # leftovers of a finished rank
    exit_like(rank)


if __name__ == "__main__":
    main()
