"""The launcher: start one process per rank, watch them, and say what happened.

`run_ranks(plan, log_dir, timeout_s)` starts `plan.world_size` copies of `plan.argv`
with the environment torchrun would give them, sends each rank's stdout+stderr to
`<log_dir>/rank{r}.log`, and watches them until one of:

  ok           every rank exited 0;
  crash        a rank exited non-zero or was killed by a signal: `failure` names it,
               with the exception and traceback from its error record (see rankside);
  hang         `timeout_s` passed: every live rank is asked for a stack dump
               (SIGUSR1 -> faulthandler, see rankside), the dumps are parsed into
               `stacks` and `stuck_at`, then the ranks are killed;
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

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.engines.base import LaunchPlan
from harness.launch.rankside import DUMP_SIGNAL, ERROR_FILE_ENV, LAUNCHER_PID_ENV

__all__ = [
    "RankFailure",
    "LaunchOutcome",
    "LaunchInterrupted",
    "Node",
    "Cluster",
    "run_ranks",
    "free_port",
    "parse_stack_dump",
    "LAUNCHER_PID_ENV",
]

POLL_S = 0.1
TERM_GRACE_S = 3.0  # SIGTERM -> SIGKILL
DUMP_WAIT_S = 2.0  # how long to wait for SIGUSR1 stack dumps to land in the logs
SETTLE_S = 1.0  # after a death that looks secondary, how long to look for the real cause
PORT_ATTEMPTS = 3
NODE_STOP_S = 5.0  # how long node agents get to stop their ranks before the prefixes are killed
_NODE_AGENT = Path(__file__).with_name("nodeside.py")
LOG_TAIL_CHARS = 6000

# torchrun / torchelastic variables that must not leak from a harness that itself runs
# under torchrun; the launcher sets its own RANK/WORLD_SIZE/... for each rank.
_STRIP_ENV_PREFIXES = ("TORCHELASTIC_",)
_STRIP_ENV = {"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE"}


@dataclass
class RankFailure:
    rank: int
    exitcode: int | None  # None if killed by a signal
    signal: str | None  # e.g. "SIGKILL"
    exception: str | None  # "KeyError: 'residual'" from the rank's error record, else None
    traceback: str | None  # from the error record; else the tail of the rank's log
    log: str  # path of the rank's log file


@dataclass
class LaunchOutcome:
    status: str  # "ok" | "crash" | "hang" | "interrupted"
    duration_s: float
    failure: RankFailure | None = None  # the FIRST rank that died (crash)
    stacks: dict[int, str] = field(default_factory=dict)  # hang: per-rank faulthandler dump
    stuck_at: dict[int, str] = field(default_factory=dict)  # hang: "file:line in func" of main thread
    logs: dict[int, str] = field(default_factory=dict)  # rank -> log path
    port: int = 0


@dataclass(frozen=True)
class Node:
    """One machine of a multi-node run."""

    name: str
    exec_prefix: tuple[str, ...]  # runs a command on the node; () is this machine
    ranks: int  # how many ranks it takes (its devices)
    env: dict = field(default_factory=dict)  # e.g. GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME of the node
    shell: bool = False  # the prefix hands its arguments to a shell (ssh): pass one quoted string


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    master_addr: str  # where every node reaches rank 0 (the first node)

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


class LaunchInterrupted(KeyboardInterrupt):
    """Raised by run_ranks after Ctrl-C / SIGTERM, once every rank is gone."""

    def __init__(self, outcome: LaunchOutcome):
        super().__init__("launch interrupted")
        self.outcome = outcome


def free_port() -> int:
    """A TCP port that is free right now (on every local address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------
# one rank's exit


@dataclass
class _Exit:
    rank: int
    exitcode: int | None
    signal: str | None
    observed: float  # monotonic time we noticed it
    record: dict | None = None  # the rank's error record, if it wrote one

    @property
    def failed(self) -> bool:
        return self.exitcode != 0


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _peek_exit(proc: subprocess.Popen) -> tuple[int | None, str | None] | None:
    """(exitcode, signal) of an exited rank without reaping it; None while it runs."""
    if hasattr(os, "waitid"):
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped (should not happen): fall back
            info = None
            if proc.returncode is None:
                return None
        else:
            if info is None or info.si_pid == 0:
                return None
            if info.si_code == os.CLD_EXITED:
                return info.si_status, None
            return None, _signal_name(info.si_status)
    rc = proc.poll()
    if rc is None:
        return None
    return (rc, None) if rc >= 0 else (None, _signal_name(-rc))


def _read_record(path: Path) -> dict | None:
    try:
        with open(path) as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else None
    except (OSError, ValueError):
        return None


def _log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# A rank that dies *because* a peer died usually reports a transport error. Such a
# rank must not be named as the culprit when a rank with a real exception (or a rank
# killed by a signal) died at about the same time. The list is deliberately short
# and textual: gloo, NCCL and the TCPStore phrase these differently, and a false
# "secondary" only matters when there is another candidate to prefer.
_SECONDARY_PATTERNS = re.compile(
    "|".join(
        [
            r"connection closed by peer",
            r"connection reset by peer",
            r"broken pipe",
            r"\bECONNRESET\b",
            r"\bEPIPE\b",
            r"connection refused",
            r"remote process exited",
            r"socket closed",
            r"end of file",  # gloo: "Read error ... : End of file"
            r"NCCL communicator was aborted",
            r"failed to recv",
            r"DistNetworkError",
        ]
    ),
    re.IGNORECASE,
)
_ADDR_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)


