"""Benchmark: packing a large matrix onto a simulated 8-device machine, and shard balance.

The real session scheduler (harness.run.session._run_packed) and real device leases
(flock on slot files) run the matrix; only the scenario itself is simulated: it
holds its lease for its duration x SCALE (a sleep), so the numbers measure the
scheduling, not the machine. Durations come from a model fitted to the measured
PR-gate table in docs/BENCHMARKS.md (tp1-pp1 2.2 s; 4 ranks ~2.2x; compile ~4x).

    python bench/packing.py [--devices 8] [--scale 0.05] [--shards 2 3 4]

Prints a Markdown section: makespan / lower bound (lower bound = max(total
device-seconds / devices, longest scenario)) for largest-first packing and, as a
baseline, the same scheduler in matrix order; then for n shards the measured
makespan of each shard, packed on its own 8-device machine.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness.run.session as session  # noqa: E402
from harness.contract.verdict import Verdict  # noqa: E402
from harness.inputs.scenarios.loading import load_scenarios
from harness.run.plan.devices import DevicePool  # noqa: E402
from harness.run.plan.schedule import costs, lower_bound_s, split_shards  # noqa: E402
from harness.run.request import RunConfig  # noqa: E402
from harness.run.runner import RunContext  # noqa: E402

MATRIX = """
suite: nightly-sim
model: tiny-llama
workloads: [{name: logits, kind: logprobs}]
golden: {tp: 1, pp: 1, sp: false, compile: false, model: a}
matrix: {tp: [1, 2, 4, 8], pp: [1, 2, 4], sp: [false, true], compile: [false, true], model: [a, b, c]}
exclude: [{tp: 1, sp: true}, {tp: 4, pp: 4}, {tp: 8, pp: 2}, {tp: 8, pp: 4}]
"""


def simulated_duration(settings: dict) -> float:
    """Seconds: 2.2 s for one rank, +60% per doubling of ranks, x4 under compile, +20% with
    SP; models b and c are 1.5x and 3x the size of a."""
    ranks = settings["tp"] * settings["pp"]
    seconds = 2.2 * (1 + 0.6 * math.log2(ranks)) * (4 if settings["compile"] else 1) * (1.2 if settings["sp"] else 1)
    return round(seconds * {"a": 1.0, "b": 1.5, "c": 3.0}[settings["model"]], 2)


class Quiet(session.Progress):
    def start(self, total, run_dir):
        pass

    def scenario_started(self, scenario):
        pass

    def scenario_finished(self, verdict):
        pass


def simulate(scenarios, durations, devices: int, scale: float, order=None) -> float:
    """Wall seconds (in simulated seconds) to run `scenarios` packed on `devices` slots."""

    def run(scenario, run_dir, opts, lease):
        time.sleep(durations[scenario.id] * scale)
        return Verdict(scenario.id, "pass", "simulated")

    saved = session.largest_first
    if order is not None:
        session.largest_first = order
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pool = DevicePool(devices, "cpu", lock_dir=Path(tmp) / "locks")
            start = time.monotonic()
            session._run_packed(
                scenarios, Path(tmp), RunContext(RunConfig(jobs=devices), pool), Quiet(), costs(scenarios, durations), run=run
            )
            return (time.monotonic() - start) / scale
    finally:
        session.largest_first = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--scale", type=float, default=0.05, help="real seconds per simulated second")
    ap.add_argument("--shards", type=int, nargs="*", default=[2, 3, 4])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nightly-sim.yaml"
        path.write_text(MATRIX)
        scenarios = load_scenarios([path])
    durations = {s.id: simulated_duration(s.settings) for s in scenarios}
    cost = costs(scenarios, durations)
    bound = lower_bound_s(cost, args.devices)
    total = sum(c.device_seconds for c in cost.values())
    packed = simulate(scenarios, durations, args.devices, args.scale)
    in_order = simulate(scenarios, durations, args.devices, args.scale, order=lambda sc, c: list(sc))
    print(
        f"### {len(scenarios)} scenarios on {args.devices} simulated devices, {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} {os.cpu_count()} cores\n"
    )
    print(f"Total {total:.0f} device-seconds; lower bound {bound:.1f} s.\n")
    print("| order | makespan (s) | makespan / lower bound |\n|---|---|---|")
    print(f"| largest-first (harness) | {packed:.1f} | **{packed / bound:.3f}** |")
    print(f"| matrix order (baseline) | {in_order:.1f} | {in_order / bound:.3f} |\n")
    print("| shards | device-seconds per shard | makespan per shard, packed (s) | max / mean makespan |\n|---|---|---|---|")
    for n in args.shards:
        shards = split_shards(scenarios, n, cost)
        loads = [sum(cost[s.id].device_seconds for s in shard) for shard in shards]
        spans = [simulate(shard, durations, args.devices, args.scale) for shard in shards]
        print(
            f"| {n} | {' / '.join(f'{x:.0f}' for x in loads)} | {' / '.join(f'{x:.1f}' for x in spans)} | "
            f"{max(spans) / (sum(spans) / n):.3f} |"
        )


if __name__ == "__main__":
    main()
