"""The processes of one engine run, as an engine plugin hands them to the launcher."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LaunchPlan:
    """The processes of one engine run. The launcher adds the torchrun-style
    variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT) to each rank's environment."""

    world_size: int
    argv: list[str]  # the same command line for every rank
    env: dict[str, str] = field(default_factory=dict)
