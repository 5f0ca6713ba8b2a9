"""The command line: `harness list | run | golden | report | repro`."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from harness import exit_codes
from harness.config.env import DEVICE
from harness.judge.expectations import describe as describe_expectation
from harness.launch import DeferInterrupts, SigtermAsInterrupt
from harness.plan.devices import DeviceError
from harness.plan.nodes import NodesError
from harness.roots import ProjectConfigError, export_to_children, project, reports_dir
from harness.rundir import (
    ResultsNotWritten,
    RunDirTaken,
    check_writable,
    claim_new_run_dir,
    claim_run_dir,
    run_id_problem,
)
from harness.scenario import ScenarioError, env_problem, find_one, load_scenarios, select

# the conformance kit's checks (harness/conformance.py CHECKS), here so the parser needs no import
CONFORMANCE_CHECKS = ("load", "versions", "unsupported", "outputs", "matches-reference", "parallel", "crash", "hang")


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    key, value = text.split("=", 1)
    return key, value


def env_assignment(text: str) -> tuple[str, str]:
    """--env NAME=VALUE: one the OS takes into a process's environment."""
    name, value = _key_value(text)
    problem = env_problem(name, value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}: {text!r} (expected NAME=VALUE, an environment variable)")
    return name, value


def run_id(text: str) -> str:
    """--run-id: one directory under --report-dir, never a path that leads out of it."""
    problem = run_id_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def positive_seconds(text: str) -> float:
    """A timeout: a finite number of seconds > 0 (0 or a negative one cannot be waited for)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got '{text}'")
    return seconds


def positive_int(text: str) -> int:
    """A count of jobs or devices: an integer >= 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got '{text}'")
    return count


