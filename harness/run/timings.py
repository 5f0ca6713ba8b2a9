"""Where a scenario's time went: the runner's own phases around the ranks' phases.

A verdict's `timings`:
  phases     {phase: seconds} in the order they happened:
               prepare    engine, model, workloads, eval requests, run brief
               support    the engine's answer to whether it runs these settings (vLLM: its
                          architecture probe, cached per checkpoint) and the devices check
               golden     golden load, digest checks, eval pairing
               wait       waiting for free devices (other scenarios hold them)
               start .. exit   the launch, per rank phase (harness/contract/phases.py),
                          along the slowest rank; `launch` instead when no rank marked
               same-layout  the run of its own layout without its feature (run/stages/same_layout.py:
                          a launch, or 0 when an earlier scenario of the run made it)
               localize   the recording runs that located a numeric failure inside the engine
                          (run/stages/localize.py; 0 when earlier scenarios made them)
               interaction  the trial runs that narrowed a failure to the axis values it needs
                          (run/stages/interaction.py)
               compare    numeric checks and localisation against the golden
               evals      lm-eval scoring of the eval answers
               verdict    the rest: the verdict assembled
  engine_s   the launch: the engine starting and running (start .. exit; same-layout, localize and interaction too)
  harness_s  everything else but `wait`: the harness's own share
  wait_s     device wait (a packing cost, neither the engine's nor the harness's work)
  engine_start  where the engine's own start went, when it says ({phase: seconds}, vLLM:
             harness/engines/vllm/startup.py): a breakdown of `load`
"""

from __future__ import annotations

import time

from harness.contract.jsonfile import JSONObject
from harness.contract.phases import RANK_PHASES, rank_breakdown, read_marks

ENGINE_PHASES = (*RANK_PHASES, "exit", "launch", "same-layout", "localize", "interaction")
NOT_HARNESS = (*ENGINE_PHASES, "wait")
# Short names for the report's columns, in flow order.
COLUMNS = (
    ("wait", "device wait"),
    ("start", "start+imports"),
    ("rendezvous", "rendezvous"),
    ("load", "load"),
    ("warmup", "warmup/compile"),
    ("workloads", "workloads"),
    ("write", "write"),
    ("exit", "exit"),
    ("same-layout", "same layout"),
    ("localize", "localize"),
    ("interaction", "interaction"),
    ("compare", "compare"),
    ("evals", "evals"),
)
# a column only where some scenario of the table had the phase
OCCASIONAL = ("same-layout", "localize", "interaction")


class Stopwatch:
    """Laps of the runner's flow: `lap(name)` books the time since the previous lap."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.engine_start: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._last, 3)
        self._last = now

    def launch(self, output_dir: str, started: float, ended: float) -> None:
        """Book the launch that ran from `started` to `ended` (wall clock) by its ranks'
        phases (the ranks' marks in `output_dir`); one `launch` phase if none marked."""
        marks = read_marks(output_dir)
        for name, seconds in (rank_breakdown(marks, started, ended) if marks else {"launch": round(ended - started, 3)}).items():
            self.phases[name] = round(self.phases.get(name, 0.0) + seconds, 3)
        self._last = time.monotonic()

    def timings(self) -> JSONObject:
        summary = summarise(self.phases)
        if self.engine_start:
            summary["engine_start"] = dict(self.engine_start)
        return summary


def summarise(phases: dict[str, float]) -> JSONObject:
    engine = sum(s for n, s in phases.items() if n in ENGINE_PHASES)
    harness = sum(s for n, s in phases.items() if n not in NOT_HARNESS)
    return {
        "phases": dict(phases),
        "engine_s": round(engine, 3),
        "harness_s": round(harness, 3),
        "wait_s": round(phases.get("wait", 0.0), 3),
    }


def total(timings_list: list[JSONObject]) -> JSONObject:
    """Phases summed over scenarios (a gate's breakdown)."""
    phases: dict[str, float] = {}
    for t in timings_list:
        for name, seconds in (t or {}).get("phases", {}).items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 3)
    return summarise(phases)


def harness_other(timings: JSONObject) -> float:
    """The harness's share outside compare and evals: prepare, golden, verdict."""
    phases = timings.get("phases", {})
    other: float = timings.get("harness_s", 0.0) - phases.get("compare", 0.0) - phases.get("evals", 0.0)
    return other


def compact(timings: JSONObject) -> str:
    """One line: `start+imports 1.2 · load 0.3 · ... | harness 0.4 (prepare 0.2, ...)`."""
    if not timings or not timings.get("phases"):
        return ""
    phases = timings["phases"]
    engine = " · ".join(f"{n} {s:.1f}" for n, s in phases.items() if n in ENGINE_PHASES)
    own = ", ".join(f"{n} {s:.1f}" for n, s in phases.items() if n not in NOT_HARNESS)
    wait = f" | wait {timings['wait_s']:.1f}" if timings.get("wait_s") else ""
    return f"engine {timings['engine_s']:.1f}s ({engine}) | harness {timings['harness_s']:.1f}s ({own}){wait}"
