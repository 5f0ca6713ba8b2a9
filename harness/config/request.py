"""What a user asked a run to do, as one typed object: the CLI, the pytest plugin and the
API build it from their own options, and planning reads it (never an argparse Namespace)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunRequest:
    report_dir: Path  # where runs (and the verdicts whose durations plan shards) live
    gate: str | None = None
    ids: tuple[str, ...] = ()  # ids or patterns the user named: they run whatever else picks scenarios
    changed_files: Path | None = None  # a file listing changed paths, one per line (pr gate)
    changed_since: str | None = None  # a git revision to diff against (pr gate)
    shard: str | None = None  # I/N
    durations: Path | None = None  # JSON {scenario id: seconds}
    jobs: int = 1
    devices: int | None = None  # device slots of this machine; None: configured or counted
    nodes: Path | None = None  # a nodes file for scenarios bigger than this machine
    device: str = "cpu"
