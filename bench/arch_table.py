"""The architecture x setting table of docs/ARCHITECTURES.md, from the runs' verdicts.

    python bench/arch_table.py reports/RUN [reports/RUN2 ...] [--suites A,B] [--settings S1,S2]

Reads every `scenarios/*/verdict.json` of the given run directories whose settings have
an `arch` (a suite with an arch axis, e.g. vllm-archs); where several runs judged the
same scenario, the last directory given wins. Prints a markdown table: one row per arch,
one column per layout, each cell `verdict (max |dlogprob| of the logits check, seconds)` and
the features its row switched on (a covering suite's row: `with chunked_prefill32, batch-one`),
then one line per verdict that is not a plain pass, with its reason.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.contract.axes import AXES

# the columns: a layout; any other axis a row sets is shown in its cell
LAYOUT = ("tp", "pp", "compile")
SETTINGS = ["tp1-pp1", "tp2-pp1", "tp1-pp1-compile", "tp1-pp2", "tp1-pp2-compile"]


def setting_name(settings: dict) -> str:
    name = f"tp{settings.get('tp', 1)}-pp{settings.get('pp', 1)}"
    return name + ("-compile" if settings.get("compile") else "")


def load_verdicts(run_dirs: list[Path], suites: list[str] | None = None) -> dict[tuple[str, str], dict]:
    """(arch, setting) -> verdict; with `suites`, of those suites only (one arch can be in
    several: Qwen2-VL with images and with video)."""
    found: dict[tuple[str, str], dict] = {}
    for run_dir in run_dirs:
        for path in sorted(run_dir.glob("scenarios/*/verdict.json")):
            verdict = json.loads(path.read_text())
            arch = verdict.get("settings", {}).get("arch")
            if arch and (not suites or verdict["scenario"].split("/")[0] in suites):
                found[(arch, setting_name(verdict["settings"]))] = verdict
    return found


def cell(verdict: dict | None) -> str:
    if verdict is None:
        return "not run"
    worst = [
        c["metrics"]["max_abs_dlogprob"]
        for c in verdict.get("checks") or []
        if c.get("kind") == "logprobs" and "max_abs_dlogprob" in c.get("metrics", {})
    ]
    metric = f"{worst[0]:.1e}, " if worst else ""
    return f"{verdict['verdict']} ({metric}{verdict.get('duration_s', 0):.0f}s){features(verdict.get('settings', {}))}"


def features(settings: dict) -> str:
    """The axes besides the layout a covering row switched on, as its id spells them
    (` with chunked_prefill32, batch-one`); '' for a plain layout."""
    parts = [AXES[a].label(v) for a, v in settings.items() if a in AXES and a not in LAYOUT]
    on = [p for p in parts if p]
    return f" with {', '.join(on)}" if on else ""


def table(found: dict[tuple[str, str], dict], only: list[str] | None = None) -> str:
    archs = sorted({arch for arch, _ in found})
    settings = [s for s in (only or SETTINGS) if any((a, s) in found for a in archs)]
    lines = ["| arch | " + " | ".join(settings) + " |", "|---" * (len(settings) + 1) + "|"]
    lines += [f"| {a} | " + " | ".join(cell(found.get((a, s))) for s in settings) + " |" for a in archs]
    return "\n".join(lines)


def non_passes(found: dict[tuple[str, str], dict]) -> list[str]:
    """One line per verdict that is not a pass; expected failures grouped by their expectation."""
    expected: dict[str, list[str]] = {}
    lines = []
    for (arch, setting), v in found.items():
        if v["verdict"] == "expected-failure":
            expected.setdefault((v.get("expectation") or {}).get("reason", "?"), []).append(f"{arch}/{setting}")
        elif v["verdict"] != "pass":
            lines.append(f"- {v['scenario']}: {v['verdict']}: {v.get('reason', '')}")
    lines += [f"- expected-failure x{len(ids)} ({reason}): {', '.join(ids)}" for reason, ids in expected.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--settings", help=f"comma-separated columns (default: those found of {','.join(SETTINGS)})")
    p.add_argument("--suites", help="comma-separated suite names (default: every suite with an arch axis)")
    args = p.parse_args(argv)
    found = load_verdicts(args.run_dirs, args.suites.split(",") if args.suites else None)
    if args.settings:
        found = {k: v for k, v in found.items() if k[1] in args.settings.split(",")}
    counts: dict[str, int] = {}
    for v in found.values():
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    print(table(found, args.settings.split(",") if args.settings else None))
    print(f"\n{len(found)} verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print("\n".join(non_passes(found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
