"""What runs on the node Ray chose: one scenario through the harness's own runner.

The task gets the scenario, the run's options, the driver's project root and the
scenario's golden as bytes; it runs `run_scenario` in a run directory of the node's own
(the launcher, rank pool, stall detector and no-survivor rule as in a local run) and
answers with the scenario directory packed as bytes. Ray's cancel (the driver's Ctrl-C)
arrives as KeyboardInterrupt, which the launcher turns into stopped ranks.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.contract.rundir import scenario_dir
from harness.inputs.scenarios.scenario import Scenario
from harness.run.raycluster.transfer import pack, unpack
from harness.run.runner import RunContext, run_scenario

RAYLET_POLL_S = 0.5


@dataclass(frozen=True)
class NodeWork:
    """One scenario as the driver sends it."""

    scenario: Scenario
    # no devices, cluster or cancel: Ray holds the devices and carries the cancel
    opts: RunContext
    # the driver's: the node works there when it has the same checkout
    project_root: str
    # the scenario's golden directory, packed; None: the driver has none
    golden: bytes | None
    env: dict[str, str | None]  # connect.driver_env()


@dataclass(frozen=True)
class NodeResult:
    # the node's scenario directory, as its files name it
    node_dir: str
    files: bytes
    # the task's own time on the node (Ray's overhead is the rest)
    seconds: float


def run_on_node(work: NodeWork, options_for: Callable[[Path], RunContext] | None = None) -> NodeResult:
    """`options_for(run_dir)`: the run's options for this node's run directory (spread.py
    adds the nodes of a scenario bigger than one); default: the options as sent."""
    start = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="harness-ray-"))
    try:
        with (
            _environment(work.env),
            _in_project(work.project_root),
            _golden(work, base / "golden"),
            _stopped_if_the_raylet_dies() as stop,
        ):
            run_dir = base / "run"
            opts = options_for(run_dir) if options_for else work.opts
            run_scenario(work.scenario, run_dir, dataclasses.replace(opts, cancel=stop))
        out = scenario_dir(run_dir, work.scenario.id)
        return NodeResult(str(out), pack(out), time.monotonic() - start)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def _stopped_if_the_raylet_dies():
    """An event the launcher stops the ranks on (as on Ctrl-C) once this worker's raylet, its
    parent process, is gone: the node is lost to Ray, and a worker may outlive its raylet
    with the ranks it started still running. Its ranks must not survive the node's loss."""
    stop = threading.Event()
    raylet = os.getppid()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(RAYLET_POLL_S):
            if os.getppid() != raylet:
                stop.set()
                return

    threading.Thread(target=watch, daemon=True, name="raylet-watch").start()
    try:
        yield stop
    finally:
        done.set()


@contextmanager
def _environment(values: dict[str, str | None]):
    saved = {k: os.environ.get(k) for k in values}
    _set(values)
    try:
        yield
    finally:
        _set(saved)


def _set(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextmanager
def _in_project(root: str):
    """The driver's project root where this node has it (the same checkout: reproduce
    commands and project settings read as the driver's); else the node's working directory."""
    before = os.getcwd()
    if Path(root).is_dir():
        os.chdir(root)
    try:
        yield
    finally:
        os.chdir(before)


@contextmanager
def _golden(work: NodeWork, where: Path):
    """The scenario's golden, unpacked where the runner reads goldens for this task."""
    if work.golden is None:
        yield
        return
    from harness.contract.roots import goldens_in

    unpack(work.golden, where / work.scenario.golden_key)
    with goldens_in(where):
        yield
