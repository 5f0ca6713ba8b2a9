"""`harness golden`: (re)make the goldens of suites."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli import suites
from harness.cli.options import add_device
from harness.contract import exit_codes

if TYPE_CHECKING:
    from harness.inputs.scenarios.scenario import Scenario

HELP = "(re)make the goldens of suites"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suites", nargs="*", help="suite names (default: every suite)")
    add_device(p)
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 even when every golden was skipped (the engine "
        "cannot run any golden setting; by default exit 5: nothing could be made)",
    )
    p.add_argument("--work-dir", type=Path, default=None, help="where the golden runs go (default: <report-dir>/golden-runs)")


def run(args: argparse.Namespace) -> int:
    from harness.contract.roots import shipped_only
    from harness.contract.rundir import OUTPUTS
    from harness.inputs.models import ModelError
    from harness.inputs.workloads import WorkloadError
    from harness.run.report.progress import still_running
    from harness.run.request import RunConfig
    from harness.run.runner import GoldenUnsupported, RunContext, golden_work_dir, make_golden

    catalog = suites.load(args)
    scenarios = catalog.scenarios
    if not args.suites and not args.scenarios:
        # `harness golden` in an engine's project makes its own goldens; the built-in suites'
        # ship with the harness (named, one is regenerated into the project's golden dir)
        scenarios = [s for s in scenarios if not shipped_only(s.source)]
    # golden key (suite, or suite/arch) -> a scenario of it
    goldens: dict[str, Scenario] = {}
    for s in scenarios:
        goldens.setdefault(s.golden_key, s)
    known = {s.suite.suite for s in goldens.values()}
    broken = [b for b in catalog.broken if not args.suites or b.suite in args.suites]  # goldens it could not make
    unknown = [n for n in args.suites if n not in known and n not in goldens and n not in {b.suite for b in broken}]
    if unknown:
        print(f"harness: unknown suites {unknown} (known: {', '.join(sorted(known))})", file=sys.stderr)
        return exit_codes.USAGE
    # a suite with an arch axis has one golden per arch; `SUITE/ARCH` names one of them
    names = [k for k in sorted(goldens) if not args.suites or k in args.suites or k.split("/")[0] in args.suites]
    failed = [f"{b.suite} (its scenario file)" for b in broken]
    skipped: list[str] = []
    not_written: list[str] = []
    # the run's options, and the report dir the golden runs go under, as every way in reads them
    config = RunConfig(device=args.device)
    work_dir = args.work_dir or config.report_dir / "golden-runs"
    # one failing golden (an arch the engine cannot run) does not stop the others
    for i, name in enumerate(names, 1):
        start = time.monotonic()
        label = f"[{i}/{len(names)}] golden {name}"
        print(f"{label}: running {goldens[name].suite.engine} at its golden setting ({_setting(goldens[name])})", flush=True)
        try:
            with still_running(label, golden_work_dir(work_dir, name) / OUTPUTS):
                path = make_golden(goldens[name], work_dir, RunContext(config))
        except GoldenUnsupported as exc:
            # not a failure: its scenarios will say `unsupported`
            print(f"{label}: skipped: {exc}", flush=True)
            skipped.append(name)
            continue
        except (RuntimeError, ModelError, WorkloadError) as exc:
            # engine missing, bad model or workload, golden run crashed: no traceback
            print(f"harness: golden {name} failed: {exc}", file=sys.stderr)
            failed.append(name)
            continue
        except OSError as exc:
            # the machine's fault (a cache that is a file, a full disk), not the engine's
            print(f"harness: golden {name} not made: the harness could not write its files: {exc}", file=sys.stderr)
            not_written.append(name)
            continue
        print(f"{label}: {path} ({time.monotonic() - start:.1f}s)", flush=True)
    if not_written:
        print(
            f"harness: {len(not_written)} of {len(names) + len(broken)} goldens not made, their files could not be "
            f"written: {', '.join(not_written)}; exit 3",
            file=sys.stderr,
        )
        return exit_codes.RESULTS_NOT_WRITTEN
    if failed:
        print(f"harness: {len(failed)} of {len(names) + len(broken)} goldens failed: {', '.join(failed)}", file=sys.stderr)
        return exit_codes.NOT_AS_EXPECTED
    if names and len(skipped) == len(names) and not args.allow_empty:
        print(
            f"harness: NOTHING MADE: every golden ({len(names)}) was skipped, its engine cannot run it; exit 5. "
            "`harness list --engines` shows what each engine runs; --allow-empty accepts this",
            file=sys.stderr,
        )
        return exit_codes.NOTHING_TESTED
    return exit_codes.OK


def _setting(scenario: Scenario) -> str:
    """`tp=1 pp=1 compile=false`: the golden's settings as its file gives them."""
    return " ".join(f"{axis}={str(v).lower() if isinstance(v, bool) else v}" for axis, v in scenario.suite.golden.items())
