"""`harness repro ID`: repro.py, BUG.md and the checkpoint in one directory (harness/run/repro.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import suites
from harness.cli.options import add_report_dir
from harness.contract import exit_codes
from harness.inputs.scenarios.schema import ScenarioError

HELP = "write a standalone script and a bug report that reproduce one scenario on the engine alone"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="the scenario id, e.g. vllm-llama/tp1-pp2, or a versioned run's vllm-llama/tp1-pp2@vllm-0.21.0")
    p.add_argument(
        "--engine-env",
        metavar="ENGINE_ENV",
        help="the engine environment to reproduce in (as harness run --engine-env; "
        "default for an id@<engine>-<version>: that release)",
    )
    p.add_argument("--out", type=Path, help="the directory to write (default: <report-dir>/repro/<id, '/' as '__'>)")
    p.add_argument(
        "--run", type=Path, metavar="RUN_DIR", help="take the symptom from this run (default: the newest run of the scenario)"
    )
    add_report_dir(p)


def run(args: argparse.Namespace) -> int:
    from harness.inputs import engine_envs
    from harness.run.repro import ReproError, write_repro

    try:
        scenario = engine_envs.in_environment(
            suites.find_one_in(suites.load(args, "harness repro"), args.id), args.id, args.engine_env
        )
        repro = write_repro(scenario, args.out, run_dir=args.run, report_dir=args.report_dir)
    except (ReproError, engine_envs.EngineEnvError, ScenarioError) as exc:
        print(f"harness repro: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print(
        f"harness repro: wrote {repro.directory}: {repro.script.name}, {repro.report.name}"
        + (", model/ (the checkpoint)" if repro.model_copied else " (the script points at the checkpoint)")
    )
    print(
        f"harness repro: symptom from {repro.verdict}"
        if repro.verdict
        else "harness repro: no run of this scenario found: BUG.md has no symptom (give --run RUN_DIR)"
    )
    python = scenario.engine_options.get("python")
    print(f"run it: python {repro.script} " + (f"--python {python}" if python else "[--python /path/to/venv/bin/python]"))
    return exit_codes.OK
