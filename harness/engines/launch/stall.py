"""The stall detector: a hang declared from the ranks' heartbeats, long before the timeout.

Ranks that call rankside.heartbeat() leave in `rank{r}.heartbeat` a beat number and
their phase: `collective` (waiting on peers) or `compute` (working alone). The
launcher reads these files as it polls, and declares a hang when, for STALL_WINDOW_S:

  * no rank made progress: no heartbeat changed, no rank exited, and no rank in the
    `compute` phase was active (see below), and
  * at least one live rank waits in a collective,

and every live rank has beaten at least once (a rank still importing torch has not,
and an engine that never beats never arms the detector: it keeps the timeout only).

"Active" is what keeps a slow but moving rank from being called hung: a rank that
computes for minutes without a collective (torch.compile, a long prefill) beats
nothing, but it uses CPU (its own or its compile workers', so the rank's whole process
tree is counted) or does disk I/O. A rank asleep, or blocked forever, uses neither.
Local ranks are read from /proc by the launcher; a rank on another node is sampled by
its node agent, which writes `rank{r}.heartbeat.activity` beside the heartbeat.
Limits, said plainly: a rank that waits for a long time without CPU or disk I/O
while its peers wait in a collective (a GPU kernel over a blocking sync longer than
the window, a read from a network filesystem) looks idle; raise the window
(HARNESS_STALL_WINDOW_S) for such engines, or set it to 0 to switch the detector off.

Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.contract.settings.variables import STALL_WINDOW_S as STALL_WINDOW_S_VAR
from harness.engines.launch.procgroup import proc_stats
from harness.engines.launch.rankside import COLLECTIVE

#: how long every rank may stay without progress, some waiting in a collective, before
#: the run is a hang. Well above a healthy rank's longest silence in a collective (a peer
#: that computes is active, so this only bounds the gap between activity samples and
#: scheduling noise), and well under the 30 s target for a hang verdict.
STALL_WINDOW_S = 20.0
STALL_WINDOW_ENV = STALL_WINDOW_S_VAR.name  # seconds; 0 switches the detector off
# how often a computing rank's CPU / I/O is sampled
ACTIVITY_SAMPLE_S = 1.0
#: a computing rank that used at least this share of one core between two samples is
#: moving (an idle torch process uses well under 1%: its gloo/NCCL threads sleep)
BUSY_CPU_SHARE = 0.05
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stall_window_s() -> float:
    raw = (STALL_WINDOW_S_VAR.raw() or "").strip()
    if not raw:
        return STALL_WINDOW_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ValueError(f"{STALL_WINDOW_ENV}={raw!r}: expected seconds (0 switches the stall detector off)") from None


@dataclass
class Stall:
    """Why the detector declared a hang: the verdict's words and the ranks it names."""

    window_s: float
    # how long no rank had made progress when it was declared
    quiet_s: float
    waiting: list[int]  # ranks waiting in a collective
    # ranks outside a collective, neither beating nor active: the likely culprits
    idle: list[int]

    def describe(self) -> str:
        def ranks(rs):
            return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))

        who = f"{ranks(self.waiting)} waiting in a collective"
        if self.idle:
            who += f", {ranks(self.idle)} idle outside one"
        return f"declared by the stall detector after {self.quiet_s:.0f}s without progress (window {self.window_s:g}s; {who})"


# --- a rank's activity: CPU seconds and disk bytes of its process tree -------------------


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds: utime + stime) of every process, from /proc."""
    return {
        pid: (int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICKS)
        for pid, rest in (proc_stats() or {}).items()
        if len(rest) >= 13
    }


def _disk_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields.get("read_bytes", 0)) + int(fields.get("write_bytes", 0))
    except (OSError, ValueError):
        return 0  # not readable here: CPU alone decides


def tree_activity(roots: list[int], table: dict[int, tuple[int, float]] | None = None) -> dict[int, tuple[float, int]]:
    """root pid -> (CPU seconds, disk bytes) summed over it and its descendants."""
    table = _proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    result = {}
    for root in roots:
        cpu, disk, todo = 0.0, 0, [root]
        while todo:
            pid = todo.pop()
            if pid in table:
                cpu += table[pid][1]
                disk += _disk_bytes(pid)
            todo += children.get(pid, [])
        result[root] = (cpu, disk)
    return result


def read_activity_file(path: Path) -> tuple[float, int] | None:
    try:
        cpu, disk = Path(path).read_text().split()
        return float(cpu), int(disk)
    except (OSError, ValueError):
        return None


def write_activity_file(path: Path, activity: tuple[float, int]) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(f"{activity[0]:.2f} {activity[1]}\n")
    os.replace(tmp, path)


# --- the detector ----------------------------------------------------------------------


@dataclass
class _RankState:
    beat: str | None = None  # the heartbeat file's last contents
    phase: str | None = None
    activity: tuple[float, int] | None = None  # at the last sample
    sampled_at: float = 0.0


@dataclass
class StallWatch:
    """Fed the live ranks at every poll; says when they have stalled."""

    heartbeat_files: dict[int, Path]
    activity_of: Callable[[list[int]], dict[int, tuple[float, int] | None]]  # ranks -> their activity now
    window_s: float
    ranks: dict[int, _RankState] = field(default_factory=dict)
    last_progress: float = 0.0
    last_sample: float = 0.0
    live_before: int = -1

    def check(self, now: float, live: list[int]) -> Stall | None:
        if self.window_s <= 0:
            return None
        # a rank exited (or the first poll): that is progress
        if len(live) != self.live_before:
            self.live_before, self.last_progress = len(live), now
        for r in live:
            self._read_beat(r, now)
        if not live or any(self.ranks[r].beat is None for r in live):
            self.last_progress = now  # not armed yet: some rank has not reported
            return None
        if now - self.last_sample >= ACTIVITY_SAMPLE_S:
            self._sample_activity(now, live)
        waiting = [r for r in live if self.ranks[r].phase == COLLECTIVE]
        quiet = now - self.last_progress
        if waiting and quiet >= self.window_s:
            idle = [r for r in live if r not in waiting]
            return Stall(self.window_s, quiet, waiting, idle)
        return None

    def _read_beat(self, rank: int, now: float) -> None:
        state = self.ranks.setdefault(rank, _RankState())
        try:
            text = self.heartbeat_files[rank].read_text()
        except OSError:
            return
        if not text.strip() or text == state.beat:
            return
        state.beat, state.phase = text, (text.split() + ["", ""])[1]
        self.last_progress = now

    def _sample_activity(self, now: float, live: list[int]) -> None:
        self.last_sample = now
        computing = [r for r in live if self.ranks[r].phase != COLLECTIVE]
        if not computing:
            return
        current = self.activity_of(computing)
        for r in computing:
            state, sample = self.ranks[r], current.get(r)
            if sample is None:
                continue
            if state.activity is not None and _moved(state.activity, sample, now - state.sampled_at):
                self.last_progress = now
            state.activity, state.sampled_at = sample, now


def _moved(before: tuple[float, int], after: tuple[float, int], elapsed_s: float) -> bool:
    cpu_used, disk_used = after[0] - before[0], after[1] - before[1]
    return cpu_used >= BUSY_CPU_SHARE * max(elapsed_s, ACTIVITY_SAMPLE_S) or disk_used > 0
