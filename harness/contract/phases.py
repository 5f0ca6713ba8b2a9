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
own phases (harness/runner.py).

Standard library only: engine-side code imports this inside an engine's environment.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

PHASES_DIR = "phases"
RANK_PHASES = ("start", "rendezvous", "load", "warmup", "workloads", "write")


class PhaseMarks:
    """One rank's marks; `mark(name)` records that phase `name` ended now."""

    def __init__(self, output_dir: str | Path, rank: int | None = None):
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.path = Path(output_dir) / PHASES_DIR / f"rank{self.rank}.json"
        self.marks: list[list] = []

    def mark(self, phase: str) -> None:
        self.marks.append([phase, time.time()])
        try:
            self._write()
        except OSError:
            pass  # timings are a report's detail: never the reason a rank fails

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"rank": self.rank, "pid": os.getpid(), "marks": self.marks}))
        os.replace(tmp, self.path)  # a reader never sees half a file


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
        end = max(ends[name], previous)  # clocks of other nodes may lag: never negative
        breakdown[name] = round(end - previous, 3)
        previous = end
    breakdown["exit"] = round(max(launch_end - previous, 0.0), 3)
    return breakdown
