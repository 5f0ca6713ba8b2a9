"""Soak tests of the harness itself: no orphan, lost history row, false success or false
alarm over many runs (figures in docs/RELIABILITY.md).

  gates  run the PR gate N times in a row (`harness run --gate pr --jobs 2`), each into
         a run directory of its own, and count per run its exit code and verdicts. On
         clean code every run must exit 0 with every scenario as expected: anything
         else is a false alarm.

  kill   run a small selection of scenarios with ranks (tp2 / pp2) N times, and at a
         seeded random moment send SIGKILL, SIGINT or SIGTERM to the harness or to one of
         its rank processes. After each run check:
           orphans        no process of the run is alive once the harness has exited
                          (found by a marker in the environment, HARNESS_SOAK_MARK, by the
                          ranks' process groups and as descendants of the harness);
           history        every file of the history store reads, every row is whole and
                          names a known verdict, the run's rows agree with its verdicts
                          and say `complete` only for a complete run;
           false success  no report (summary.md as the harness left it, then rebuilt by
                          `harness report RUN_DIR`) says OK, and no exit code is 0, for a
                          run whose planned scenarios did not all end; a scenario whose
                          rank was killed never ends `pass`; a harness given SIGINT
                          or SIGTERM exits 130, with a report that counts every
                          verdict written (not the start-of-run one).
         Prints each count by kind (target x signal) and exits 1 naming every violation.

    python bench/soak.py gates --count 20 [--jobs 2] [--out DIR]
    python bench/soak.py kill --runs 32 --seed 1 [--ids ID...] [--out DIR]

Both write a JSON summary (<out>/gates.json, <out>/kill.json). Run one soak at a time:
they measure the harness, not a machine shared by two of them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.contract import exit_codes  # noqa: E402
from harness.contract.rundir import run_meta_path, scenarios_root, verdict_files  # noqa: E402
from harness.contract.verdict import VERDICTS  # noqa: E402
from harness.engines.launch.procgroup import proc_stats  # noqa: E402
from harness.run.report.history import load_history  # noqa: E402

MARK_ENV = "HARNESS_SOAK_MARK"
RANK_LOG = re.compile(r"/scenarios/(?P<dir>[^/]+)/logs/rank(?P<rank>\d+)\.log$")
KILL_IDS = ["llama-tiny/tp1-pp2", "llama-tiny/tp2-pp1", "llama-tiny/tp2-pp2"]  # 2, 2 and 4 ranks, ~20 s in all
SIGNALS = ("SIGKILL", "SIGINT", "SIGTERM")  # SIGTERM: how CI systems and `timeout` cancel a job
KINDS = [(target, sig) for target in ("harness", "rank") for sig in SIGNALS]
RUN_LIMIT_S = 900  # a harness still running this long after its start is itself a finding
ORPHAN_GRACE_S = 15.0  # a killed harness's ranks die by PDEATHSIG: give their exit this long on a loaded machine
POLL_S = 0.1
LOAD_SAMPLE_S = 5.0


def machine() -> dict:
    return {
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return r.stdout.strip()


def child_env(mark: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if mark:
        env[MARK_ENV] = mark
    return env


def sigint_default() -> None:
    """Popen preexec_fn: SIGINT back to its default in the harness (a shell without job
    control starts background commands with SIGINT ignored; see tests/interrupts.py)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def load1() -> float:
    return round(os.getloadavg()[0], 2)


# gates ------------------------------------------------------------------------------


def verdict_counts(run_dir: Path) -> tuple[Counter, list[str], list[str]]:
    """(verdict counts, scenarios not as expected, planned scenarios with no verdict)."""
    counts: Counter = Counter()
    unexpected, ended = [], set()
    for path in verdict_files(run_dir):
        d = json.loads(path.read_text())
        counts[d["verdict"]] += 1
        ended.add(d["scenario"])
        if not d.get("as_expected", False):
            unexpected.append(f"{d['scenario']}: {d['verdict']}")
    planned = json.loads(run_meta_path(run_dir).read_text()).get("scenarios") or []
    return counts, unexpected, [s for s in planned if s not in ended]


