"""What a scenario costs, and how a matrix is ordered and split by that cost.

A scenario's cost is its device-seconds: the devices it occupies times how long it
runs. Durations come from what was measured before, in this order:
  1. a durations file (JSON {scenario id: seconds}; `harness durations --out FILE`
     writes one from past runs): the same numbers on every CI agent, so every agent
     computes the same shards;
  2. past run directories: the newest verdict.json of each scenario under the
     reports directory;
  3. otherwise FALLBACK_S for every scenario, so order and shards go by devices alone.

Packing goes largest-first (longest-processing-time first, by device-seconds): big
scenarios start while the machine is empty and small ones fill the gaps at the end.
Shards are balanced the same way: each scenario, largest first, goes to the shard
with the least device-seconds so far. Ties go by id, so everything is deterministic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.contract.jsonfile import read_json
from harness.contract.rundir import SCENARIOS, VERDICT
from harness.inputs.scenarios.scenario import Scenario
from harness.inputs.scenarios.schema import ScenarioError

FALLBACK_S = 10.0  # the duration of a scenario never measured
SHARD = re.compile(r"^(\d+)/(\d+)$")


def recorded_durations(reports_dir: Path) -> dict[str, float]:
    """The newest measured duration of every scenario that has a verdict under reports_dir."""
    newest: dict[str, tuple[float, float]] = {}  # id -> (mtime, seconds)
    for path in Path(reports_dir).glob(f"*/{SCENARIOS}/*/{VERDICT}"):
        try:
            verdict = read_json(path)
            mtime = path.stat().st_mtime
        except (OSError, ValueError):
            # a half-written or foreign file is no measurement
            continue
        sid, seconds = verdict.get("scenario"), verdict.get("duration_s")
        if isinstance(sid, str) and isinstance(seconds, (int, float)) and seconds > 0:
            if sid not in newest or mtime > newest[sid][0]:
                newest[sid] = (mtime, float(seconds))
    return {sid: seconds for sid, (_, seconds) in newest.items()}


def load_durations(path: Path) -> dict[str, float]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the durations file: {exc.strerror}") from None
    except ValueError as exc:
        raise ScenarioError(f"{path}: the durations file is not JSON: {exc}") from None
    bad = [k for k, v in data.items() if not isinstance(v, (int, float)) or v <= 0] if isinstance(data, dict) else None
    if bad is None or bad:
        raise ScenarioError(f"{path}: a durations file maps scenario ids to seconds > 0; bad entries: {bad or data!r:.200}")
    return {k: float(v) for k, v in data.items()}


def write_durations(path: Path, durations: dict[str, float]) -> None:
    Path(path).write_text(json.dumps(dict(sorted(durations.items())), indent=1) + "\n")


@dataclass(frozen=True)
class Cost:
    devices: int
    seconds: float
    measured: bool
    # The order's first key, lower first: a gate runs what is likely to fail before the
    # rest (harness/run/plan/priority.py); 0 for every scenario otherwise.
    tier: int = 0

    @property
    def device_seconds(self) -> float:
        return self.devices * self.seconds


def devices_needed(scenario: Scenario) -> int:
    """What the scenario's engine will lease for it; 1 for an engine that is not installed
    (the scenario ends as an error before it launches)."""
    from harness.engines import EngineUnavailable, get_engine

    try:
        engine = get_engine(scenario.suite.engine)
    except EngineUnavailable:
        return 1
    # as the runner configures it: its answer may depend on them
    engine.configure(scenario.engine_options)
    return engine.devices_needed(scenario.engine_settings)


def costs(scenarios: list[Scenario], durations: dict[str, float]) -> dict[str, Cost]:
    return {s.id: Cost(devices_needed(s), durations.get(s.id, FALLBACK_S), s.id in durations) for s in scenarios}


def largest_first(scenarios: list[Scenario], cost: dict[str, Cost]) -> list[Scenario]:
    """By tier, then largest first within a tier."""
    return sorted(scenarios, key=lambda s: (cost[s.id].tier, -cost[s.id].device_seconds, -cost[s.id].devices, s.id))


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): the second of four shards (1-based, as CI matrix indexes usually are)."""
    m = SHARD.match(text.strip())
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ScenarioError(f"--shard must be I/N with 1 <= I <= N, e.g. 2/4 (got '{text}')")
    return int(m[1]), int(m[2])


def split_shards(scenarios: list[Scenario], count: int, cost: dict[str, Cost]) -> list[list[Scenario]]:
    """`count` disjoint shards covering every scenario, balanced by device-seconds."""
    shards: list[list[Scenario]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for s in largest_first(scenarios, cost):
        i = min(range(count), key=lambda k: (loads[k], k))
        shards[i].append(s)
        loads[i] += cost[s.id].device_seconds
    order = {s.id: n for n, s in enumerate(scenarios)}
    return [sorted(shard, key=lambda s: order[s.id]) for shard in shards]


def lower_bound_s(cost: dict[str, Cost], devices: int) -> float:
    """No schedule on `devices` devices can finish sooner than this."""
    if not cost:
        return 0.0
    return max(sum(c.device_seconds for c in cost.values()) / devices, max(c.seconds for c in cost.values()))
