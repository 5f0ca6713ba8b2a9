"""One attempt at a run: start the ranks on one port, poll their exits, stop them,
and gather what a crash or hang leaves (error records, log tails, stack dumps)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.contract.launchplan import LaunchPlan
from harness.engines.launch.blame import (
    ADDR_IN_USE,
    RankExit,
    harness_fault_of,
    log_tail,
    peek_exit,
    read_record,
    record_text,
)
from harness.engines.launch.cluster import Cluster
from harness.engines.launch.outcome import RankFailure
from harness.engines.launch.pool import ForkedRank, spawn_rank
from harness.engines.launch.procgroup import stop_group
from harness.engines.launch.rankside import (
    DUMP_SIGNAL,
    ERROR_FILE_ENV,
    HEARTBEAT_FILE_ENV,
    LAUNCHER_PID_ENV,
)
from harness.engines.launch.stacks import parse_stack_dump
from harness.engines.launch.stall import read_activity_file, tree_activity

# how long to wait for SIGUSR1 stack dumps to land in the logs
DUMP_WAIT_S = 2.0
# how long node agents get to stop their ranks before the prefixes are killed
NODE_STOP_S = 5.0
_NODE_AGENT = Path(__file__).with_name("nodeside.py")

# torchrun / torchelastic variables that must not leak from a harness that itself runs
# under torchrun; the launcher sets its own RANK/WORLD_SIZE/... for each rank.
_STRIP_ENV_PREFIXES = ("TORCHELASTIC_",)
_STRIP_ENV = {"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE"}


def free_port() -> int:
    """A TCP port that is free right now (on every local address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Attempt:
    def __init__(
        self, plan: LaunchPlan, log_dir: Path, port: int, extra_env: dict[str, str] | None, cluster: Cluster | None = None
    ):
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
        self.heartbeats = {r: log_dir / f"rank{r}.heartbeat" for r in range(plan.world_size)}
        self.exits: dict[int, RankExit] = {}
        self.death_order: list[RankExit] = []

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
        env[HEARTBEAT_FILE_ENV] = str(self.heartbeats[rank])
        return env

    def rank_env(self, rank: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _STRIP_ENV and not k.startswith(_STRIP_ENV_PREFIXES)}
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
                    # node ranks are started with a control channel
                    if p.stdin is not None:
                        p.stdin.close()
                except OSError:
                    pass
            deadline = time.monotonic() + NODE_STOP_S
            while time.monotonic() < deadline and any(peek_exit(p) is None for p in self.procs):
                time.sleep(0.05)
        stop_group(self.pgid, self.procs, grace_s)

    def start(self) -> None:
        for r in range(self.plan.world_size):
            hb = str(self.heartbeats[r])
            for stale in (self.errs[r], Path(str(self.errs[r]) + ".tmp"), Path(hb), Path(hb + ".activity")):
                stale.unlink(missing_ok=True)
        for r in range(self.plan.world_size):
            proc = self._start_rank(r, 0 if self.pgid is None else self.pgid)
            self.procs.append(proc)
            if self.pgid is None:
                self.pgid = proc.pid

    def _start_rank(self, rank: int, pgid: int):
        """Forked from the rank pool where it serves (pool.py), else a fresh process."""
        env = self.rank_env(rank)
        if not self.placement:
            forked = spawn_rank(self.plan.argv, self.plan.preload, env, self.logs[rank], pgid, self.plan.preload_on_request)
            if forked is not None:
                return forked
        with open(self.logs[rank], "wb") as log:
            return subprocess.Popen(
                self.command(rank),
                env=env,
                stdin=subprocess.PIPE if self.placement else subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=pgid,
            )

    def poll(self) -> list[RankExit]:
        """Ranks that exited since the last poll."""
        new = []
        now = time.monotonic()
        for r, p in enumerate(self.procs):
            if r in self.exits:
                continue
            st = peek_exit(p)
            if st is None:
                continue
            ex = RankExit(r, st[0], st[1], now, lost=p.lost if isinstance(p, ForkedRank) else None)
            if ex.failed:
                ex.record = read_record(self.errs[r])
            self.exits[r] = ex
            self.death_order.append(ex)
            new.append(ex)
        return new

    def live_ranks(self) -> list[int]:
        return [r for r in range(len(self.procs)) if r not in self.exits]

    def activity_of(self, ranks: list[int]) -> dict[int, tuple[float, int] | None]:
        """(CPU seconds, disk bytes) of each rank's process tree, for the stall detector:
        from /proc here, from the file its node agent keeps for a rank on a node."""
        if self.placement:
            return {r: read_activity_file(Path(str(self.heartbeats[r]) + ".activity")) for r in ranks}
        by_pid = tree_activity([self.procs[r].pid for r in ranks])
        return {r: by_pid.get(self.procs[r].pid) for r in ranks}

    def failure_of(self, ex: RankExit) -> RankFailure:
        rec = ex.record or read_record(self.errs[ex.rank])
        exception = traceback = frame = wrapper = storage = model_frame = None
        if rec:
            etype = str(rec.get("exception_type") or "Exception")
            msg = str(rec.get("message") or "")
            exception = f"{etype}: {msg}" if msg else etype
            traceback = rec.get("traceback") or None
            frame, wrapper = rec.get("frame") or None, rec.get("wrapper") or None
            model_frame = rec.get("model_frame") or None
            storage = rec.get("storage") if isinstance(rec.get("storage"), dict) else None
        if traceback is None:
            traceback = log_tail(self.logs[ex.rank]) or None
        silent = rec is None and traceback is None
        command = shlex.join(self.plan.argv) if silent else None
        return RankFailure(
            ex.rank,
            ex.exitcode,
            ex.signal,
            exception,
            traceback,
            str(self.logs[ex.rank]),
            frame,
            wrapper,
            command,
            harness_fault=ex.lost or harness_fault_of(rec),
            storage=storage,
            model_frame=model_frame,
        )

    def addr_in_use(self) -> bool:
        """Did rank 0 (the TCPStore host) fail because MASTER_PORT was taken?"""
        ex = self.exits.get(0)
        if ex is None or not ex.failed:
            return False
        text = record_text(ex.record or read_record(self.errs[0]))
        if not text:
            text = log_tail(self.logs[0])
        return bool(ADDR_IN_USE.search(text))

    def ask_for_stack_dump(self, rank: int) -> None:
        from harness.engines.launch.nodeside import DUMP_COMMAND

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
        live = [r for r, p in enumerate(self.procs) if r not in self.exits and peek_exit(p) is None]
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