def cmd_gates(args) -> int:
    out = Path(args.out)
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    results = []
    print(
        f"{'gate':>4} {'exit':>4} {'wall_s':>7} {'load1':>6} {'mean':>5} {'max':>5}  {'pass':>4} {'fail':>4} {'error':>5} {'crash':>5} {'hang':>4} "
        f"{'unsup':>5} {'xfail':>5}  false alarm",
        flush=True,
    )
    for i in range(1, args.count + 1):
        run_id = f"soak-gate-{i}"
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--gate",
            args.gate,
            "--jobs",
            str(args.jobs),
            "--report-dir",
            str(reports),
            "--run-id",
            run_id,
        ]
        load_before, start, loads = load1(), time.monotonic(), []
        with open(out / f"{run_id}.log", "w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
            while proc.poll() is None:  # the machine's load while the gate runs, every few seconds
                loads.append(load1())
                try:
                    proc.wait(timeout=LOAD_SAMPLE_S)
                except subprocess.TimeoutExpired:
                    pass
            rc = proc.returncode
        wall = round(time.monotonic() - start, 1)
        run_dir = reports / run_id
        try:
            counts, unexpected, never = verdict_counts(run_dir)
        except (OSError, ValueError, KeyError) as exc:
            counts, unexpected, never = Counter(), [f"run directory unreadable: {exc}"], []
        alarms = ([f"exit {rc}"] if rc != exit_codes.OK else []) + unexpected + [f"{s}: never ran" for s in never]
        row = {
            "gate": i,
            "run_id": run_id,
            "exit": rc,
            "wall_s": wall,
            "load1_start": load_before,
            "load1_end": load1(),
            "load1_mean": round(sum(loads) / len(loads), 2) if loads else load_before,
            "load1_max": max(loads, default=load_before),
            "counts": dict(counts),
            "false_alarms": alarms,
        }
        results.append(row)
        c = counts
        print(
            f"{i:>4} {rc:>4} {wall:>7} {load_before:>6} {row['load1_mean']:>5} {row['load1_max']:>5}  {c['pass']:>4} {c['fail']:>4} {c['error']:>5} {c['crash']:>5} "
            f"{c['hang']:>4} {c['unsupported']:>5} {c['expected-failure']:>5}  {'; '.join(alarms) or '-'}",
            flush=True,
        )
        _write_json(out / "gates.json", {"kind": "gates", "machine": machine(), "command": cmd, "runs": results})
    clean = sum(1 for r in results if not r["false_alarms"])
    walls = [r["wall_s"] for r in results]
    print(
        f"soak gates: {len(results)} run, {clean} clean, {len(results) - clean} with a false alarm; "
        f"wall s min/median/max {min(walls)}/{sorted(walls)[len(walls) // 2]}/{max(walls)}; summary: {out / 'gates.json'}"
    )
    return 0 if clean == len(results) else 1


# kill -------------------------------------------------------------------------------


def _environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _identity(stats: dict[int, list[str]], pid: int) -> tuple[int, str] | None:
    """(pid, start time): a pid cannot be mistaken for a later process that reuses it."""
    rest = stats.get(pid)
    return (pid, rest[19]) if rest and len(rest) > 19 else None


def exit_status_of(ident: tuple[int, str], into: dict) -> None:
    """The wait status of a signalled rank, from /proc while it is a zombie (the launcher
    reaps its ranks only when the attempt ends): into["exit_status"]; None if missed."""
    pid, started = ident
    into["exit_status"] = None
    while True:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            return
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) < 50 or rest[19] != started:
            return
        if rest[0] in ("Z", "X"):
            into["exit_status"] = int(rest[49])  # field 52, exit_code: the wait status
            return
        time.sleep(0.005)


