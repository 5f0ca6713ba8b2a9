"""The fault x scenario x verdict table of docs/BUG_CLASSES.md, measured.

    python bench/bug_classes.py                    # the PR gate under each bug-class fault
    python bench/bug_classes.py --ids llama-tiny/tp1-pp2 llama-pli/tp1-pp2

Runs `harness run` once per fault (and once without) over the chosen scenarios and
prints one markdown row per fault and scenario: the verdict and where it points.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.contract.rundir import run_meta_path, verdict_files  # noqa: E402
from harness.contract.verdict import Verdict  # noqa: E402
from harness.run.report.markdown import where_diverged  # noqa: E402

FAULTS = [
    None,
    "pp-buffer-missing-key",
    "pp-drop-kv-connector-output",
    "pp-drop-per-layer-inputs",
    "sp-residual-first-shard",
    "compile-warmup-without-images",
    # the bug classes of expert parallelism, chunked prefill, prefix caching, speculative decoding
    "ep-expert-map-ignored",
    "ep-dispatch-drop-token",
    "chunked-prefill-drops-kv",
    "prefix-cache-skips-stage",
    "spec-accepts-unverified-draft",
    "dp-merge-misorders",
]


def cause(v: Verdict) -> str:
    if v.crash:
        return f"rank {v.crash['rank']}: {(v.crash['exception'] or v.reason)[:110]}"
    if v.verdict == "fail":
        bad = ", ".join(c["name"] for c in v.checks if not c["passed"])
        return f"{where_diverged(v)} (failed: {bad})"
    return ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ids", nargs="*", default=[])
    p.add_argument("--gate", default="pr")
    p.add_argument("--report-dir", type=Path, default=ROOT / "reports" / "bug-classes")
    p.add_argument("--faults", nargs="*", help="only these (default: none, then each bug-class fault)")
    args = p.parse_args()
    selection = args.ids or ["--gate", args.gate]
    print("| fault | scenario | verdict | where / cause |\n|---|---|---|---|")
    for fault in [f or None for f in args.faults] if args.faults else FAULTS:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{fault or 'no-fault'}"
        cmd = [sys.executable, "-m", "harness", "run", *selection, "--report-dir", str(args.report_dir), "--run-id", run_id]
        subprocess.run(cmd + (["--fault", fault] if fault else []), cwd=ROOT, capture_output=True, text=True)
        run_dir = args.report_dir / run_id
        for path in verdict_files(run_dir):
            v = Verdict.load(path)
            print(f"| {fault or '(none)'} | `{v.scenario}` | {v.verdict} | {cause(v)} |", flush=True)
        summary = json.loads(run_meta_path(run_dir).read_text())
        print(f"| {fault or '(none)'} | *run* | {summary['counts']} | {_explained(run_dir)} |", flush=True)
    return 0


def _explained(run_dir: Path) -> str:
    for line in (run_dir / "summary.md").read_text().splitlines():
        if line.startswith(("Failures explained by", "No single setting")):
            return line
    return ""


if __name__ == "__main__":
    sys.exit(main())