def _record_text(rec: dict | None) -> str:
    if not rec:
        return ""
    return " ".join(str(rec.get(k, "")) for k in ("exception_type", "message", "traceback"))


def _looks_secondary(ex: _Exit) -> bool:
    if ex.signal is not None:
        return False  # killed by a signal: that is the event, not an echo of one
    text = _record_text(ex.record)
    return bool(text) and bool(_SECONDARY_PATTERNS.search(text))


def _pick_first(deaths: list[_Exit]) -> _Exit:
    """The rank to blame among ranks that died close together.

    Ranks with a real cause (an exception that is not a transport error, a signal, or
    a non-zero exit without a record) beat ranks that look like they only lost a peer;
    within a class, the earliest error-record time wins, else the order we saw them die
    (the list order).
    """

    def key(item: tuple[int, _Exit]):
        order, ex = item
        t = ex.record.get("time") if ex.record else None
        when = float(t) if isinstance(t, (int, float)) else None
        return (_looks_secondary(ex), when is None, when or 0.0, order)

    return min(enumerate(deaths), key=key)[1]


# ---------------------------------------------------------------------------------
# stack dumps

_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')


def parse_stack_dump(text: str) -> tuple[str, str | None]:
    """Find the last faulthandler all-threads dump in `text`.

    Returns (dump text, innermost frame of the main thread as "file:line in func").
    faulthandler lists threads newest first, so the main thread is the last block.
    """
    lines = text.splitlines()
    # the dump starts at the first header of the last contiguous run of thread blocks
    headers = [i for i, ln in enumerate(lines) if _THREAD_HEADER.match(ln)]
    if not headers:
        return "", None
    start = headers[-1]
    for i in reversed(headers[:-1]):
        # contiguous: only frame lines / blank lines / "<no Python frame>" / "..." between
        between = lines[i + 1 : start]
        if all(not b.strip() or b.startswith("  ") for b in between):
            start = i
        else:
            break
    end = headers[-1] + 1
    while end < len(lines) and (lines[end].startswith("  ")):
        end += 1
    dump = "\n".join(lines[start:end])
    stuck = None
    for ln in lines[headers[-1] + 1 : end]:
        m = _FRAME.match(ln)
        if m:
            stuck = f"{m['file']}:{m['line']} in {m['func']}"
            break
    return dump, stuck


