"""The process group of a run and the signals around it: stopping every process
of a run, and keeping Ctrl-C / SIGTERM from cutting that cleanup short."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time


def proc_stats() -> dict[int, list[str]] | None:
    """pid -> the fields of /proc/<pid>/stat after the command name (state, ppid, pgrp,
    session, ..., utime, stime, ...) of every process; None where /proc is unavailable.
    The name is skipped by its closing parenthesis: a name may hold spaces."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    stats = {}
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue  # gone since the listing
        stats[int(name)] = stat[stat.rfind(")") + 2 :].split()
    return stats


def group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) pids in process group `pgid`; None where /proc is unavailable."""
    stats = proc_stats()
    if stats is None:
        return None
    return [pid for pid, rest in stats.items() if len(rest) >= 3 and rest[2] == str(pgid) and _running(rest)]


def _running(fields: list[str]) -> bool:
    """A process's /proc stat fields (proc_stats) say it has not ended: not a zombie, not dead."""
    return bool(fields) and fields[0] not in ("Z", "X")


def own_processes(pid: int) -> list[int] | None:
    """Live (non-zombie) pids descended from `pid` (its children, theirs, ...); None where
    /proc is unavailable."""
    stats = proc_stats()
    if stats is None:
        return None
    children: dict[int, list[int]] = {}
    for child, rest in stats.items():
        if len(rest) >= 2 and _running(rest):
            children.setdefault(int(rest[1]), []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def live(pids: list[int]) -> list[int]:
    """Which of `pids` still run (not ended, not a zombie): a pid once seen, followed even
    after its parent ended and it was handed to another."""
    stats = proc_stats() or {}
    return [pid for pid in pids if pid in stats and _running(stats[pid])]


def group_alive(pgid: int) -> bool:
    members = group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, procs: list[subprocess.Popen], deadline: float) -> bool:
    """Wait until no live member of the group remains (ranks count only until they exit)."""
    while True:
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def stop_group(pgid: int | None, procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM the group, wait up to grace_s, SIGKILL what is left, reap every rank."""
    if pgid is not None:
        if group_alive(pgid):
            killpg(pgid, signal.SIGTERM)
            _wait_group_gone(pgid, procs, time.monotonic() + grace_s)
        killpg(pgid, signal.SIGKILL)
        _wait_group_gone(pgid, procs, time.monotonic() + 5.0)
    # a rank that was never in the group (spawn failed half way)
    for p in procs:
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


class BlockSignals:
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


class SigtermAsInterrupt:
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


class DeferInterrupts:
    """Hold Ctrl-C / SIGTERM while a short piece of work must finish whole (the final
    report): a signal that comes meanwhile is remembered and raised as KeyboardInterrupt
    once the work is done. A handler, not a signal mask: Python runs its handlers in the
    main thread whichever thread the kernel hands the signal to, and a mask covers only
    the thread that set it (the report's plot thread would still take SIGTERM's default)."""

    SIGS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self.caught: int | None = None
        self.old: dict = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGS:
                self.old[sig] = signal.signal(sig, self._remember)
        return self

    def _remember(self, signum, frame):
        self.caught = signum

    def __exit__(self, exc_type, *rest):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        if self.caught is not None and exc_type is None:
            raise KeyboardInterrupt(signal.Signals(self.caught).name)
        return False
