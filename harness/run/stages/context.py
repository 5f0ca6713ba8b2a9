"""A run's context: its configuration (frozen, what the user asked) and the run-time
objects a session makes for it, kept apart so the configuration stays a plain value."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from harness.engines.launch import Cluster
from harness.run.plan.devices import DevicePool
from harness.run.request import RunConfig


@dataclass(frozen=True)
class RunContext:
    config: RunConfig = field(default_factory=RunConfig)
    # The device slots of this machine; None: no leasing (one run at a time, golden runs).
    devices: DevicePool | None = None
    # Machines for scenarios that need more devices than `devices` has (--nodes).
    cluster: Cluster | None = None
    # Set by a session to stop every running launch (Ctrl-C with --jobs).
    cancel: threading.Event | None = None
