"""The launcher: start one process per rank, watch them, and say what happened.

`run_ranks(plan, log_dir, timeout_s)` starts `plan.world_size` copies of `plan.argv`
with the environment torchrun would give them, sends each rank's stdout+stderr to
`<log_dir>/rank{r}.log`, and watches them until one of:

  ok           every rank exited 0;
  crash        a rank exited non-zero or was killed by a signal: `failure` names it,
               with the exception and traceback from its error record (see rankside);
  hang         `timeout_s` passed, or earlier the stall detector saw every rank without
               progress for its window while some waited in a collective (stall.py;
               only for engines whose ranks call rankside.heartbeat, `stall` says so):
               every live rank is asked for a stack dump (SIGUSR1 -> faulthandler,
               see rankside), the dumps are parsed into `stacks` and `stuck_at`, then
               the ranks are killed;
  interrupted  Ctrl-C / SIGTERM reached the harness while it waited. The ranks are
               killed and reaped, then `LaunchInterrupted` (a KeyboardInterrupt that
               carries the partial `LaunchOutcome` as `.outcome`) is raised, so a CLI
               that catches KeyboardInterrupt can still write its partial report and
               exit 130. run_ranks never *returns* an "interrupted" outcome.

Process groups. All ranks of one run share ONE process group, created for the run:
rank 0 is started with `process_group=0` (it becomes the group leader, pgid = its pid)
and the other ranks join with `process_group=<pgid>`. Anything a rank spawns (torch
compile workers, vLLM engine-core / worker processes, a stray `sleep`) inherits the
group, so a single `killpg` takes all of it down, including grandchildren that the
launcher does not know about and cannot wait on. (We do not use start_new_session for
rank 0: setpgid() may only join a group in the caller's own session, so the other
ranks could not join a group in a new session.) The group is not the terminal's
foreground group, so a Ctrl-C at the terminal reaches only the harness, which then
stops the ranks in order instead of every process dying at once.

PID reuse. Rank exits are observed with waitid(WNOWAIT), which leaves the rank as a
zombie until the very end; a zombie keeps its pid, so the group id (= rank 0's pid)
cannot be recycled for an unrelated process while we may still signal it, and a rank
started after rank 0 already died can still join rank 0's group. Every rank is reaped
in the final cleanup.

No process survives its run: every path (ok, crash, hang, interrupt, an exception in
the launcher itself) goes through one `finally` that kills the group (SIGTERM, a short
grace, SIGKILL), waits until no live member of the group remains, and reaps the ranks.
That cleanup runs with SIGINT/SIGTERM blocked, so a second Ctrl-C cannot cut it short;
the blocked signal is delivered right after. If the harness itself is SIGKILLed, the
ranks die via PR_SET_PDEATHSIG (rankside); processes they spawned do not (nothing short
of a cgroup can catch that case). Note PDEATHSIG fires when the *thread* that started
the rank exits: call run_ranks from a thread that outlives the run (the main thread,
or a worker that blocks in run_ranks, as it does).

The rank pool. Where the engine's plan names the modules its ranks import
(`LaunchPlan.preload`), a local rank is forked from a zygote that imported them once
(pool.py, zygote.py) instead of started fresh: the same environment, log, process group
and exit reporting, seconds less per scenario. Its exits are reported without reaping,
as above, and the zygote kills what it still runs when the harness goes.

Nodes. A run bigger than one machine is spread over `nodes` (a Cluster): each node is
an exec prefix that runs a command there (`ip netns exec h1`, `ssh -T host`, `srun ...`)
and a number of ranks; ranks fill the nodes in order, so TP groups stay inside a node and
PP crosses nodes. Behind the prefix runs a small node agent (nodeside.py) that starts
the rank in a process group of its own on the node and does there what the process
group does here: it kills the rank's group when the rank exits, on SIGTERM, and on
end-of-file of its stdin, a pipe from this launcher (the control channel), which comes
when the launcher stops the run, dies, or loses the connection; "dump" on the channel
becomes SIGUSR1 to the rank (an exec prefix like ssh forwards no signals). So the crash,
hang and no-survivor guarantees hold on every node. The run directory and the harness must be at the same paths on every node
(a shared filesystem), as outputs and error records are written there.

Standard library only; this module must not import torch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path

from harness.contract.launchplan import LaunchPlan
from harness.engines.launch.attempt import Attempt, free_port
from harness.engines.launch.blame import looks_secondary, pick_first
from harness.engines.launch.cluster import Cluster, Node
from harness.engines.launch.outcome import LaunchInterrupted, LaunchOutcome, RankFailure
from harness.engines.launch.procgroup import BlockSignals, DeferInterrupts, SigtermAsInterrupt
from harness.engines.launch.rankside import LAUNCHER_PID_ENV
from harness.engines.launch.stacks import parse_stack_dump
from harness.engines.launch.stall import StallWatch, stall_window_s

__all__ = [
    "RankFailure",
    "LaunchOutcome",
    "LaunchInterrupted",
    "Node",
    "Cluster",
    "run_ranks",
    "free_port",
    "parse_stack_dump",
    "SigtermAsInterrupt",
    "DeferInterrupts",
    "LAUNCHER_PID_ENV",
]

POLL_S = 0.1
TERM_GRACE_S = 3.0  # SIGTERM -> SIGKILL
# after a death that looks secondary, how long to look for the real cause
SETTLE_S = 1.0
PORT_ATTEMPTS = 3


def run_ranks(
    plan: LaunchPlan,
    log_dir: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cluster: Cluster | None = None,
    cancel: threading.Event | None = None,
) -> LaunchOutcome:
    """Run `plan` to its end (on `cluster`'s nodes if given); see the module docstring
    for what each outcome means. Setting `cancel` (from another thread) acts as Ctrl-C
    does: this matters where run_ranks runs in a worker thread, which signals never reach."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for attempt_no in range(PORT_ATTEMPTS):
        outcome, attempt = _run_attempt(plan, log_dir, timeout_s, env, t0, cluster, cancel)
        if outcome.status == "crash" and attempt.addr_in_use() and attempt_no + 1 < PORT_ATTEMPTS:
            # MASTER_PORT was taken between free_port() and bind(): new port
            continue
        return outcome
    raise AssertionError("unreachable")  # pragma: no cover


def _run_attempt(plan, log_dir, timeout_s, env, t0, cluster, cancel) -> tuple[LaunchOutcome, Attempt]:
    attempt = Attempt(plan, log_dir, free_port(), env, cluster)
    outcome = LaunchOutcome(
        status="interrupted",
        duration_s=0.0,
        logs={r: str(p) for r, p in attempt.logs.items()},
        port=attempt.port,
    )
    # SIGTERM -> KeyboardInterrupt for the whole attempt, cleanup included (where
    # SIGINT/SIGTERM are blocked anyway), so there is no gap where SIGTERM's default
    # action would kill the harness before it stopped the ranks.
    with SigtermAsInterrupt():
        try:
            # starting the ranks counts: a zygote's imports too
            deadline = time.monotonic() + timeout_s
            attempt.start()
            watch = StallWatch(attempt.heartbeats, attempt.activity_of, stall_window_s())
            while True:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt("cancelled")
                new = attempt.poll()
                failed = [e for e in new if e.failed]
                if failed:
                    if all(looks_secondary(e) for e in failed):
                        # maybe the real culprit is a moment behind: give it a chance
                        settle = time.monotonic() + SETTLE_S
                        while time.monotonic() < settle and len(attempt.exits) < plan.world_size:
                            time.sleep(POLL_S)
                            more = [e for e in attempt.poll() if e.failed]
                            failed += more
                            if any(not looks_secondary(e) for e in more):
                                break
                    outcome.status = "crash"
                    outcome.failure = attempt.failure_of(pick_first(failed))
                    break
                if len(attempt.exits) == plan.world_size:
                    outcome.status = "ok"
                    break
                stall = watch.check(time.monotonic(), attempt.live_ranks())
                if stall is not None or time.monotonic() >= deadline:
                    outcome.status = "hang"
                    outcome.stall = asdict(stall) if stall else None
                    outcome.stacks, outcome.stuck_at = attempt.dump_stacks()
                    break
                time.sleep(POLL_S)
        except KeyboardInterrupt as exc:
            with BlockSignals():
                attempt.stop(TERM_GRACE_S)
            outcome.status = "interrupted"
            outcome.duration_s = time.monotonic() - t0
            raise LaunchInterrupted(outcome) from exc
        finally:
            # every path: nothing of this run may outlive it
            with BlockSignals():
                attempt.stop(0.0 if outcome.status == "hang" else TERM_GRACE_S)
    outcome.duration_s = time.monotonic() - t0
    return outcome, attempt