# ---------------------------------------------------------------------------------
# the process group


def _group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) pids in process group `pgid`; None where /proc is unavailable."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members = []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        # rest: state ppid pgrp session ...
        if len(rest) >= 3 and rest[2] == str(pgid) and rest[0] not in ("Z", "X"):
            members.append(int(name))
    return members


def _group_alive(pgid: int) -> bool:
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, procs: list[subprocess.Popen], deadline: float) -> bool:
    """Wait until no live member of the group remains (ranks count only until they exit)."""
    while True:
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _stop_group(pgid: int | None, procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM the group, wait up to grace_s, SIGKILL what is left, reap every rank."""
    if pgid is not None:
        if _group_alive(pgid):
            _killpg(pgid, signal.SIGTERM)
            _wait_group_gone(pgid, procs, time.monotonic() + grace_s)
        _killpg(pgid, signal.SIGKILL)
        _wait_group_gone(pgid, procs, time.monotonic() + 5.0)
    for p in procs:  # a rank that was never in the group (spawn failed half way)
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            pass


class _BlockSignals:
    """Block SIGINT/SIGTERM (main thread only) so cleanup cannot be interrupted."""

    SIGS = {signal.SIGINT, signal.SIGTERM}

    def __enter__(self):
        self.old = None
        if hasattr(signal, "pthread_sigmask"):
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGS)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        return False


class _SigtermAsInterrupt:
    """While waiting, turn SIGTERM into KeyboardInterrupt (when nobody else handles it)."""

    def __enter__(self):
        self.installed = False
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, self._handler)
                self.installed = True
        return self

    @staticmethod
    def _handler(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    def __exit__(self, *exc):
        if self.installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return False


# ---------------------------------------------------------------------------------
# one attempt


class _Attempt:
    def __init__(self, plan: LaunchPlan, log_dir: Path, port: int, extra_env: dict[str, str] | None,
                 cluster: Cluster | None = None):
        self.plan = plan
        self.placement = cluster.place(plan.world_size) if cluster else None
        self.master_addr = cluster.master_addr if cluster else "127.0.0.1"
        self.log_dir = log_dir
        self.port = port
        self.extra_env = extra_env or {}
        self.procs: list[subprocess.Popen] = []
        self.pgid: int | None = None
        self.logs = {r: log_dir / f"rank{r}.log" for r in range(plan.world_size)}
        self.errs = {r: log_dir / f"rank{r}.error.json" for r in range(plan.world_size)}
        self.exits: dict[int, _Exit] = {}
        self.death_order: list[_Exit] = []

    def rank_vars(self, rank: int) -> dict[str, str]:
        """What the launcher sets for a rank, on top of the environment it inherits."""
        env = {**self.extra_env, **self.plan.env}
        local_rank, local_size = rank, self.plan.world_size
        if self.placement:
            node, local_rank = self.placement[rank]
            local_size = sum(1 for n, _ in self.placement if n is node)
            env.update(node.env)
        else:
            # a pid means nothing on another machine: node ranks have their agent instead
            env[LAUNCHER_PID_ENV] = str(os.getpid())
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(self.plan.world_size),
            LOCAL_RANK=str(local_rank),
            LOCAL_WORLD_SIZE=str(local_size),
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(self.port),
            PYTHONUNBUFFERED="1",
        )
        env[ERROR_FILE_ENV] = str(self.errs[rank])
        return env

    def rank_env(self, rank: int) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _STRIP_ENV and not k.startswith(_STRIP_ENV_PREFIXES)
        }
        env.update(self.rank_vars(rank))
        return env

    def command(self, rank: int) -> list[str]:
        """The rank's command line; on a node, behind its exec prefix and the node agent,
        with the launcher's variables passed through `env` (ssh does not carry them)."""
        if not self.placement:
            return list(self.plan.argv)
        node = self.placement[rank][0]
        env_args = [f"{k}={v}" for k, v in sorted(self.rank_vars(rank).items())]
        agent = [sys.executable, str(_NODE_AGENT), "--cwd", os.getcwd(), "--"]
        inner = ["env", *env_args, *agent, *self.plan.argv]
        return [*node.exec_prefix, shlex.join(inner)] if node.shell else [*node.exec_prefix, *inner]

    def stop(self, grace_s: float) -> None:
        """Stop every rank of the attempt. Node ranks first: end-of-file on their control
        channels makes each node agent stop its rank's group and exit, and the launcher
        sees that through the exec prefix's exit; then the local process group goes."""
        if self.placement:
            for p in self.procs:
                try:
                    p.stdin.close()
                except OSError:
                    pass
            deadline = time.monotonic() + NODE_STOP_S
            while time.monotonic() < deadline and any(_peek_exit(p) is None for p in self.procs):
                time.sleep(0.05)
        _stop_group(self.pgid, self.procs, grace_s)

    def start(self) -> None:
        for r in range(self.plan.world_size):
            for stale in (self.errs[r], Path(str(self.errs[r]) + ".tmp")):
                stale.unlink(missing_ok=True)
        for r in range(self.plan.world_size):
            with open(self.logs[r], "wb") as log:
                proc = subprocess.Popen(
                    self.command(r),
                    env=self.rank_env(r),
                    stdin=subprocess.PIPE if self.placement else subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    process_group=0 if self.pgid is None else self.pgid,
                )
            self.procs.append(proc)
            if self.pgid is None:
                self.pgid = proc.pid

    def poll(self) -> list[_Exit]:
        """Ranks that exited since the last poll."""
        new = []
        now = time.monotonic()
        for r, p in enumerate(self.procs):
            if r in self.exits:
                continue
            st = _peek_exit(p)
            if st is None:
                continue
            ex = _Exit(r, st[0], st[1], now)
            if ex.failed:
                ex.record = _read_record(self.errs[r])
            self.exits[r] = ex
            self.death_order.append(ex)
            new.append(ex)
        return new

    def failure_of(self, ex: _Exit) -> RankFailure:
        rec = ex.record or _read_record(self.errs[ex.rank])
        exception = traceback = None
        if rec:
            etype = str(rec.get("exception_type") or "Exception")
            msg = str(rec.get("message") or "")
            exception = f"{etype}: {msg}" if msg else etype
            traceback = rec.get("traceback") or None
        if traceback is None:
            traceback = _log_tail(self.logs[ex.rank]) or None
        return RankFailure(ex.rank, ex.exitcode, ex.signal, exception, traceback, str(self.logs[ex.rank]))

    def addr_in_use(self) -> bool:
        """Did rank 0 (the TCPStore host) fail because MASTER_PORT was taken?"""
        ex = self.exits.get(0)
        if ex is None or not ex.failed:
            return False
        text = _record_text(ex.record or _read_record(self.errs[0]))
        if not text:
            text = _log_tail(self.logs[0])
        return bool(_ADDR_IN_USE.search(text))

    def ask_for_stack_dump(self, rank: int) -> None:
        from harness.launch.nodeside import DUMP_COMMAND

        proc = self.procs[rank]
        try:
            if proc.stdin is not None:  # a node rank: its agent passes it on
                proc.stdin.write(DUMP_COMMAND)
                proc.stdin.flush()
            else:
                os.kill(proc.pid, DUMP_SIGNAL)
        except (ProcessLookupError, BrokenPipeError):
            pass

    def dump_stacks(self) -> tuple[dict[int, str], dict[int, str]]:
        live = [r for r, p in enumerate(self.procs) if r not in self.exits and _peek_exit(p) is None]
        offsets = {}
        for r in live:
            try:
                offsets[r] = self.logs[r].stat().st_size
            except OSError:
                offsets[r] = 0
            self.ask_for_stack_dump(r)
        stacks: dict[int, str] = {}
        stuck: dict[int, str] = {}
        deadline = time.monotonic() + DUMP_WAIT_S
        pending = set(live)
        last_sizes: dict[int, int] = {}
        while pending:
            for r in list(pending):
                try:
                    with open(self.logs[r], "rb") as f:
                        f.seek(offsets[r])
                        text = f.read().decode("utf-8", "replace")
                except OSError:
                    text = ""
                dump, where = parse_stack_dump(text)
                # done once a dump is there and the log stopped growing (dump complete)
                if dump and last_sizes.get(r) == len(text):
                    stacks[r] = dump
                    if where:
                        stuck[r] = where
                    pending.discard(r)
                last_sizes[r] = len(text)
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        for r in pending:  # late or no dump: take what is there
            try:
                with open(self.logs[r], "rb") as f:
                    f.seek(offsets[r])
                    dump, where = parse_stack_dump(f.read().decode("utf-8", "replace"))
            except OSError:
                dump, where = "", None
            stacks[r] = dump or "(no stack dump received: the rank did not answer SIGUSR1)"
            if where:
                stuck[r] = where
        return stacks, stuck


def run_ranks(
    plan: LaunchPlan, log_dir: Path, timeout_s: float, env: dict[str, str] | None = None,
    cluster: Cluster | None = None, cancel: threading.Event | None = None,
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
            continue  # MASTER_PORT was taken between free_port() and bind(): new port
        return outcome
    raise AssertionError("unreachable")  # pragma: no cover


def _run_attempt(plan, log_dir, timeout_s, env, t0, cluster, cancel) -> tuple[LaunchOutcome, _Attempt]:
    attempt = _Attempt(plan, log_dir, free_port(), env, cluster)
    outcome = LaunchOutcome(
        status="interrupted",
        duration_s=0.0,
        logs={r: str(p) for r, p in attempt.logs.items()},
        port=attempt.port,
    )
    # SIGTERM -> KeyboardInterrupt for the whole attempt, cleanup included (where
    # SIGINT/SIGTERM are blocked anyway), so there is no gap where SIGTERM's default
    # action would kill the harness before it stopped the ranks.
    with _SigtermAsInterrupt():
        try:
            attempt.start()
            deadline = time.monotonic() + timeout_s
            while True:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt("cancelled")
                new = attempt.poll()
                failed = [e for e in new if e.failed]
                if failed:
                    if all(_looks_secondary(e) for e in failed):
                        # maybe the real culprit is a moment behind: give it a chance
                        settle = time.monotonic() + SETTLE_S
                        while time.monotonic() < settle and len(attempt.exits) < plan.world_size:
                            time.sleep(POLL_S)
                            more = [e for e in attempt.poll() if e.failed]
                            failed += more
                            if any(not _looks_secondary(e) for e in more):
                                break
                    outcome.status = "crash"
                    outcome.failure = attempt.failure_of(_pick_first(failed))
                    break
                if len(attempt.exits) == plan.world_size:
                    outcome.status = "ok"
                    break
                if time.monotonic() >= deadline:
                    outcome.status = "hang"
                    outcome.stacks, outcome.stuck_at = attempt.dump_stacks()
                    break
                time.sleep(POLL_S)
        except KeyboardInterrupt as exc:
            with _BlockSignals():
                attempt.stop(TERM_GRACE_S)
            outcome.status = "interrupted"
            outcome.duration_s = time.monotonic() - t0
            raise LaunchInterrupted(outcome) from exc
        finally:
            # every path: nothing of this run may outlive it
            with _BlockSignals():
                attempt.stop(0.0 if outcome.status == "hang" else TERM_GRACE_S)
    outcome.duration_s = time.monotonic() - t0
    return outcome, attempt
