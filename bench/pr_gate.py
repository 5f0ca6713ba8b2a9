"""Benchmark: the PR gate against a stored golden vs. the way engine CI does it today.

Today's way: every setting is compared with a live re-run of its reference setting,
one process launch per setting, so each scenario costs two engine starts (the
reference and the setting). The harness's way: the reference ran once, when the
golden was made; each scenario is one launch compared against the stored golden.

Both ways run the same scenarios (the whole PR gate, every suite) with the same
launcher, engine, workloads and comparison, in one invocation. The harness way forks
its ranks from the rank pool (harness/engines/launch/pool.py), emptied before each measured
gate; the live way starts every process fresh, as engine CI does. Each way runs twice: with an empty compile cache (cold,
as on a fresh CI agent without a carried cache) and right after with the cache that
run filled (warm); each way has its own cache, so neither warms the other's.

    python bench/pr_gate.py [--gate pr] [--ids ID...] [--no-live] [--out docs/BENCHMARKS.md]

It also prints where the harness way's time went: every phase summed over the gate
(harness/run/timings.py), the report's writing time, and the harness's own share.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.contract.outputs import EngineOutputs  # noqa: E402
from harness.contract.rundir import scenario_dir_name  # noqa: E402
from harness.engines.launch import pool  # noqa: E402
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import select
from harness.run import timings  # noqa: E402
from harness.run.compare.numeric import check_workloads  # noqa: E402
from harness.run.compare.tolerances import tolerance_for  # noqa: E402
from harness.run.request import RunConfig  # noqa: E402
from harness.run.runner import RunContext, run_scenario  # noqa: E402
from harness.run.stages.admit import Admitted, admit  # noqa: E402
from harness.run.stages.execute import execute  # noqa: E402


def harness_way(scenarios, work: Path) -> tuple[float, dict, list[dict], float]:
    """(wall s, {id: (s, verdict)}, each verdict's timings, report writing s). The rank
    pool starts empty, as in a new `harness run`: its zygotes' imports are counted."""
    from harness.run.report import write_report
    from harness.run.report.html import draw_ahead

    pool.close_all()
    start, per, timed = time.monotonic(), {}, []
    for s in scenarios:
        v = run_scenario(s, work, RunContext(RunConfig(gate="pr")))
        draw_ahead(v)  # as `harness run`'s progress display does
        per[s.id] = (v.duration_s, v.verdict)
        timed.append(v.timings)
    report_s = write_report(work)["report_s"]
    return time.monotonic() - start, per, timed, report_s


def breakdown_lines(timed: list[dict], report_s: float, wall_s: float) -> list[str]:
    """Every phase summed over the gate, and the harness's own share of its wall time
    (everything but the engine starting and running, report writing included)."""
    gate = timings.total(timed)
    own = gate["harness_s"] + report_s
    lines = ["| phase | seconds | share of wall |", "|---|---|---|"]
    for name, seconds in [*gate["phases"].items(), ("report", report_s)]:
        kind = "engine" if name in timings.ENGINE_PHASES else "wait" if name == "wait" else "harness"
        lines.append(f"| {name} ({kind}) | {seconds:.1f} | {100 * seconds / wall_s:.1f}% |")
    lines += [
        f"| **engine** | **{gate['engine_s']:.1f}** | {100 * gate['engine_s'] / wall_s:.1f}% |",
        f"| **harness's own** | **{own:.1f}** | **{100 * own / wall_s:.1f}%** |",
        "",
    ]
    return lines


def live_way(scenarios, work: Path) -> tuple[float, dict]:
    """Each setting next to a fresh run of the reference setting, compared live. Every
    launch starts its processes fresh (no rank pool), as engine CI's two-settings
    comparisons start a server per setting: the pool is part of the harness's way."""
    with mock.patch.dict(os.environ, {pool.OFF_ENV: "0"}):
        return _live_way(scenarios, work)


def _live_way(scenarios, work: Path) -> tuple[float, dict]:
    start, per = time.monotonic(), {}
    for s in scenarios:
        t0 = time.monotonic()
        runs = {}
        for label, settings in (("reference", dict(s.suite.golden)), ("setting", s.settings)):
            out = work / scenario_dir_name(s.id) / label
            admitted = admit(s, settings, out, RunContext(RunConfig(gate="pr")), gate="pr", golden=False)
            assert isinstance(admitted, Admitted), admitted
            prepared = admitted.prepared
            outcome = execute(admitted, out, s, RunContext())
            if outcome.status != "ok":
                raise RuntimeError(f"{s.id} {label}: {outcome.status}")
            runs[label] = (EngineOutputs.load(prepared.brief.output_dir), prepared.brief.workloads)
        checks = check_workloads(runs["reference"][0], runs["setting"][0], runs["setting"][1], tolerance_for(s.suite.dtype))
        per[s.id] = (time.monotonic() - t0, "pass" if all(c.passed for c in checks) else "fail")
    return time.monotonic() - start, per


# The PR gate before the compile cache and the rank pool (6m48s sequential on a cold machine):
# the cold target is 0.6x.
COLD_BASELINE_S = 408.0


def compile_cache(root: Path):
    """Every rank's compile cache (inductor, triton, vLLM) under `root`: a fresh root is a
    cold cache, the same root again a warm one. Set in this process's environment, which
    the ranks inherit (harness/engines/compile_cache.py leaves variables a user set alone)."""
    return mock.patch.dict(
        os.environ,
        {
            "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "TRITON_CACHE_DIR": str(root / "triton"),
            "VLLM_CACHE_ROOT": str(root / "vllm"),
        },
    )


def measure(scenarios, work: Path, live: bool) -> dict:
    """Both ways, cold then warm: each way gets its own cache root (cold: empty; warm: the
    same root right after), so neither way warms the other's cache."""
    result: dict = {}
    for way in ("live", "harness") if live else ("harness",):
        root = work / f"cache-{way}"
        for state in ("cold", "warm"):
            with compile_cache(root):
                out = work / f"{way}-{state}"
                if way == "live":
                    result[(way, state)] = live_way(scenarios, out)
                else:
                    result[(way, state)] = harness_way(scenarios, out)
    return result


def table(scenarios, result: dict, live: bool) -> list[str]:
    cols = [(w, c) for c in ("cold", "warm") for w in (("live", "harness") if live else ("harness",))]
    lines = [
        "| scenario | " + " | ".join(f"{w} {c} (s)" for w, c in cols) + " | verdicts (harness warm) |",
        "|---|" + "---|" * len(cols) + "---|",
    ]
    for s in scenarios:
        cells = [f"{result[k][1][s.id][0]:.1f}" for k in cols]
        lines.append(f"| `{s.id}` | " + " | ".join(cells) + f" | {result[('harness', 'warm')][1][s.id][1]} |")
    lines.append("| **total** | " + " | ".join(f"**{result[k][0]:.1f}**" for k in cols) + " | |")
    return lines


def ratios(result: dict, live: bool) -> list[str]:
    cold = result[("harness", "cold")][0]
    lines = [
        f"- cold-cache PR gate: {cold:.1f} s = **{cold / COLD_BASELINE_S:.2f}x** the {COLD_BASELINE_S:.0f} s "
        "it took before the compile cache and the rank pool (target: at most 0.6x)"
    ]
    if live:
        for state in ("cold", "warm"):
            ours, theirs = result[("harness", state)][0], result[("live", state)][0]
            target = " (target: at most 0.4x)" if state == "warm" else ""
            lines.append(
                f"- {state} cache: harness vs golden / live re-run = {ours:.1f} / {theirs:.1f} s = **{ours / theirs:.2f}x**{target}"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gate", default="pr")
    ap.add_argument("--ids", nargs="*", help="only these scenario ids (default: the whole gate, every suite)")
    ap.add_argument("--no-live", action="store_true", help="skip the live re-run way (harness way and breakdown only)")
    ap.add_argument("--out", type=Path, help="append the result to this Markdown file")
    args = ap.parse_args()
    scenarios = select(load_scenarios(), args.ids or None, gate=None if args.ids else args.gate)
    live = not args.no_live
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        result = measure(scenarios, Path(tmp), live)
    warm_s, _, timed, report_s = result[("harness", "warm")]
    lines = [
        f"### {args.gate if not args.ids else 'selected'} scenarios ({len(scenarios)}), cold and warm compile cache, "
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores (load average before: "
        f"{LOAD_BEFORE}), torch {__import__('torch').__version__}",
        "",
        *table(scenarios, result, live),
        "",
        *ratios(result, live),
        "",
        f"Where the harness way's warm {warm_s:.1f} s went (phases summed over the scenarios; rank phases along the slowest rank):",
        "",
        *breakdown_lines(timed, report_s, warm_s),
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0


LOAD_BEFORE = " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
