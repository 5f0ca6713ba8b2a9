"""A run of many scenarios: the order they run in and what is told while they run.

The CLI builds a session from the chosen scenarios; pytest runs items one by one
through the runner instead. Progress goes through the Progress interface so a live
terminal display and plain CI log lines are interchangeable.
"""

from __future__ import annotations

from pathlib import Path

from harness.runner import RunOptions, run_scenario
from harness.scenario import Scenario
from harness.verdict import Verdict


class Progress:
    """What a session tells while it runs. This base class prints plain lines (CI logs)."""

    def start(self, total: int, run_dir: Path) -> None:
        self.total, self.done = total, 0
        print(f"harness: running {total} scenarios -> {run_dir}", flush=True)

    def scenario_started(self, scenario: Scenario) -> None:
        print(f"[{self.done + 1}/{self.total}] {scenario.id} ...", flush=True)

    def scenario_finished(self, verdict: Verdict) -> None:
        self.done += 1
        mark = "" if verdict.as_expected else "  <-- NOT AS EXPECTED"
        print(f"[{self.done}/{self.total}] {verdict.headline()} ({verdict.duration_s:.1f}s){mark}", flush=True)

    def close(self) -> None:
        pass


def run_session(scenarios: list[Scenario], run_dir: Path, opts: RunOptions, progress: Progress | None = None) -> list[Verdict]:
    """Run every scenario, one at a time, in order. Ctrl-C propagates (as
    KeyboardInterrupt) after the running scenario's ranks are stopped; the verdicts
    written so far stay on disk for the report."""
    progress = progress or Progress()
    progress.start(len(scenarios), run_dir)
    verdicts = []
    try:
        for scenario in scenarios:
            progress.scenario_started(scenario)
            verdict = run_scenario(scenario, run_dir, opts)
            verdicts.append(verdict)
            progress.scenario_finished(verdict)
    finally:
        progress.close()
    return verdicts
