"""Where a scenario's time goes: phase marks written by the ranks, read by the harness.

Each rank marks the END of each of its phases with the wall clock (time.time(): the
launcher knows when it started the ranks, in the same clock, so "process start and
imports" is the first mark minus the launch start). Marks go to
`<output_dir>/phases/rank<R>.json` as the rank passes them, so a rank that crashes or
hangs still says how far it got. The file sits beside outputs.json / outputs.safetensors
and is optional: outputs without it (older engines, other engines) still load.

Rank phases, in order (an engine marks the ones it has):
  start       process start and imports, until the rank is in its entry point
  rendezvous  joining the process group
  load        building the model and loading its weights (vLLM: the whole engine start)
  warmup      warm-up / torch.compile capture
  workloads   every workload
  write       writing outputs
The harness adds `exit` (last mark to the launcher seeing every rank gone) and its
own phases (harness/run/runner.py).

A rank's marks say what it finished. Where a rank sits in one long call of its engine
(vLLM's `LLM(...)`: its workers' rendezvous, model load, compile and warm-up, minutes on a
CPU), the processes inside it announce what they START (`announce`: one
`phases/doing-<who>.json` each, rewritten), so the progress line says what the engine is
doing now instead of the phase after the rank's last mark. Activities, in a start's order:
DOING.

Standard library only: engine-side code imports this inside an engine's environment.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

PHASES_DIR = "phases"
RANK_PHASES = ("start", "rendezvous", "load", "warmup", "workloads", "write")
DOING_PREFIX = "doing-"
# what an engine's processes announce, in the order an engine start goes through them
DOING = {
    "engine-start": "starting the engine's processes",
    "rendezvous": "waiting for the process group",
    "load": "loading the model",
    "kv-cache": "sizing and allocating the KV cache",
    "warmup": "warming up",
    "compile": "compiling and warming up",
}


class PhaseMarks:
    """One rank's marks; `mark(name)` records that phase `name` ended now."""

    def __init__(self, output_dir: str | Path, rank: int | None = None):
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.path = Path(output_dir) / PHASES_DIR / f"rank{self.rank}.json"
        self.marks: list[list[str | float]] = []  # [phase, when it ended (time.time())]

    def mark(self, phase: str) -> None:
        self.marks.append([phase, time.time()])
        try:
            self._write()
        except OSError:
            # timings are a report's detail: never the reason a rank fails
            pass

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"rank": self.rank, "pid": os.getpid(), "marks": self.marks}))
        os.replace(tmp, self.path)  # a reader never sees half a file


def announce(output_dir: str | Path, who: str, activity: str) -> None:
    """Say that process `who` of a rank starts `activity` (a DOING key) now. Never fails
    the rank: progress is a display's detail."""
    if activity not in DOING:
        raise ValueError(f"unknown activity {activity!r}: one of {', '.join(DOING)}")
    path = Path(output_dir) / PHASES_DIR / f"{DOING_PREFIX}{who}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"doing": activity, "since": time.time(), "pid": os.getpid()}))
        os.replace(tmp, path)
    except OSError:
        pass


def read_doing(output_dir: str | Path) -> dict[str, tuple[str, float]]:
    """{who: (activity, since)} of every process that announced one (unreadable files skipped)."""
    found = {}
    for path in sorted((Path(output_dir) / PHASES_DIR).glob(f"{DOING_PREFIX}*.json")):
        try:
            record = json.loads(path.read_text())
            if record["doing"] in DOING:
                found[path.stem.removeprefix(DOING_PREFIX)] = (str(record["doing"]), float(record["since"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def announced(doing: dict[str, tuple[str, float]], after: float) -> str | None:
    """In words, what the processes that announced an activity since `after` (the ranks'
    last mark) are doing: the least advanced of them, as the run waits on it; a rank's
    `engine-start` only until its engine's own processes say more. None: nothing since."""
    now = [activity for activity, since in doing.values() if since >= after]
    now = [a for a in now if a != "engine-start"] or now
    if not now:
        return None
    order = list(DOING)
    slowest = min(now, key=order.index)
    behind = now.count(slowest)
    if behind == len(now):
        return DOING[slowest]
    return f"{DOING[slowest]} ({behind} of {len(now)} of the engine's processes; the others are further on)"


def read_marks(output_dir: str | Path) -> dict[int, list[tuple[str, float]]]:
    """{rank: [(phase, end time)]} of every rank that wrote marks (unreadable files skipped)."""
    found = {}
    for path in sorted((Path(output_dir) / PHASES_DIR).glob("rank*.json")):
        try:
            record = json.loads(path.read_text())
            found[int(record["rank"])] = [(str(name), float(t)) for name, t in record["marks"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def rank_breakdown(marks: dict[int, list[tuple[str, float]]], launch_start: float, launch_end: float) -> dict[str, float]:
    """Seconds per rank phase along the slowest rank: a phase ends when its last rank
    ends it (ranks wait for each other at every collective), and `exit` is the rest of
    the launch. The values add up to launch_end - launch_start."""
    ends: dict[str, float] = {}
    for rank_marks in marks.values():
        for name, t in rank_marks:
            ends[name] = max(ends.get(name, t), t)
    order = sorted(ends, key=lambda n: (RANK_PHASES.index(n) if n in RANK_PHASES else len(RANK_PHASES), ends[n]))
    breakdown, previous = {}, launch_start
    for name in order:
        # clocks of other nodes may lag: never negative
        end = max(ends[name], previous)
        breakdown[name] = round(end - previous, 3)
        previous = end
    breakdown["exit"] = round(max(launch_end - previous, 0.0), 3)
    return breakdown