def _stdout(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None


def _rank_of(pid: int, ppid: int) -> dict | None:
    """{rank, scenario_dir} of a rank process, found by its stdout: its log,
    <run>/scenarios/<dir>/logs/rank<R>.log. Not by its environment: /proc shows a rank
    forked from the rank pool with its zygote's, which has no RANK. What a rank starts
    writes to the same log; the rank is the one whose parent does not."""
    out = _stdout(pid)
    found = RANK_LOG.search(out or "")
    if found is None or _stdout(ppid) == out:
        return None
    return {"rank": int(found["rank"]), "scenario_dir": found["dir"]}


class Watch:
    """Every process of one run seen so far: those carrying the run's marker, and the
    harness's descendants; with the process groups of its ranks."""

    def __init__(self, harness_pid: int, mark: str):
        self.harness_pid, self.mark = harness_pid, mark
        self.seen: dict[tuple[int, str], str] = {}  # identity -> what it is
        self.pgids: set[int] = set()
        self.ranks: dict[tuple[int, str], dict] = {}  # identity -> {rank, scenario}

    def scan(self) -> dict[int, list[str]]:
        stats = proc_stats() or {}
        children: dict[int, list[int]] = {}
        for pid, rest in stats.items():
            if len(rest) > 1 and rest[1].isdigit():
                children.setdefault(int(rest[1]), []).append(pid)
        family, todo = set(), [self.harness_pid]
        while todo:
            pid = todo.pop()
            if pid not in family:
                family.add(pid)
                todo += children.get(pid, [])
        for pid in family:  # the ranks: the harness's children, or its zygote's; what they start, below them
            ident = _identity(stats, pid)
            if ident is None or ident in self.ranks:
                continue
            self.seen.setdefault(ident, "harness" if pid == self.harness_pid else "process")
            rank = _rank_of(pid, int(stats[pid][1])) if pid != self.harness_pid else None
            if rank is not None:
                self.ranks[ident] = rank
                self.seen[ident] = "rank"
                self.pgids.add(int(stats[pid][2]))
        return stats

    def live_ranks(self, stats: dict[int, list[str]]) -> list[tuple[int, str]]:
        return [i for i in self.ranks if _identity(stats, i[0]) == i and stats[i[0]][0] not in ("Z", "X")]

    def survivors(self) -> list[str]:
        """Processes of the run still alive (not zombies): marked ones, ones seen during
        the run, and members of the ranks' process groups."""
        stats = proc_stats() or {}
        found = []
        for pid, rest in stats.items():
            if rest[0] in ("Z", "X"):
                continue
            ident = _identity(stats, pid)
            env = _environ(pid)
            marked = env is not None and env.get(MARK_ENV) == self.mark
            in_group = len(rest) > 2 and rest[2].isdigit() and int(rest[2]) in self.pgids
            if marked or in_group or ident in self.seen:
                found.append(f"pid {pid} ({self.seen.get(ident, 'marked' if marked else 'rank group')}): {_cmdline(pid)}")
        return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def _kill_leftovers(watch: Watch) -> None:
    stats = proc_stats() or {}
    for pid, rest in stats.items():
        env = _environ(pid)
        if (env and env.get(MARK_ENV) == watch.mark) or (len(rest) > 2 and rest[2].isdigit() and int(rest[2]) in watch.pgids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def summary_word(run_dir: Path) -> str | None:
    """The status word summary.md starts with (OK, FAILED, INCOMPLETE, NOT RECORDED)."""
    try:
        text = (run_dir / "summary.md").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("**"):
            return line[2:].split("**", 1)[0]
    return ""


def read_verdicts(run_dir: Path, problems: list[str]) -> dict[str, dict]:
    found = {}
    for path in verdict_files(run_dir):
        try:
            d = json.loads(path.read_text())
            found[d["scenario"]] = d
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"verdict file unreadable (half-written?): {path}: {exc}")
    return found


def check_history(history: Path, problems: list[str]) -> tuple[int, int]:
    """(rows, leftover temporary files); every problem found goes into `problems`."""
    import pandas as pd

    leftovers = [p for p in history.rglob(".*") if p.is_file()] if history.exists() else []
    for f in sorted(history.rglob("*.parquet")) if history.exists() else []:
        try:
            pd.read_parquet(f)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the finding
            problems.append(f"history file unreadable: {f}: {type(exc).__name__}: {exc}")
    try:
        rows = load_history(history)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"history store does not load: {type(exc).__name__}: {exc}")
        return 0, len(leftovers)
    for i, row in rows.iterrows():
        if not row.get("run_id") or not row.get("scenario") or row.get("verdict") not in VERDICTS:
            problems.append(f"history row {i} is not whole: {dict(row)}")
    export = history / "history.csv"
    if export.exists():
        with open(export, newline="") as f:
            lines = list(csv.reader(f))
        width = len(lines[0]) if lines else 0
        for n, line in enumerate(lines[1:], start=2):
            if len(line) != width:
                problems.append(f"history.csv line {n} has {len(line)} fields, the header {width} (half-written row)")
    return len(rows), len(leftovers)


def check_run_rows(history: Path, run_dir: Path, verdicts: dict[str, dict], complete: bool, problems: list[str]) -> None:
    """After a rebuild, the run's rows are its verdicts, and `complete` is the truth."""
    rows = load_history(history)
    mine = rows[rows["run_id"] == run_dir.name] if not rows.empty else rows
    got = {r["scenario"]: r for _, r in mine.iterrows()}
    if set(got) != set(verdicts):
        problems.append(f"history rows {sorted(got)} do not match the verdicts {sorted(verdicts)}")
    for s, r in got.items():
        if s in verdicts and r["verdict"] != verdicts[s]["verdict"]:
            problems.append(f"history row of {s} says {r['verdict']}, its verdict.json {verdicts[s]['verdict']}")
        if bool(r["complete"]) != complete:
            problems.append(
                f"history row of {s} says complete={r['complete']} for a run that is {'' if complete else 'in'}complete"
            )


