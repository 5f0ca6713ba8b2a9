"""What a run shows while it runs: a live display at a terminal, plain lines in CI logs.

Both track the same things (scenarios done of total, the ones running now, elapsed
time, failures so far) and are thread-safe: scenarios may finish on several threads
at once (`--jobs`), so every change of state happens under one lock.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.run.report.html import draw_ahead
from harness.run.session import Progress

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.live import Live

    from harness.contract.verdict import Verdict
    from harness.inputs.scenarios.scenario import Scenario


class _State:
    """Counts and running scenarios; callers hold the owner's lock."""

    def __init__(self) -> None:
        self.total = self.done = 0
        self.started = time.monotonic()
        self.running: dict[str, float] = {}  # scenario id -> when it started
        self.failures: list[str] = []

    def elapsed(self) -> str:
        return _clock(time.monotonic() - self.started)

    def finish(self, verdict: Verdict) -> None:
        self.running.pop(verdict.scenario, None)
        self.done += 1
        if not verdict.as_expected:
            self.failures.append(verdict.scenario)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def duration_text(verdict: Verdict) -> str:
    """`12.4s`, or `122.4s, 110s of it waiting for devices`: a wait for slots other runs held
    is not the scenario's own time."""
    wait = float((verdict.timings or {}).get("wait_s") or 0.0)
    return f"{verdict.duration_s:.1f}s" + (f", {wait:.0f}s of it waiting for devices" if wait >= 1 else "")


def _finished_line(state: _State, verdict: Verdict) -> str:
    mark = "" if verdict.as_expected else "  <-- NOT AS EXPECTED"
    return f"[{state.done}/{state.total} {state.elapsed()}] {verdict.headline()} ({duration_text(verdict)}){mark}"


def reproduce_lines(verdict: Verdict, run_dir: Path | None) -> list[str]:
    """Printed under a failing verdict the moment it is known, not only in the report at
    the end: whoever watches the run can start on the failure while the gate goes on."""
    if verdict.as_expected:
        return []
    lines = [f"    reproduce: {verdict.reproduce}"] if verdict.reproduce else []
    if run_dir is not None and _has_repro_script(verdict):
        lines.append(f"    standalone script (engine API only): harness repro {verdict.scenario} --run {run_dir}")
    return lines


def _has_repro_script(verdict: Verdict) -> bool:
    """`harness repro` writes a script for engines that declare it, and never for a run with
    a --fault switched on (the script uses the engine's public API, which has no faults)."""
    from harness.engines import EngineUnavailable, get_engine
    from harness.engines.base import Capability

    if verdict.verdict == "error" or "--fault" in verdict.reproduce or not verdict.versions.get("engine"):
        # a harness error is no engine bug to hand over
        return False
    try:
        return Capability.REPRO_SCRIPTS in get_engine(verdict.versions["engine"]).capabilities
    except EngineUnavailable:
        return False


# a CI log shows a line at least this often while a scenario runs
BEAT_S = 30.0

# what a rank is doing after it marked the end of a phase (contract/phases.py RANK_PHASES)
_DOING_AFTER = {
    None: "preparing: building the model, waiting for devices or starting its ranks",
    "start": "joining the process group",
    "rendezvous": "loading the model (vLLM: starting the engine)",
    "load": "warming up / compiling, or running its workloads",
    "warmup": "running its workloads",
    "workloads": "writing its outputs",
    "write": "ending its ranks",
}


def doing_now(run_dir: Path, scenario_id: str) -> str:
    """What a running scenario is doing, from the phase marks its ranks have written so far."""
    from harness.contract.rundir import outputs_dir

    return doing_in(outputs_dir(run_dir, scenario_id))


def doing_in(outputs: Path) -> str:
    """What the ranks writing into `outputs` are doing: what their engine's processes
    announced they started since the ranks' last phase mark (vLLM's workers inside its
    minutes-long engine start), else the phase after that mark (contract/phases.py)."""
    from harness.contract.phases import RANK_PHASES, announced, read_doing, read_marks

    try:
        marks, doing = read_marks(outputs), read_doing(outputs)
    except (OSError, ValueError):
        marks, doing = {}, {}
    done = [(name, t) for rank_marks in marks.values() for name, t in rank_marks if name in RANK_PHASES]
    said = announced(doing, after=max((t for _, t in done), default=0.0))
    if said:
        return said
    last = max((name for name, _ in done), key=RANK_PHASES.index) if done else None
    return _DOING_AFTER.get(last, "running")


