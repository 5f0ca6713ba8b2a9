"""Benchmark: the PR gate against a stored golden vs. the way engine CI does it today.

Today's way: every setting is compared with a live re-run of its reference setting,
one process launch per setting, so each scenario costs two engine starts (the
reference and the setting). The harness's way: the reference ran once, when the
golden was made; each scenario is one launch compared against the stored golden.

Both ways run the same scenarios with the same launcher, engine, workloads and
comparison, in one invocation, so the ratio isolates the cost of the live re-runs.

    python bench/pr_gate.py [--gate pr] [--ids ID...] [--no-live] [--out docs/BENCHMARKS.md]

It also prints where the harness way's time went: every phase summed over the gate
(harness/timings.py), the report's writing time, and the harness's own share.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import timings  # noqa: E402
from harness.contract.outputs import EngineOutputs  # noqa: E402
from harness.judge.compare import compare_outputs, tolerance_for  # noqa: E402
from harness.rundir import scenario_dir_name  # noqa: E402
from harness.runner import RunOptions, launch, prepare, run_scenario  # noqa: E402
from harness.scenario import load_scenarios, select  # noqa: E402


def harness_way(scenarios, work: Path) -> tuple[float, dict, list[dict], float]:
    """(wall s, {id: (s, verdict)}, each verdict's timings, report writing s)."""
    from harness.report import write_report

    start, per, timed = time.monotonic(), {}, []
    for s in scenarios:
        v = run_scenario(s, work / "harness", RunOptions())
        per[s.id] = (v.duration_s, v.verdict)
        timed.append(v.timings)
    report_s = write_report(work / "harness")["report_s"]
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
    lines += [f"| **engine** | **{gate['engine_s']:.1f}** | {100 * gate['engine_s'] / wall_s:.1f}% |",
              f"| **harness's own** | **{own:.1f}** | **{100 * own / wall_s:.1f}%** |", ""]
    return lines


def live_way(scenarios, work: Path) -> tuple[float, dict]:
    """Each setting next to a fresh run of the reference setting, compared live."""
    start, per = time.monotonic(), {}
    for s in scenarios:
        t0 = time.monotonic()
        runs = {}
        for label, settings in (("reference", dict(s.suite.golden)), ("setting", s.settings)):
            out = work / "live" / scenario_dir_name(s.id) / label
            prepared = prepare(s, settings, out, RunOptions())
            outcome = launch(prepared, out, s, RunOptions())
            if outcome.status != "ok":
                raise RuntimeError(f"{s.id} {label}: {outcome.status}")
            runs[label] = (EngineOutputs.load(prepared.spec.output_dir), prepared.spec.workloads)
        checks = compare_outputs(runs["reference"][0], runs["setting"][0], runs["setting"][1], tolerance_for(s.suite.dtype))
        per[s.id] = (time.monotonic() - t0, "pass" if all(c.passed for c in checks) else "fail")
    return time.monotonic() - start, per


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gate", default="pr")
    ap.add_argument("--ids", nargs="*", help="only these scenario ids (default: the whole gate)")
    ap.add_argument("--no-live", action="store_true", help="skip the live re-run way (breakdown only)")
    ap.add_argument("--out", type=Path, help="append the result table to this Markdown file")
    args = ap.parse_args()
    scenarios = select(load_scenarios(), args.ids or None, gate=None if args.ids else args.gate)
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        work = Path(tmp)
        live_s, live = live_way(scenarios, work) if not args.no_live else (float("nan"), {})
        harness_s, ours, timed, report_s = harness_way(scenarios, work)
    live = {s.id: live.get(s.id, (float("nan"), "-")) for s in scenarios}
    lines = [
        f"### {args.gate} gate, {len(scenarios)} scenarios, {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} {__import__('os').cpu_count()} cores, torch {__import__('torch').__version__}",
        "",
        "| scenario | live re-run (s) | harness vs golden (s) | verdicts (live / harness) |",
        "|---|---|---|---|",
    ]
    for s in scenarios:
        lines.append(f"| `{s.id}` | {live[s.id][0]:.1f} | {ours[s.id][0]:.1f} | {live[s.id][1]} / {ours[s.id][1]} |")
    lines += [
        f"| **total** | **{live_s:.1f}** | **{harness_s:.1f}** | |",
        "",
        (f"Ratio live / harness: **{live_s / harness_s:.2f}x** (the harness's PR gate takes {100 * harness_s / live_s:.0f}% of the live way's time)."
         if not args.no_live else "Live way not run (--no-live)."),
        "",
        f"Where the harness way's {harness_s:.1f} s went (phases summed over the scenarios; rank phases along the slowest rank):",
        "",
        *breakdown_lines(timed, report_s, harness_s),
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