def one_kill_run(i: int, target: str, sig_name: str, rng: random.Random, args, reports: Path, out: Path) -> dict:
    run_id = f"soak-kill-{args.seed}-{i}"
    mark = f"{run_id}-{os.getpid()}-{time.time_ns()}"
    sig = getattr(signal, sig_name)
    delay = round(rng.uniform(*(args.harness_window if target == "harness" else args.rank_window)), 2)
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        *args.ids,
        "--jobs",
        str(args.jobs),
        "--report-dir",
        str(reports),
        "--run-id",
        run_id,
        "--env",
        f"{MARK_ENV}={mark}",
    ]
    rec: dict = {"run": i, "run_id": run_id, "target": target, "signal": sig_name, "delay_s": delay, "load1": load1()}
    problems: list[str] = []
    log = open(out / f"{run_id}.log", "w")  # noqa: SIM115 - closed below
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=child_env(mark),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    watch = Watch(proc.pid, mark)
    sent = None
    while proc.poll() is None and time.monotonic() - start < RUN_LIMIT_S:
        stats = watch.scan()
        now = time.monotonic() - start
        if sent is None and now >= delay:
            if target == "harness":
                state = (stats.get(proc.pid) or ["?"])[0]
                if state not in ("Z", "X"):
                    if sig == signal.SIGINT:
                        os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C: the harness's whole group
                    else:
                        os.kill(proc.pid, sig)
                    sent = {
                        "at_s": round(now, 2),
                        "pid": proc.pid,
                        "live_ranks": len(watch.live_ranks(stats)),
                        "ended_before": len(verdict_files(reports / run_id)),
                    }
            else:
                live = watch.live_ranks(stats)
                if live:
                    ident = rng.choice(sorted(live))
                    os.kill(ident[0], sig)
                    sent = {"at_s": round(now, 2), "pid": ident[0], **watch.ranks[ident]}
                    threading.Thread(target=exit_status_of, args=(ident, sent), daemon=True).start()
        time.sleep(POLL_S)
    if proc.poll() is None:
        problems.append(f"the harness did not exit within {RUN_LIMIT_S}s")
        os.killpg(proc.pid, signal.SIGKILL)
    rc = proc.wait()
    log.close()
    rec.update(exit=rc, wall_s=round(time.monotonic() - start, 1), sent=sent, ranks_seen=len(watch.ranks))

    # (a) orphans: nothing of the run outlives the harness (a grace for the kernel to finish the SIGKILLs)
    deadline = time.monotonic() + ORPHAN_GRACE_S
    survivors = watch.survivors()
    while survivors and time.monotonic() < deadline:
        time.sleep(0.2)
        survivors = watch.survivors()
    rec["orphans"] = survivors
    if survivors:
        problems.append(f"{len(survivors)} process(es) outlived the run: {survivors}")
        _kill_leftovers(watch)

    # (c) as the harness left it: run.json, the verdicts, the report
    run_dir = reports / run_id
    claimed = run_meta_path(run_dir).exists() or scenarios_root(run_dir).is_dir()
    rec["claimed"] = claimed  # a directory made but not yet claimed (killed in between) holds no report
    meta: dict = {}
    if claimed:
        try:
            meta = json.loads(run_meta_path(run_dir).read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"run.json unreadable (half-written?): {exc}")
    elif sent is None or target != "harness":
        problems.append("the harness claimed no run directory")
    # else: stopped while it started (imports, planning): no run directory, so no report to claim anything
    planned = meta.get("scenarios") or list(args.ids)
    verdicts = read_verdicts(run_dir, problems)
    never = [s for s in planned if s not in verdicts] if claimed else []  # unclaimed: nothing planned on disk
    left_word = summary_word(run_dir)
    rec.update(
        ended=len(verdicts),
        never_ran=never,
        summary_left=left_word,
        verdicts={s: d["verdict"] for s, d in sorted(verdicts.items())},
    )
    landed = sent is not None
    if left_word == "OK" and never:
        problems.append(f"false success: summary.md says OK with {never} never ended")
    if rc == exit_codes.OK and never:
        problems.append(f"false success: exit 0 with {never} never ended")
    # A signal before `main` runs (Python's imports) ends the harness by that signal (a shell
    # reports SIGINT's as 130 too); from main's first line on, SIGINT and SIGTERM alike end
    # in exit 130, and once the run directory is claimed in a report of what ended
    stopped = target == "harness" and sig in (signal.SIGINT, signal.SIGTERM) and landed
    if stopped and rc != exit_codes.INTERRUPTED and not (rc == -sig and not claimed):
        problems.append(f"a harness given {sig_name} exited {rc}, not {exit_codes.INTERRUPTED}")
    if stopped and rc == exit_codes.INTERRUPTED and claimed and sum((meta.get("counts") or {}).values()) != len(verdicts):
        problems.append(
            f"the report left counts {meta.get('counts')} but {len(verdicts)} verdicts were written "
            "(the start-of-run report, not the interrupt report)"
        )
    if target == "rank" and landed:
        hit = next((d for s, d in verdicts.items() if s.replace("/", "__") == sent.get("scenario_dir")), None)
        rec["hit_verdict"] = hit["verdict"] if hit else None
        if hit is None:
            problems.append(f"no verdict for the scenario whose rank was killed ({sent.get('scenario_dir')})")
        elif hit["verdict"] == "pass":
            # A pass means the launcher saw every rank exit 0. SIGKILL cannot be survived;
            # SIGINT can be lost inside the rank (torch's import swallows a KeyboardInterrupt
            # at times, docs/RELIABILITY.md): then the rank ran to its end and exited 0, and
            # pass is the truth. Any other exit seen with a pass is a false success.
            status = sent.get("exit_status")
            if sig == signal.SIGINT and status in (0, None):
                rec["swallowed"] = True
            else:
                problems.append(
                    f"false success: {hit['scenario']} ended pass though its rank {sent.get('rank')} got {sig_name} "
                    f"(its wait status {status})"
                )
                if rc == exit_codes.OK:
                    problems.append("false success: exit 0 after a rank was killed")

    # (b) the history store as the harness left it, then (c) the rebuilt report and its rows
    history = reports / "history"
    nrows, temps = check_history(history, problems)
    if scenarios_root(run_dir).is_dir() or run_meta_path(run_dir).is_file():
        rebuilt = subprocess.run(
            [sys.executable, "-m", "harness", "report", str(run_dir)],
            cwd=ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        rec["report_exit"] = rebuilt.returncode
        if "Traceback" in rebuilt.stderr or rebuilt.returncode not in (
            exit_codes.OK,
            exit_codes.NOT_AS_EXPECTED,
            exit_codes.INCOMPLETE,
        ):
            problems.append(f"`harness report` of the run exited {rebuilt.returncode}: {rebuilt.stderr.strip()[-400:]}")
        elif never and rebuilt.returncode == exit_codes.OK:
            problems.append(f"false success: the rebuilt report exits 0 with {never} never ended")
        rec["summary_rebuilt"] = summary_word(run_dir)
        if rec["summary_rebuilt"] == "OK" and never:
            problems.append("false success: the rebuilt summary.md says OK for an incomplete run")
        if rebuilt.returncode in (exit_codes.OK, exit_codes.NOT_AS_EXPECTED, exit_codes.INCOMPLETE):
            check_run_rows(history, run_dir, verdicts, complete=not never, problems=problems)
        nrows, temps = check_history(history, problems)
    rec.update(history_rows=nrows, history_temp_files=temps, problems=problems)
    return rec


def cmd_kill(args) -> int:
    out = Path(args.out)
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    chosen = [k for k in KINDS if k[1] in args.signals]
    kinds = [chosen[i % len(chosen)] for i in range(args.runs)]
    rng.shuffle(kinds)
    results = []
    print(
        f"{'run':>3} {'target':>7} {'signal':>7} {'delay':>6} {'sent_at':>7} {'exit':>4} {'wall_s':>6} {'load1':>5}  "
        f"{'ended/never':>11} {'left':>10} {'rebuilt':>10} {'hit':>6}  problems",
        flush=True,
    )
    for i, (target, sig_name) in enumerate(kinds, start=1):
        rec = one_kill_run(i, target, sig_name, rng, args, reports, out)
        results.append(rec)
        sent = rec["sent"]
        at = f"{sent['at_s']}" if sent else "missed"
        print(
            f"{i:>3} {target:>7} {sig_name:>7} {rec['delay_s']:>6} {at:>7} {rec['exit']:>4} {rec['wall_s']:>6} {rec['load1']:>5}  "
            f"{len(rec['verdicts']):>5}/{len(rec['never_ran']):<5} {str(rec['summary_left']):>10} {str(rec.get('summary_rebuilt')):>10} "
            f"{str(rec.get('hit_verdict', '')) + ('(lost)' if rec.get('swallowed') else ''):>6}  {'; '.join(rec['problems']) or '-'}",
            flush=True,
        )
        _write_json(
            out / "kill.json",
            {"kind": "kill", "machine": machine(), "seed": args.seed, "ids": args.ids, "jobs": args.jobs, "runs": results},
        )
    print(
        f"\n{'target':>7} {'signal':>7} {'runs':>4} {'landed':>6} {'swallowed':>9} {'orphans':>7} {'bad_rows':>8} {'false_ok':>8} {'other':>5}"
    )
    totals: Counter = Counter()
    for target, sig_name in chosen:
        mine = [r for r in results if r["target"] == target and r["signal"] == sig_name]
        c = Counter()
        for r in mine:
            c["runs"] += 1
            c["landed"] += r["sent"] is not None
            c["swallowed"] += bool(r.get("swallowed"))
            c["orphans"] += len(r["orphans"])
            for p in r["problems"]:
                key = (
                    "false_ok"
                    if p.startswith("false success")
                    else "bad_rows"
                    if "history" in p
                    else "orphans_p"
                    if "outlived" in p
                    else "other"
                )
                c[key] += 1
        totals.update(c)
        print(
            f"{target:>7} {sig_name:>7} {c['runs']:>4} {c['landed']:>6} {c['swallowed']:>9} {c['orphans']:>7} {c['bad_rows']:>8} {c['false_ok']:>8} {c['other']:>5}"
        )
    bad = [(r["run_id"], p) for r in results for p in r["problems"]]
    print(
        f"soak kill: {len(results)} runs, {totals['landed']} signals landed ({totals['swallowed']} SIGINTs lost inside a rank, "
        f"which then ran to its end), {totals['orphans']} orphans, "
        f"{totals['bad_rows']} history problems, {totals['false_ok']} false successes, {totals['other']} other problems; "
        f"summary: {out / 'kill.json'}"
    )
    for run_id, p in bad:
        print(f"VIOLATION {run_id}: {p}")
    return 1 if bad else 0


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def window(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    return float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="docs/RELIABILITY.md has the measured figures and how they were taken.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gates", help="N consecutive PR gates; count exit codes, verdicts and false alarms")
    g.add_argument("--count", type=int, default=20)
    g.add_argument("--jobs", type=int, default=2)
    g.add_argument("--gate", default="pr")
    g.add_argument("--out", help="where the run directories, logs and gates.json go (default: reports/soak-gates-<time>)")
    k = sub.add_parser(
        "kill",
        help="runs killed (SIGKILL / SIGINT / SIGTERM, harness or a rank) at random; count orphans, bad rows, false successes",
    )
    k.add_argument("--runs", type=int, default=32)
    k.add_argument("--seed", type=int, default=1)
    k.add_argument("--ids", nargs="+", default=KILL_IDS, help=f"the scenarios of each run (default: {' '.join(KILL_IDS)})")
    k.add_argument("--jobs", type=int, default=2)
    k.add_argument(
        "--signals",
        nargs="+",
        choices=SIGNALS,
        default=list(SIGNALS),
        help="the signals sent, in equal numbers (default: all three)",
    )
    # with the rank pool a run takes ~10 s on an idle 2-core machine (20 s before it)
    k.add_argument(
        "--harness-window",
        type=window,
        default=(0.5, 9.0),
        metavar="LO,HI",
        help="the harness gets its signal this many seconds after its start, uniform (default 0.5,9)",
    )
    k.add_argument(
        "--rank-window",
        type=window,
        default=(1.0, 6.0),
        metavar="LO,HI",
        help="a rank alive this many seconds after the start gets the signal (default 1,6)",
    )
    k.add_argument("--out", help="where the run directories, logs and kill.json go (default: reports/soak-kill-<time>)")
    args = p.parse_args(argv)
    # a directory per soak: run ids repeat from one soak to the next, and a run refuses a directory in use
    args.out = args.out or str(ROOT / "reports" / f"soak-{args.command}-{time.strftime('%Y%m%d-%H%M%S')}")
    return cmd_gates(args) if args.command == "gates" else cmd_kill(args)


if __name__ == "__main__":
    sys.exit(main())