def shard_spec(text: str) -> str:
    """I/N, checked here so a bad shard is a usage error; planning parses it again."""
    from harness.plan.schedule import parse_shard

    try:
        parse_shard(text)
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def git_revision(text: str) -> str:
    """A branch, tag or commit for --changed-since; never something git reads as an option."""
    if not text or text.startswith("-"):
        raise argparse.ArgumentTypeError(f"expected a branch, tag or commit (e.g. origin/main), got '{text}'")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Distributed correctness harness for LLM inference engines.")
    p.add_argument("--scenarios", type=Path, action="append",
                   help="scenario file or directory (default: the project's, from its harness config, and the built-in suites)")
    sub = p.add_subparsers(dest="command", required=True)

    init = sub.add_parser("init", help="make this directory a harness project: its config and a first scenario file")
    init.add_argument("--model", required=True, help="a checkpoint directory, arch:CLASS (tiny random), ORG/NAME@REVISION "
                      "(hub) or a zoo model (`harness list --models`)")
    init.add_argument("--engine", default="reference", help="the engine the scenarios run on (default: reference)")
    init.add_argument("--suite", help="the suite's name, the first part of every scenario id (default: from the model)")
    init.add_argument("--dir", type=Path, default=Path("."), help="the project's directory (default: here)")

    ls = sub.add_parser("list", help="list scenarios")
    ls.add_argument("ids", nargs="*", help="ids or glob patterns, or suite names")
    ls.add_argument("--gate", help="only scenarios of this gate (pr, nightly)")
    ls.add_argument("--ids-only", action="store_true", help="print bare ids (for scripts and make)")
    ls.add_argument("--engines", action="store_true", help="list the engines instead: built in or from installed packages, "
                    "whether each can run here, its axes")
    ls.add_argument("--models", action="store_true", help="list the zoo's models instead: built in or from installed packages")

    conf = sub.add_parser("conformance", help="check that an engine plugin keeps the engine contract (docs/ENGINES.md)")
    conf.add_argument("engine", help="the engine's registered name (`harness list --engines`)")
    conf.add_argument("--check", action="append", choices=CONFORMANCE_CHECKS, help="run only this check (repeatable; default: all)")
    conf.add_argument("--model", default="tiny-llama", help="zoo model the runs use (default: tiny-llama)")
    conf.add_argument("--parallel", nargs="*", metavar="SETTINGS", help="settings of the parallel checks, as in scenario ids "
                      "(default: tp2; e.g. --parallel tp2 pp2 tp2-pp2)")
    conf.add_argument("--device", choices=["cpu", "cuda"], default=DEVICE.text())
    conf.add_argument("--engine-option", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                      help="as a scenario file's engine_options: (repeatable), e.g. python=/venv/bin/python")
    conf.add_argument("--timeout", type=positive_seconds, default=300.0, help="per run, seconds (default 300)")
    conf.add_argument("--hang-timeout", type=positive_seconds, default=90.0, help="the hang check's run, seconds (default 90)")
    conf.add_argument("--work-dir", type=Path, help="where runs, logs and the kit's goldens go (default: a new temporary directory)")

    run = sub.add_parser("run", help="run scenarios and write a report")
    run.add_argument("ids", nargs="*", help="ids or glob patterns, or suite names")
    run.add_argument("--gate", help="run this gate's scenarios (pr, nightly)")
    run.add_argument("--timeout", type=positive_seconds, help="per-scenario timeout in seconds (overrides the scenario file)")
    run.add_argument("--fault", action="append", default=[], help="switch on an engine fault (repeatable)")
    run.add_argument("--env", type=env_assignment, action="append", default=[], help="KEY=VALUE for every rank (repeatable)")
    run.add_argument("--device", choices=["cpu", "cuda"], default=DEVICE.text())
    run.add_argument("--report-dir", type=Path, default=reports_dir())
    run.add_argument("--run-id", type=run_id, help="name of the run directory (default: time and gate)")
    run.add_argument("--history", type=Path, help="history store (default: $HARNESS_HISTORY_DIR or <report-dir>/history)")
    run.add_argument("--jobs", type=positive_int, default=None, help="scenarios at once, packed onto the devices (default: $HARNESS_JOBS or 1)")
    run.add_argument("--devices", type=positive_int, help="device slots of this machine (default: $HARNESS_DEVICES, else the GPU count on cuda, a CPU-based count on cpu)")
    run.add_argument("--nodes", type=Path, help="nodes file for scenarios bigger than this machine (default: $HARNESS_NODES)")
    run.add_argument("--shard", type=shard_spec, help="run shard I of N (I/N, 1-based), balanced by recorded durations")
    run.add_argument("--durations", type=Path, help="JSON {scenario id: seconds} to balance shards and pack by (default: past verdicts under --report-dir)")
    run.add_argument("--changed-files", type=Path, help="with --gate pr: run what these files (one per line) can break, plus the smoke set")
    run.add_argument("--engine-env", action="append", default=[], metavar="SPEC",
                     help="run every chosen scenario in this engine environment (repeatable: once per environment, the "
                          "engine version in the id): a Python interpreter or venv path, or a release ENGINE==VERSION "
                          "that the harness installs once into a cached venv (docs/ENGINE_VERSIONS.md)")
    run.add_argument("--changed-since", metavar="BASE", type=git_revision, help="with --gate pr: as --changed-files, with the files of `git diff --name-only BASE...HEAD`")

    rep_ = sub.add_parser("repro", help="write a standalone script and a bug report that reproduce one scenario on the engine alone")
    rep_.add_argument("id", help="the scenario id, e.g. vllm-llama/tp1-pp2, or a versioned run's vllm-llama/tp1-pp2@vllm-0.21.0")
    rep_.add_argument("--engine-env", metavar="SPEC", help="the engine environment to reproduce in (as harness run --engine-env; "
                      "default for an id@<engine>-<version>: that release)")
    rep_.add_argument("--out", type=Path, help="the directory to write (default: <report-dir>/repro/<id, '/' as '__'>)")
    rep_.add_argument("--run", type=Path, metavar="RUN_DIR", help="take the symptom from this run (default: the newest run of the scenario)")
    rep_.add_argument("--report-dir", type=Path, default=reports_dir())

    bis = sub.add_parser("bisect", help="find the first engine release or commit where a scenario's verdict changes")
    bis.add_argument("scenario", help="one scenario id, e.g. vllm-llama/tp1-pp2")
    bis.add_argument("--good", required=True, help="a release (or with --git a commit) where it has the old verdict")
    bis.add_argument("--bad", required=True, help="a later release (or commit) where it has another verdict")
    bis.add_argument("--engine", help="the engine whose releases to bisect (default: the scenario's)")
    bis.add_argument("--git", type=Path, metavar="DIR", help="bisect commits of this engine checkout instead "
                     "(git bisect run; the checkout first on PYTHONPATH, as an editable install)")
    bis.add_argument("--install", metavar="CMD", help="with --git: a shell command run in DIR before each step (a build)")
    bis.add_argument("--count-unsupported", action="store_true", help="count `unsupported` as a verdict (when did a setting "
                     "stop or start being supported), not as a step to skip")
    bis.add_argument("--device", choices=["cpu", "cuda"], default=DEVICE.text())
    bis.add_argument("--timeout", type=positive_seconds, help="per-step scenario timeout in seconds (overrides the scenario file)")
    bis.add_argument("--work-dir", type=Path, help="where the steps' runs go (default: <report-dir>/bisect/<time>-<scenario>)")
    bis.add_argument("--report-dir", type=Path, default=reports_dir())

    step = sub.add_parser("bisect-step")  # git bisect run's step: harness/bisect.py run_step
    step.add_argument("scenario")
    step.add_argument("--git", type=Path, required=True)
    step.add_argument("--work-dir", type=Path, required=True)
    step.add_argument("--good-verdict")
    step.add_argument("--install")
    step.add_argument("--count-unsupported", action="store_true")
    step.add_argument("--device", default="cpu")
    step.add_argument("--timeout", type=positive_seconds)

    dur = sub.add_parser("durations", help="write the recorded duration of every scenario (for --durations)")
    dur.add_argument("--report-dir", type=Path, default=reports_dir())
    dur.add_argument("--out", type=Path, required=True)

    gold = sub.add_parser("golden", help="(re)make the goldens of suites")
    gold.add_argument("suites", nargs="*", help="suite names (default: every suite)")
    gold.add_argument("--device", choices=["cpu", "cuda"], default=DEVICE.text())
    gold.add_argument("--work-dir", type=Path, default=None, help="where the golden runs go (default: <report-dir>/golden-runs)")

    rep = sub.add_parser("report", help="rebuild a run's report, merge shard runs into one, or diff two runs")
    rep.add_argument("run_dir", type=Path, nargs="?", help="the run directory whose report to rebuild")
    rep.add_argument("--merge", type=Path, nargs="+", metavar="DIR", help="run directories (shards of one run) to merge into -o OUT")
    rep.add_argument("-o", "--out", type=Path, help="the new run directory of --merge")
    rep.add_argument("--diff", type=Path, nargs=2, metavar=("OLD", "NEW"), help="what changed from run OLD to run NEW")
    rep.add_argument("--history", type=Path, help="history store (default: $HARNESS_HISTORY_DIR or history/ beside the run directory)")
    return p


