"""The scenario x verdict table of docs/ARCHITECTURES.md's feature and MoE sections, from runs.

    python bench/feature_table.py reports/RUN [reports/RUN2 ...] [--suites vllm-moe,vllm-features]

Reads every `scenarios/*/verdict.json` of the given run directories (where several runs
judged the same scenario, the last directory given wins) and prints one markdown row per
scenario: its verdict, the logits check's max |dlogprob| against the golden, how it compared
with its own layout without the feature (the same-layout checks, harness/run/stages/same_layout.py:
bit-identical, or the largest difference; `-` where the golden is that layout), its time, and
the evidence of the axes it tests (every applied axis but tp/pp/compile; the reason for a
verdict that is not a pass). Then a count of verdicts per suite.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

LAYOUT_AXES = ("tp", "pp", "compile")  # every scenario has them: its evidence is in the verdict, not the table


def verdicts(run_dirs: list[Path]):
    """Every verdict.json of the run directories, in the order given (bench/release_table.py too)."""
    for run_dir in run_dirs:
        for path in sorted(run_dir.glob("scenarios/*/verdict.json")):
            yield json.loads(path.read_text())


def load(run_dirs: list[Path], suites: list[str] | None) -> dict[str, dict]:
    return {v["scenario"]: v for v in verdicts(run_dirs) if not suites or v["scenario"].split("/")[0] in suites}


def max_dlogprob(verdict: dict) -> str:
    values = [
        c["metrics"]["max_abs_dlogprob"]
        for c in verdict.get("checks") or []
        if c.get("kind") == "logprobs" and "max_abs_dlogprob" in (c.get("metrics") or {})
    ]
    return f"{max(values):.2e}" if values else "-"


def vs_layout(verdict: dict) -> str:
    """`bit-identical`, or the largest |dlogprob| of the same-layout checks (a greedy check's
    over the steps it compared) and whether they held; `-` without such checks."""
    checks = [c for c in verdict.get("checks") or [] if c.get("kind") == "same-layout"]
    if not checks:
        return "-"
    if all((c.get("metrics") or {}).get("bit_identical") for c in checks):
        return "bit-identical"
    worst = max(max((c.get("metrics") or {}).get(k, 0.0) for k in ("max_abs_dlogprob", "max_step_dlogprob")) for c in checks)
    held = "held" if all(c.get("passed") for c in checks) else "FAILED"
    return f"{worst:.2e} ({held})"


def tested(verdict: dict) -> str:
    if verdict["verdict"] != "pass":
        return verdict.get("reason", "").replace("|", "\\|")
    applied = verdict.get("applied") or {}
    parts = [f"{axis}: {a['evidence']}" for axis, a in applied.items() if axis not in LAYOUT_AXES]
    return "; ".join(parts).replace("|", "\\|") or "(layout only)"


def row(verdict: dict) -> str:
    shown = verdict["verdict"]
    seconds = verdict.get("duration_s")
    time = f"{seconds:.0f} s" if isinstance(seconds, (int, float)) else "-"
    return f"| `{verdict['scenario']}` | {shown} | {max_dlogprob(verdict)} | {vs_layout(verdict)} | {time} | {tested(verdict)} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--suites", help="comma-separated suite names (default: every suite in the runs)")
    args = p.parse_args()
    verdicts = load(args.runs, args.suites.split(",") if args.suites else None)
    print("| scenario | verdict | max \\|dlogprob\\| | vs its layout | time | evidence of the tested axes (or the reason) |")
    print("|---|---|---|---|---|---|")
    for scenario in sorted(verdicts):
        print(row(verdicts[scenario]))
    counts: dict[str, Counter] = {}
    for v in verdicts.values():
        counts.setdefault(v["scenario"].split("/")[0], Counter())[v["verdict"]] += 1
    print()
    for suite, c in sorted(counts.items()):
        print(f"{suite}: {sum(c.values())} scenarios: " + ", ".join(f"{n} {k}" for k, n in c.most_common()))


if __name__ == "__main__":
    main()
