"""Crash blame: which rank died first, and why.

A rank's exit is observed without reaping it (see the launcher's note on PID reuse);
among ranks that died close together the one with a real cause is named, not the
ones that only lost a peer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

LOG_TAIL_CHARS = 6000


@dataclass
class RankExit:
    rank: int
    exitcode: int | None
    signal: str | None
    observed: float  # monotonic time we noticed it
    record: dict | None = None  # the rank's error record, if it wrote one
    # it died with a helper of the harness's own (the rank pool's zygote): why
    lost: str | None = None

    @property
    def failed(self) -> bool:
        return self.exitcode != 0


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def child_exit(pid: int) -> tuple[int | None, str | None] | None:
    """(exitcode, signal) of an exited child `pid` without reaping it (waitid WNOWAIT: its
    pid stays held); None while it runs. ChildProcessError if it is no child of ours."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status, None
    return None, signal_name(info.si_status)


def peek_exit(proc: subprocess.Popen) -> tuple[int | None, str | None] | None:
    """(exitcode, signal) of an exited rank without reaping it; None while it runs."""
    # a rank forked by the rank pool (pool.ForkedRank)
    if not isinstance(proc, subprocess.Popen):
        return proc.peek_exit()
    if hasattr(os, "waitid"):
        try:
            return child_exit(proc.pid)
        except ChildProcessError:
            # already reaped (should not happen): fall back
            if proc.returncode is None:
                return None
    rc = proc.poll()
    if rc is None:
        return None
    return (rc, None) if rc >= 0 else (None, signal_name(-rc))


def read_record(path: Path) -> dict | None:
    try:
        with open(path) as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else None
    except (OSError, ValueError):
        return None


def harness_fault_of(rec: dict | None) -> str | None:
    """What the harness could not do, when the rank's error record says the exception was
    raised in the harness's own code (rankside.harness_step), else None."""
    fault = rec.get("harness_fault") if rec else None
    return str(fault) if fault else None


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
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
SECONDARY_PATTERNS = re.compile(
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
ADDR_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)


def record_text(rec: dict | None) -> str:
    if not rec:
        return ""
    return " ".join(str(rec.get(k, "")) for k in ("exception_type", "message", "traceback"))


def looks_secondary(ex: RankExit) -> bool:
    if ex.signal is not None:
        # killed by a signal: that is the event, not an echo of one
        return False
    text = record_text(ex.record)
    return bool(text) and bool(SECONDARY_PATTERNS.search(text))


def pick_first(deaths: list[RankExit]) -> RankExit:
    """The rank to blame among ranks that died close together.

    Ranks with a real cause (an exception that is not a transport error, a signal, or
    a non-zero exit without a record) beat ranks that look like they only lost a peer;
    within a class, the earliest error-record time wins, else the order we saw them die
    (the list order).
    """

    def key(item: tuple[int, RankExit]):
        order, ex = item
        t = ex.record.get("time") if ex.record else None
        when = float(t) if isinstance(t, (int, float)) else None
        return (looks_secondary(ex), when is None, when or 0.0, order)

    return min(enumerate(deaths), key=key)[1]
