"""Benchmark: where a real-vLLM scenario's time goes, cold and warm (almost all of it is the
engine start, so that is what is broken down).

Runs a few vllm-llama scenarios (eager, compile, PP2 compile, TP2) through `harness run`,
as a user would, twice each: first with an empty vLLM compile cache (cold: a fresh CI
agent), then again with the cache that run filled (warm). Each scenario's verdict.json
holds its phases (harness/run/timings.py) and, inside `load`, the engine start split by
vLLM's workers (harness/engines/vllm/startup.py); this prints them as one table.

    python bench/vllm_start.py [--ids ID...] [--engine-env ENGINE_ENV] [--keep DIR] [--stock-aot] [--spawn]

--stock-aot leaves vLLM's AOT cache loading as vLLM ships it (on CPU every load fails and
recompiles: harness/engines/vllm/aot_cache.py); --spawn leaves vLLM's spawn start method on
CPU (its engine core and workers import vLLM afresh: harness/engines/vllm/forking.py): the
"before" tables. The warm run's
outputs must be bit-identical to the cold run's: a difference is printed and fails the run.

Numbers for this machine are in docs/BENCHMARKS.md ("A real-vLLM scenario's time").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.contract import rundir  # noqa: E402
from harness.contract.outputs import EngineOutputs  # noqa: E402
from harness.engines.vllm.startup import NAMES  # noqa: E402

RUN_ID = "bench"

IDS = ["vllm-llama/tp1-pp1", "vllm-llama/tp1-pp1-compile", "vllm-llama/tp1-pp2-compile", "vllm-llama/tp2-pp1"]
# The flow of a scenario, in order: the harness's phases, with the engine start split out of `load`.
BEFORE_LOAD = ("prepare", "support", "golden", "wait", "start")
AFTER_LOAD = ("workloads", "write", "exit", "compare", "verdict")


def run(ids: list[str], report_dir: Path, cache: Path, engine_env: str | None, before: dict[str, str]) -> float:
    """One `harness run` of every id, one at a time (no two vLLM engines at once on 2 cores)."""
    cmd = [sys.executable, "-m", "harness", "run", *ids, "--report-dir", str(report_dir), "--run-id", RUN_ID]
    if engine_env:
        cmd += ["--engine-env", engine_env]
    start = time.monotonic()
    env = {**os.environ, "VLLM_CACHE_ROOT": str(cache), **before}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"harness run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - start


def verdicts(report_dir: Path, ids: list[str]) -> dict[str, dict]:
    """The verdict of every id that wrote one in the run `run()` made under report_dir."""
    paths = {i: rundir.verdict_path(report_dir / RUN_ID, i) for i in ids}
    return {i: json.loads(p.read_text()) for i, p in paths.items() if p.exists()}


def same_outputs(cold: Path, warm: Path, scenario_id: str) -> bool:
    """Every output tensor of the warm run equal, bit for bit, to the cold run's."""
    a, b = (EngineOutputs.load(rundir.scenario_dir(d / RUN_ID, scenario_id) / "outputs") for d in (cold, warm))
    return a.tensors.keys() == b.tensors.keys() and all(a.tensors[k].equal(b.tensors[k]) for k in a.tensors)


def rows(v: dict) -> list[tuple[str, float]]:
    """(phase, seconds) in flow order; the engine start's parts replace `load` where known."""
    t = v.get("timings") or {}
    phases, parts = t.get("phases", {}), t.get("engine_start") or {}
    out = [(p, phases[p]) for p in BEFORE_LOAD if p in phases]
    out += [(f"load: {p}", s) for p, s in parts.items()] if parts else [("load", phases.get("load", 0.0))]
    out += [(p, phases[p]) for p in AFTER_LOAD if p in phases]
    return out


def table(runs: dict[str, dict[str, dict]], ids: list[str]) -> list[str]:
    cols = [(i, when) for i in ids for when in ("cold", "warm")]
    flow = [*BEFORE_LOAD, "load", *(f"load: {n}" for n in (*NAMES.values(), "engine ready")), *AFTER_LOAD]
    seen = {name for i, when in cols for name, _ in rows(runs[when].get(i, {}))}
    names = [n for n in flow if n in seen] + sorted(seen - set(flow))
    head = "| phase | " + " | ".join(f"{i.split('/', 1)[1]} {when}" for i, when in cols) + " |"
    lines = [head, "|---|" + "---|" * len(cols)]
    for name in names:
        cells = [dict(rows(runs[when].get(i, {}))).get(name) for i, when in cols]
        lines.append(f"| {name} | " + " | ".join("" if c is None else f"{c:.1f}" for c in cells) + " |")
    totals = [runs[when].get(i, {}).get("duration_s") for i, when in cols]
    lines.append("| **scenario** | " + " | ".join("" if t is None else f"**{t:.1f}**" for t in totals) + " |")
    verdicts_row = [runs[when].get(i, {}).get("verdict", "missing") for i, when in cols]
    lines.append("| verdict | " + " | ".join(verdicts_row) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", nargs="+", default=IDS)
    parser.add_argument("--engine-env", help="as `harness run --engine-env` (default: the project's .venv-vllm)")
    parser.add_argument("--keep", type=Path, help="keep the report directories here")
    parser.add_argument("--stock-aot", action="store_true", help="vLLM's own AOT cache loading (a before)")
    parser.add_argument("--spawn", action="store_true", help="vLLM's own spawn start method on CPU (a before)")
    args = parser.parse_args()
    before = {**({"HARNESS_VLLM_AOT_LOAD": "0"} if args.stock_aot else {}), **({"HARNESS_VLLM_FORK": "0"} if args.spawn else {})}
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        work = args.keep or Path(tmp)
        cache = Path(tmp) / "vllm-cache"  # empty: the cold run fills it, the warm run reads it
        runs, wall = {}, {}
        for when in ("cold", "warm"):
            wall[when] = run(args.ids, work / when, cache, args.engine_env, before)
            runs[when] = verdicts(work / when, args.ids)
        differ = [i for i in args.ids if not same_outputs(work / "cold", work / "warm", i)]
    load = os.getloadavg()
    print(
        f"### vllm-llama, cold and warm vLLM compile cache, {time.strftime('%Y-%m-%d')}, {platform.machine()} "
        f"{os.cpu_count()} cores (load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})\n"
    )
    print("\n".join(table(runs, args.ids)))
    print(
        f"\nwall: cold {wall['cold']:.0f} s, warm {wall['warm']:.0f} s (harness run, {len(args.ids)} scenarios each); "
        f"{'stock' if args.stock_aot else 'harness'} AOT cache loading; vLLM's processes {'spawned' if args.spawn else 'forked'}"
    )
    if differ:
        sys.exit(f"warm outputs differ from cold ones: {', '.join(differ)}")
    print("warm outputs bit-identical to cold ones: " + ", ".join(args.ids))


if __name__ == "__main__":
    main()