@contextmanager
def still_running(label: str, outputs: Path, stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs (one step that is no scenario of a run: a golden), a line every
    BEAT_S saying how long it has run and what its ranks are doing: `harness golden` printed
    nothing for minutes while vLLM compiled."""
    stop, started, beat_s = threading.Event(), time.monotonic(), BEAT_S

    def beat() -> None:
        while not stop.wait(beat_s):
            try:
                print(
                    f"{label}: still running ({_clock(time.monotonic() - started)}): {doing_in(outputs)}",
                    file=stream or sys.stdout,
                    flush=True,
                )
            except (BrokenPipeError, ValueError):
                # the reader left or the stream closed: nothing more to say
                return

    beater = threading.Thread(target=beat, name="progress-beat", daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()


class LineProgress(Progress):
    """Plain lines, one per start and one per end, for logs (CI, pipes), and one at least
    every BEAT_S for each scenario still running, saying what it is doing: a 3-minute
    compile must not look like a hung job."""

    def __init__(self, stream: TextIO | None = None, beat_s: float = BEAT_S) -> None:
        self._lock = threading.Lock()
        self._stream = stream or sys.stdout
        self._state = _State()
        self._beat_s = beat_s
        self._run_dir: Path | None = None
        self._said: dict[str, float] = {}  # scenario id -> when a line last named it
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None

    def _print(self, line: str) -> None:
        print(line, file=self._stream, flush=True)

    def start(self, total: int, run_dir: Path) -> None:
        with self._lock:
            self._state = _State()
            self._state.total = total
            self._run_dir = Path(run_dir)
            self._print(f"harness: running {total} scenarios -> {run_dir}")
        self._stop.clear()
        self._beater = threading.Thread(target=self._beat, name="progress-beat", daemon=True)
        self._beater.start()

    def _beat(self) -> None:
        try:
            self._beat_until_stopped()
        except (BrokenPipeError, ValueError):
            # the reader left (`| head`) or the stream closed: nothing more to say
            return

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(min(self._beat_s, 5.0)):
            now = time.monotonic()
            with self._lock:
                state, due = self._state, [sid for sid in self._state.running if now - self._said.get(sid, 0) >= self._beat_s]
                for sid in due:
                    doing = doing_now(self._run_dir, sid) if self._run_dir else "running"
                    self._print(
                        f"[{state.done}/{state.total} {state.elapsed()}] still running {sid} "
                        f"({_clock(now - state.running[sid])}): {doing}"
                    )
                    self._said[sid] = now

    def scenario_started(self, scenario: Scenario) -> None:
        with self._lock:
            self._state.running[scenario.id] = self._said[scenario.id] = time.monotonic()
            self._print(f"[{self._state.done}/{self._state.total} {self._state.elapsed()}] start {scenario.id}")

    def scenario_finished(self, verdict: Verdict) -> None:
        draw_ahead(verdict)
        with self._lock:
            state = self._state
            state.finish(verdict)
            self._print(_finished_line(state, verdict) + f"  (failures so far: {len(state.failures)})")
            for line in reproduce_lines(verdict, self._run_dir):
                self._print(line)

    def close(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.join()
            self._beater = None
        with self._lock:
            s = self._state
            self._print(f"harness: {s.done}/{s.total} scenarios in {s.elapsed()}, {len(s.failures)} not as expected")


class LiveProgress(Progress):
    """A live rich display for a terminal: a bar of done/total, elapsed, failures so
    far, and the scenarios running now with their own elapsed time. Finished
    scenarios print as lines above it, so the scrollback keeps the whole run."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console

        self._lock = threading.Lock()
        self._console = console or Console()
        self._state = _State()
        self._live: Live | None = None
        self._run_dir: Path | None = None

    def _render(self) -> Group:
        # Text objects, not markup strings: rich re-renders the display with the options
        # of the last print, and those lines are printed with markup off.
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        with self._lock:  # a snapshot; rich draws it outside the lock
            s = self._state
            running = sorted(s.running.items(), key=lambda kv: kv[1])
            total, done, elapsed, failures = s.total, s.done, s.elapsed(), len(s.failures)
        header = Table.grid(padding=(0, 1))
        header.add_row(
            ProgressBar(total=max(total, 1), completed=done, width=24),
            Text(f"{done}/{total} done, elapsed {elapsed},"),
            Text(f"{failures} not as expected", style="bold red" if failures else "green"),
        )
        now = time.monotonic()
        lines = [
            Text.assemble(("  running ", "cyan"), scenario, f"  {_clock(now - since)}", no_wrap=True, overflow="ellipsis")
            for scenario, since in running
        ]
        return Group(header, *lines)

    def start(self, total: int, run_dir: Path) -> None:
        from rich.live import Live

        with self._lock:
            self._state = _State()
            self._state.total = total
            self._run_dir = Path(run_dir)
        self._console.print(f"harness: running {total} scenarios -> {run_dir}")
        self._live = Live(get_renderable=self._render, console=self._console, refresh_per_second=2, transient=True)
        self._live.start()

    def scenario_started(self, scenario: Scenario) -> None:
        with self._lock:
            self._state.running[scenario.id] = time.monotonic()

    def scenario_finished(self, verdict: Verdict) -> None:
        draw_ahead(verdict)
        with self._lock:
            state = self._state
            state.finish(verdict)
            line = _finished_line(state, verdict)
        # Printed outside our lock: rich takes its own, and its refresh thread takes ours.
        self._console.print(line, style=None if verdict.as_expected else "bold red", markup=False, highlight=False)
        for extra in reproduce_lines(verdict, self._run_dir):
            self._console.print(extra, markup=False, highlight=False)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        with self._lock:
            s = self._state
            line = f"harness: {s.done}/{s.total} scenarios in {s.elapsed()}, {len(s.failures)} not as expected"
        self._console.print(line, markup=False, highlight=False)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def choose_progress(stream: TextIO | None = None) -> Progress:
    """The live display for a person at a terminal; plain lines for CI and pipes."""
    stream = stream or sys.stdout
    if in_ci() or not stream.isatty():
        return LineProgress(stream)
    return LiveProgress()
