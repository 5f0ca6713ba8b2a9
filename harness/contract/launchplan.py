"""The processes of one engine run, as an engine plugin hands them to the launcher."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.contract.settings.variables import DEVICE_SLOTS

#: what a rank is told of its run's device lease: its slots, "0,3" (harness/run/plan/devices.py)
DEVICE_SLOTS_ENV = DEVICE_SLOTS.name


@dataclass
class LaunchPlan:
    """The processes of one engine run. The launcher adds the torchrun-style
    variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT) to each rank's environment."""

    world_size: int
    argv: list[str]  # the same command line for every rank
    env: dict[str, str] = field(default_factory=dict)
    # Modules every rank imports, for `PYTHON -m MODULE` commands: the launcher then
    # forks ranks from a process that imported them once (harness/engines/launch/pool.py).
    # Only modules whose import starts no thread and does not touch CUDA; empty: every
    # rank starts as a fresh process.
    preload: list[str] = field(default_factory=list)
    # Modules only some runs' ranks import (the reference engine's inductor entry point, for
    # compile runs): the zygote imports them when the first rank that lists them is asked
    # for, not at its start, so that a zygote serving eager runs never pays for them. Not
    # part of what selects a zygote: eager and compile runs share one.
    preload_on_request: list[str] = field(default_factory=list)