def main(argv: list[str] | None = None) -> int:
    """The `harness` command. SIGTERM acts as Ctrl-C from its first line to its last
    (README, "Exit codes": 130, and a run's report covers what ended), not only while
    ranks run: a CI job cancelled while the harness plans, judges or reports still gets
    an interrupt report, never SIGTERM's silent default death (143)."""
    with SigtermAsInterrupt():
        try:
            return _main(argv)
        except KeyboardInterrupt:
            print("\nharness: interrupted", file=sys.stderr)
            return exit_codes.INTERRUPTED
        except BrokenPipeError:  # the reader left early (`harness list | head`): nothing went wrong here
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            return 0


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)  # the defaults read the project config
        export_to_children()
    except ProjectConfigError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2
    # none of these needs (nor may fail on) the scenario files
    if args.command == "init":
        return cmd_init(args)
    if args.command == "conformance":
        from harness.conformance import main as conformance_main

        return conformance_main(args)
    if args.command == "list" and (args.engines or args.models):
        return cmd_list_plugins(args)
    try:
        scenarios = load_scenarios(args.scenarios)
        commands = {"list": cmd_list, "run": cmd_run, "golden": cmd_golden, "repro": cmd_repro,
                    "bisect": cmd_bisect, "bisect-step": cmd_bisect_step}
        if args.command in commands:
            return commands[args.command](args, scenarios)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "durations":
            return cmd_durations(args)
    except (ScenarioError, DeviceError, NodesError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2
    return 2


def cmd_init(args) -> int:
    from harness.project_init import InitError, init_project

    try:
        done = init_project(args.dir, args.model, args.engine, args.suite)
    except (InitError, ProjectConfigError) as exc:
        print(f"harness init: {exc}", file=sys.stderr)
        return 2
    if done.config:
        print(f"wrote the project config: {done.config}")
    print(f"wrote {done.scenario_file}")
    print(f"next: `harness golden {done.suite}` (commit golden/{done.suite}), then `harness run {done.suite}` "
          f"or `pytest {done.scenario_file.parent.name}/`")
    return 0


def cmd_list(args, scenarios) -> int:
    chosen = select(scenarios, args.ids, args.gate)
    for s in chosen:
        if args.ids_only:
            print(s.id)
        else:
            notes = "".join(f"  (expected failure: {describe_expectation(x)}: {x.reason})" for x in s.expectations)
            if s.expected_failure and not s.expectations:
                notes = f"  (expected failure: {s.expected_failure})"
            print(f"{s.id:40s} gates={','.join(sorted(s.gates)) or '-'}{notes}")
    return 0


def cmd_list_plugins(args) -> int:
    """`harness list --engines` / `--models`: one line each, where it comes from and whether it can be used here."""
    if args.engines:
        from harness.engines import axes_text, inventory

        for e in inventory():
            axes = f"  axes: {axes_text(e.axes)}" if e.axes is not None else ""
            where = f" [{e.path}]" if e.path and not e.origin.startswith("built-in") else ""
            detail = f"  -- {e.detail}" if e.detail else ""
            print(f"{e.name:12s} {e.status:13s} {e.origin}{where}{axes}{detail}")
    if args.models:
        from harness import zoo

        for name, origin, status, detail in zoo.inventory():
            print(f"{name:20s} {status:13s} {origin}{'  ' + detail if detail else ''}")
    return 0


def harness_versions() -> dict:
    import torch

    from harness.provenance import harness_provenance

    return {"torch": torch.__version__, "python": sys.version.split()[0], **harness_provenance()}


def cmd_run(args, scenarios) -> int:
    from harness.plan.planning import default_jobs, plan_run
    from harness.report.history import history_dir
    from harness.runner import RunOptions

    args.jobs = args.jobs or default_jobs()
    selected = select(scenarios, args.ids, args.gate)
    if args.engine_env:
        from harness import envs

        if args.changed_files or args.changed_since:
            print("harness: --engine-env does not go with --changed-files / --changed-since", file=sys.stderr)
            return exit_codes.USAGE
        try:
            selected = envs.expand(selected, args.engine_env)
        except envs.EnvError as exc:
            print(f"harness: {exc}", file=sys.stderr)
            return exit_codes.USAGE
    plan = plan_run(args, scenarios, selected, project().root)
    chosen = plan.scenarios
    if not chosen:
        print("harness: nothing to run (no scenario matches)", file=sys.stderr)
        return 2
    problem = unknown_faults(args.fault, chosen)
    if problem:
        print(f"harness: {problem}", file=sys.stderr)
        return exit_codes.USAGE
    shard = f"-shard{plan.meta['shard']['index']}of{plan.meta['shard']['count']}" if "shard" in plan.meta else ""
    history = history_dir(args.report_dir, args.history)
    # the planned list goes on disk with the claim: a report of a killed run can then say what never ran
    meta = {"gate": args.gate, "scenarios": [s.id for s in chosen], "faults": args.fault, "versions": harness_versions(), "started": time.time(), **plan.meta}
    opts = RunOptions(timeout_s=args.timeout, faults=args.fault, env=dict(args.env), device=args.device,
                      devices=plan.devices, cluster=plan.cluster, gate=args.gate)
    try:
        check_writable(history / "runs", "history store", "make it writable, or give --history DIR (or $HARNESS_HISTORY_DIR)")
        run_dir = claim_run_dir(args.report_dir, args.run_id, meta) if args.run_id else \
            claim_new_run_dir(args.report_dir, meta, (f"-{args.gate}" if args.gate else "") + shard)
    except RunDirTaken as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except ResultsNotWritten as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN
    meta["run_id"] = run_dir.name
    try:  # from the claim on, an interrupt ends in the report of what ended (_run_and_report)
        return _run_and_report(chosen, run_dir, meta, history, opts, args.jobs, plan.cost)
    except ResultsNotWritten as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN


def unknown_faults(faults: list[str], chosen) -> str | None:
    """A --fault no engine of the chosen scenarios knows (a typo) is a usage error before
    anything runs, not one `error` verdict per scenario. A fault that only some of the
    engines know is left to each scenario (the others end `error`, naming their faults)."""
    from harness.engines import get_engine

    if not faults:
        return None
    problems = {}
    for name in sorted({s.suite.engine for s in chosen}):
        try:
            problems[name] = get_engine(name).fault_problem(list(faults))
        except Exception:  # noqa: BLE001 - an engine that does not load says so in its scenarios
            return None
    if problems and all(problems.values()):
        return "; ".join(f"--fault for engine '{name}': {p}" for name, p in problems.items())
    return None


def _run_and_report(chosen, run_dir: Path, meta: dict, history: Path, opts, jobs: int, cost: dict) -> int:
    from harness.report.markdown import counts_text
    from harness.report.progress import choose_progress
    from harness.session import run_session

    interrupted = False
    try:
        _write_report(run_dir, meta, history)
        run_session(chosen, run_dir, opts, progress=choose_progress(), jobs=jobs, cost=cost)
    except KeyboardInterrupt:
        interrupted = True
        print("\nharness: interrupted; ranks stopped, writing the report of what finished", file=sys.stderr)
    try:
        with DeferInterrupts():  # the last report is written whole, whatever signal comes meanwhile
            meta = _write_report(run_dir, {"interrupted": interrupted, "finished": time.time()}, history)
    except KeyboardInterrupt:
        interrupted = True  # stopped while reporting: the report is whole, the exit code says it was stopped
    from harness.report.versions import versions_text

    table = versions_text(collect_for_table(run_dir))
    if table:
        print(table)
    print(f"harness: {counts_text(meta['counts'], meta['never_ran'])}; report: {run_dir / 'report.html'}")
    warn_history_unreadable(meta, "harness")
    if meta.get("history_error"):
        print(f"harness: results not recorded: {meta['history_error']}", file=sys.stderr)
    if meta.get("results_not_written"):
        print("harness: results not written (a disk fault, not the engine): " + ", ".join(meta["results_not_written"]),
              file=sys.stderr)
    if meta["not_as_expected"]:
        print("harness: not as expected: " + ", ".join(meta["not_as_expected"]), file=sys.stderr)
    if meta.get("coverage_lost"):
        print("harness: coverage lost (passed in the previous run of the gate, not tested now): "
              + ", ".join(meta["coverage_lost"]), file=sys.stderr)
    return exit_codes.of_run(meta, interrupted)


def warn_history_unreadable(meta: dict, who: str) -> None:
    for problem in meta.get("history_unreadable") or []:
        print(f"{who}: warning: history file skipped, unreadable: {problem}; the comparison with earlier runs is partial",
              file=sys.stderr)


def collect_for_table(run_dir: Path) -> list:
    from harness.report import collect_verdicts

    try:
        return collect_verdicts(run_dir)
    except (OSError, ValueError):
        return []


def _write_report(run_dir: Path, meta: dict, history: Path) -> dict:
    from harness.report import write_report

    try:
        return write_report(run_dir, meta, history)
    except OSError as exc:
        raise ResultsNotWritten(f"cannot write the report in {run_dir}: {exc.strerror or exc}; "
                                f"make it writable, then `harness report {run_dir}` rebuilds it from the verdicts") from None


def cmd_golden(args, scenarios) -> int:
    from harness.models import ModelError
    from harness.roots import shipped_only
    from harness.runner import GoldenUnsupported, RunOptions, make_golden
    from harness.workloads import WorkloadError

    if not args.suites and not args.scenarios:
        # `harness golden` in an engine's project makes its own goldens; the built-in suites'
        # ship with the harness (named, one is regenerated into the project's golden dir)
        scenarios = [s for s in scenarios if not shipped_only(s.source)]
    goldens: dict = {}  # golden key (suite, or suite/arch) -> a scenario of it
    for s in scenarios:
        goldens.setdefault(s.golden_key, s)
    suites = {s.suite.suite for s in goldens.values()}
    unknown = [n for n in args.suites if n not in suites and n not in goldens]
    if unknown:
        print(f"harness: unknown suites {unknown} (known: {', '.join(sorted(suites))})", file=sys.stderr)
        return 2
    # a suite with an arch axis has one golden per arch; `SUITE/ARCH` names one of them
    names = [k for k in sorted(goldens) if not args.suites or k in args.suites or k.split("/")[0] in args.suites]
    failed = []
    for name in names:  # one failing golden (an arch the engine cannot run) does not stop the others
        start = time.monotonic()
        try:
            path = make_golden(goldens[name], args.work_dir or reports_dir() / "golden-runs", RunOptions(device=args.device))
        except GoldenUnsupported as exc:  # not a failure: its scenarios will say `unsupported`
            print(f"golden {name}: skipped: {exc}", flush=True)
            continue
        except (RuntimeError, ModelError, WorkloadError) as exc:  # engine missing, bad model or workload, golden run crashed: no traceback
            print(f"harness: golden {name} failed: {exc}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"golden {name}: {path} ({time.monotonic() - start:.1f}s)", flush=True)
    if failed:
        print(f"harness: {len(failed)} of {len(names)} goldens failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_bisect(args, scenarios) -> int:
    """`harness bisect SCENARIO --good V1 --bad V2` over releases, or `--git DIR` over commits."""
    from harness.bisect import BisectError, bisect_git, bisect_releases, default_work_dir, repro_hook, scenario_args_of
    from harness.runner import RunOptions

    scenario = find_one(scenarios, args.scenario)
    if args.install and not args.git:
        print("harness bisect: --install goes with --git DIR", file=sys.stderr)
        return exit_codes.USAGE
    work_dir = (args.work_dir or default_work_dir(args.report_dir, scenario)).absolute()
    opts = RunOptions(timeout_s=args.timeout, device=args.device)
    try:
        if args.git:
            if args.engine and args.engine != scenario.suite.engine:
                raise BisectError(f"{scenario.id} runs on engine '{scenario.suite.engine}', not '{args.engine}'")
            result = bisect_git(scenario, scenario_args_of(args.scenarios), args.git, args.good, args.bad, work_dir, opts,
                                args.install, args.count_unsupported)
        else:
            result = bisect_releases(scenario, args.good, args.bad, work_dir, opts, args.engine, args.count_unsupported)
    except BisectError as exc:
        print(f"harness bisect: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except KeyboardInterrupt:
        print("\nharness bisect: interrupted (the checkout is reset)", file=sys.stderr)
        return 130
    print(result.text())
    print(f"bisect: the steps' runs are in {work_dir}")
    repro_hook(result.scenario or scenario, result.run_dir, checkout=result.checkout)  # item 6 (harness repro) at the first bad step
    return 0


def cmd_bisect_step(args, scenarios) -> int:
    """One step of `git bisect run` (harness/bisect.py run_step): exit 0 good, 1 bad,
    125 skip, 128 the step could not run (git bisect stops)."""
    from harness.bisect import ABORT, run_step
    from harness.runner import RunOptions

    try:
        scenario = find_one(scenarios, args.scenario)
        return run_step(scenario, args.git.absolute(), args.work_dir, RunOptions(timeout_s=args.timeout, device=args.device),
                        args.good_verdict, args.install, args.count_unsupported)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - exit 1 would read as "bad": a harness fault stops the bisect instead
        print(f"bisect: step could not run: {type(exc).__name__}: {exc}", flush=True)
        return ABORT


def cmd_durations(args) -> int:
    from harness.plan.schedule import recorded_durations, write_durations

    durations = recorded_durations(args.report_dir)
    write_durations(args.out, durations)
    print(f"harness: {len(durations)} scenario durations from {args.report_dir} -> {args.out}")
    return 0


def cmd_repro(args, scenarios) -> int:
    """`harness repro ID`: repro.py, BUG.md and the checkpoint in one directory (harness/repro.py)."""
    from harness import envs
    from harness.repro import ReproError, write_repro

    try:
        scenario = envs.in_environment(find_one(scenarios, args.id), args.id, args.engine_env)
        repro = write_repro(scenario, args.out, run_dir=args.run, report_dir=args.report_dir)
    except (ReproError, envs.EnvError, ScenarioError) as exc:
        print(f"harness repro: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print(f"harness repro: wrote {repro.directory}: {repro.script.name}, {repro.report.name}"
          + (", model/ (the checkpoint)" if repro.model_copied else " (the script points at the checkpoint)"))
    print(f"harness repro: symptom from {repro.verdict}" if repro.verdict else
          "harness repro: no run of this scenario found: BUG.md has no symptom (give --run RUN_DIR)")
    python = scenario.engine_options.get("python")
    print(f"run it: python {repro.script} " + (f"--python {python}" if python else "[--python /path/to/venv/bin/python]"))
    return exit_codes.OK


def cmd_report(args) -> int:
    """Rebuild (RUN_DIR), merge (--merge DIR... -o OUT) or diff (--diff OLD NEW); exits
    as `harness run` would have (harness/exit_codes.py; diff: 1 on new regressions)."""
    from harness.report import write_report
    from harness.report.history import history_dir
    from harness.report.merge import ReportError, diff_runs, merge_runs, read_run

    modes = sum(x is not None for x in (args.run_dir, args.merge, args.diff))
    if modes != 1:
        print("harness report: give exactly one of RUN_DIR, --merge DIR... -o OUT, --diff OLD NEW", file=sys.stderr)
        return 2
    try:
        if args.diff:
            text, regressed = diff_runs(*args.diff)
            print(text)
            return 1 if regressed else 0
        if args.merge:
            if args.out is None:
                raise ReportError("--merge needs -o OUT, the new run directory")
            merge_runs(args.merge, args.out)
            run_dir = args.out
        else:
            run_dir = args.run_dir
            read_run(run_dir)  # a clear error for a directory that is not a run
    except ReportError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return 2
    try:
        meta = write_report(run_dir, history_dir=history_dir(run_dir.resolve().parent, args.history))
    except OSError as exc:
        print(f"harness report: cannot write the report in {run_dir}: {exc.strerror or exc}; make it writable", file=sys.stderr)
        return exit_codes.RESULTS_NOT_WRITTEN
    except ValueError as exc:  # a damaged verdict.json or run.json (harness/jsonfile.py names it)
        print(f"harness report: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print((run_dir / "summary.md").read_text())
    print(f"harness: report: {run_dir / 'report.html'}")
    warn_history_unreadable(meta, "harness report")
    if meta.get("history_error"):
        print(f"harness report: results not recorded: {meta['history_error']}", file=sys.stderr)
    return exit_codes.of_run(meta)


if __name__ == "__main__":
    sys.exit(main())
