"""`harness conformance ENGINE`: the engine contract's kit (harness/run/conformance.py) run on a plugin."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness.cli.options import add_device, key_value, positive_seconds
from harness.contract import exit_codes

HELP = "check that an engine plugin keeps the engine contract (`harness docs engines`)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("engine", help="the engine's registered name (`harness list --engines`)")
    p.add_argument(
        "--check", action="append", help="run only this check (repeatable; default: all; an unknown name lists the kit's checks)"
    )
    p.add_argument("--model", default="tiny-llama", help="zoo model the runs use (default: tiny-llama)")
    p.add_argument(
        "--parallel",
        nargs="*",
        metavar="SETTINGS",
        help="settings of the parallel checks, as in scenario ids (default: tp2; e.g. --parallel tp2 pp2 tp2-pp2)",
    )
    add_device(p)
    p.add_argument(
        "--engine-option",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="as a scenario file's engine_options: (repeatable), e.g. python=/venv/bin/python",
    )
    p.add_argument("--timeout", type=positive_seconds, default=300.0, help="per run, seconds (default 300)")
    p.add_argument("--hang-timeout", type=positive_seconds, default=90.0, help="the hang check's run, seconds (default 90)")
    p.add_argument("--work-dir", type=Path, help="where runs, logs and the kit's goldens go (default: a new temporary directory)")


def run(args: argparse.Namespace) -> int:
    """Print each check's line; exit 0 when none failed."""
    from harness.run.conformance import CHECKS, KitOptions, parse_settings, passed, run_kit, summary, work_dir_name

    unknown = [c for c in args.check or [] if c not in CHECKS]
    if unknown:
        print(f"harness conformance: unknown checks {unknown} (the kit has: {', '.join(CHECKS)})", file=sys.stderr)
        return exit_codes.USAGE
    work = args.work_dir or Path(tempfile.mkdtemp(prefix=f"harness-conformance-{work_dir_name(args.engine)}-"))
    work.mkdir(parents=True, exist_ok=True)
    options = KitOptions(
        model=args.model,
        device=args.device,
        checks=args.check or None,
        engine_options=dict(args.engine_option),
        timeout_s=args.timeout,
        hang_timeout_s=args.hang_timeout,
    )
    if args.parallel is not None:
        options.parallel = [parse_settings(s) for s in args.parallel]
    print(f"conformance of engine '{args.engine}' (model {options.model}, device {options.device}); work dir {work}", flush=True)
    results = run_kit(args.engine, work, options, echo=lambda line: print(line, flush=True))
    print(summary(results) + ("" if passed(results) else "; the contract: `harness docs engines`"), flush=True)
    return exit_codes.OK if passed(results) else exit_codes.NOT_AS_EXPECTED
