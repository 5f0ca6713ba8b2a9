"""The same scenarios locally, on a Ray cluster started for the run, and on a simulated
two-node Ray cluster: the table of docs/SCALE.md.

    python bench/ray_cluster.py [IDS...] [--out DIR]

Runs `harness run IDS` three ways, one after another: locally (--jobs 4, as many at once as Ray packs on 4 slots),
`--cluster ray:local` (Ray started and stopped inside the run), and `--cluster ADDR`
against a ray.cluster_utils.Cluster of a head without device slots and two nodes of 2
slots (started before and stopped after that run, outside its wall time). Prints each
way's wall time and verdicts, each scenario's duration, and whether every check's
metrics are bit-identical to the local run's. Default IDS: four cheap eager PR-gate
scenarios, tp2-pp2 among them (4 ranks: across both simulated nodes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["llama-tiny/tp1-pp1", "llama-tiny/tp2-pp1", "llama-tiny/tp1-pp2", "llama-tiny/tp2-pp2"]


def ray_overhead(run_dir: Path) -> str:
    """Mean and largest overhead per scenario (round trip minus the task's own time on the
    node), from the run's ray-timings.jsonl; '-' for a local run."""
    path = run_dir / "ray-timings.jsonl"
    if not path.exists():
        return "-"
    overheads = [json.loads(line)["overhead_s"] for line in path.read_text().splitlines() if line.strip()]
    return f"{sum(overheads) / len(overheads):.1f} (max {max(overheads):.1f})"


def run(ids: list[str], reports: Path, extra: list[str]) -> tuple[float, dict]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", *ids, "--report-dir", str(reports), "--run-id", "bench", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
    verdicts = {}
    for path in (reports / "bench" / "scenarios").glob("*/verdict.json"):
        v = json.loads(path.read_text())
        verdicts[v["scenario"]] = v
    return wall, verdicts


def two_node_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={"harness_device": 2})
    cluster.wait_for_nodes()
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", default=DEFAULT)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-ray-")))
    args = parser.parse_args()
    ways = {"local (--jobs 4)": ["--jobs", "4"], "--cluster ray:local": ["--cluster", "ray:local"]}
    results = {}
    for name, extra in ways.items():
        results[name] = run(args.ids, args.out / name.replace(" ", "_").replace(":", ""), extra)
    cluster = two_node_cluster()
    try:
        results["--cluster two nodes x 2 slots"] = run(args.ids, args.out / "two-nodes", ["--cluster", cluster.address])
    finally:
        cluster.shutdown()
    local = results["local (--jobs 4)"][1]
    dirs = {
        "local (--jobs 4)": "local_(--jobs_4)",
        "--cluster ray:local": "--cluster_raylocal",
        "--cluster two nodes x 2 slots": "two-nodes",
    }
    print(f"| way | wall s | {' | '.join(args.ids)} | Ray overhead per scenario, s | metrics as local |")
    print(f"|---|---|{'---|' * len(args.ids)}---|---|")
    for name, (wall, verdicts) in results.items():
        cells = [f"{verdicts[i]['verdict']} {verdicts[i]['duration_s']:.1f}" if i in verdicts else "-" for i in args.ids]
        same = all(i in verdicts and verdicts[i]["checks"] == local.get(i, {}).get("checks") for i in args.ids)
        overhead = ray_overhead(args.out / dirs[name] / "bench")
        print(f"| {name} | {wall:.1f} | {' | '.join(cells)} | {overhead} | {'bit-identical' if same else 'DIFFER'} |")


if __name__ == "__main__":
    main()
