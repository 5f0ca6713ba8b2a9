"""The history store: one row per (run, scenario), kept across runs, mergeable.

Layout of a history directory (default reports/history/, see `history_dir`):

  runs/<run-id>.parquet   the rows of one run (rewritten when its report is rebuilt)
  history.csv             every row, an export for spreadsheets (rewritten on record)

One Parquet file per run means concurrent runs never write the same file, and
merging the histories of several machines is copying their directories together:
`load_history` reads every *.parquet below the directory (subdirectories too, e.g.
history/machine-b/runs/...), and keeps one row per (run_id, scenario), the most
recently recorded (a file that cannot be read, such as a half-finished copy, is
skipped and named: the report says its comparison is partial). A merged run (`harness report --merge`) names the shard runs it
replaces in `merged_from`; their rows are dropped on load, so a nightly counts once.

Columns: run_id, gate, started (UTC), recorded (UTC), harness_commit, torch, python,
engine, engine_versions, engine_env (the `@vllm-0.28.0` label of a --engine-env run), faults, merged_from, complete, scenario, verdict, as_expected,
reason, declared_unsupported (an `unsupported` its scenario file declares for this engine
version), duration_s, and one `metric.<check>.<name>` column per numeric check metric.
`complete` is false for the rows of a run whose planned scenarios did not all end
(killed, interrupted): they are kept, but such a run is never "the previous run of
its gate" that later runs compare with.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow

from harness.contract.expectations import declares_unsupported
from harness.contract.jsonfile import JSONObject, read_json
from harness.contract.rundir import brief_path, write_files
from harness.contract.settings.variables import HISTORY_DIR
from harness.contract.verdict import VERDICTS, Verdict
from harness.inputs.scenarios.scenario import split_id

METRIC_PREFIX = "metric."
KEY = ["run_id", "scenario"]


def history_dir(report_dir: Path, override: str | Path | None = None) -> Path:
    """Where the history lives: an explicit path, else $HARNESS_HISTORY_DIR, else <report-dir>/history."""
    chosen = override or HISTORY_DIR.raw()
    return Path(chosen) if chosen else Path(report_dir) / "history"


def gate_of(meta: JSONObject) -> str:
    """The gate a run belongs to; runs of hand-picked scenarios form their own group."""
    return meta.get("gate") or "adhoc"


def metric_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith(METRIC_PREFIX)]


def verdict_metrics(v: Verdict) -> dict[str, float]:
    """Every numeric metric of every check, as `metric.<check>.<name>`."""
    found = {}
    for check in v.checks:
        for name, value in (check.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[f"{METRIC_PREFIX}{check['name']}.{name}"] = float(value)
    return found


def _engine_of(run_dir: Path, v: Verdict) -> str:
    if v.versions.get("engine"):
        engine: str = v.versions["engine"]
        return engine
    brief = brief_path(run_dir, v.scenario)
    try:
        named: str = read_json(brief).get("engine", "")
        return named
    except (OSError, ValueError):
        return ""


def run_rows(run_dir: Path, meta: JSONObject, verdicts: list[Verdict], complete: bool = True) -> pd.DataFrame:
    """The history rows of one run (`complete`: every planned scenario ended)."""
    versions = meta.get("versions") or {}
    started = pd.Timestamp(meta["started"], unit="s", tz="UTC")
    rows = []
    for v in verdicts:
        rows.append(
            {
                "run_id": meta["run_id"],
                "gate": gate_of(meta),
                "started": started,
                "harness_commit": versions.get("harness_commit", ""),
                "torch": v.versions.get("torch") or versions.get("torch", ""),
                "python": versions.get("python", ""),
                "engine": _engine_of(run_dir, v),
                "engine_versions": json.dumps(v.versions, sort_keys=True) if v.versions else "",
                # `vllm-0.28.0` of a --engine-env run, else ""
                "engine_env": split_id(v.scenario)[1],
                "faults": ",".join(meta.get("faults") or []),
                "merged_from": ",".join(meta.get("merged_from") or []),
                "complete": complete,
                "scenario": v.scenario,
                "verdict": v.verdict,
                "as_expected": v.as_expected,
                "reason": v.reason.splitlines()[0] if v.reason else "",
                "declared_unsupported": declares_unsupported(v),
                "duration_s": float(v.duration_s),
                **verdict_metrics(v),
            }
        )
    return pd.DataFrame(rows)


def record(history: Path, rows: pd.DataFrame) -> None:
    """Store one run's rows (replacing what an earlier build of its report stored) and
    refresh the CSV export."""
    if rows.empty:
        return
    rows = rows.assign(recorded=pd.Timestamp.now(tz="UTC"))
    (run_id,) = rows["run_id"].unique()
    runs = Path(history) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    write_files({runs / f"{run_id}.parquet": rows.to_parquet(index=False)})  # whole or not at all, as a run's files
    write_files({Path(history) / "history.csv": load_history(history).to_csv(index=False)})


def load_history(history: Path) -> pd.DataFrame:
    """Every readable row below `history` (read_history, its unreadable files left out)."""
    return read_history(history)[0]


def read_history(history: Path) -> tuple[pd.DataFrame, list[str]]:
    """Every row below `history`, one per (run_id, scenario), shard runs that a merged
    run replaces left out (empty, no columns, when there is no history yet); and one line
    per file that could not be read, which is skipped: histories are merged by copying
    directories, so a half-copied file is a normal event and must not stop every run."""
    files = sorted(Path(history).glob("**/*.parquet")) if Path(history).exists() else []
    frames, unreadable = [], []
    for f in files:
        frame, problem = _read_run_file(f)
        if problem:
            unreadable.append(f"{f} ({problem})")
        elif not frame.empty:
            frames.append(frame)
    if not frames:
        return pd.DataFrame(), unreadable
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.sort_values("recorded").drop_duplicates(KEY, keep="last")
    replaced = {rid for merged in rows["merged_from"].dropna() for rid in merged.split(",") if rid}
    rows = rows[~rows["run_id"].isin(replaced)]
    return rows.sort_values(["started", "run_id", "scenario"]).reset_index(drop=True), unreadable


REQUIRED = [*KEY, "gate", "started", "recorded", "merged_from", "verdict"]
TIMESTAMPS = ("started", "recorded")
# Every column the harness reads back, by the kind run_rows writes (metric.* are numbers too).
# A file whose column holds another kind (a string in a metric, "yes" in `complete`) is set
# aside and named, as a cut-off one: read, it would stop every later run and report, or be
# taken for what it is not.
TEXTS = (
    "run_id",
    "gate",
    "harness_commit",
    "torch",
    "python",
    "engine",
    "engine_versions",
    "engine_env",
    "faults",
    "merged_from",
    "scenario",
    "verdict",
    "reason",
)
FLAGS = ("complete", "as_expected", "declared_unsupported")
NUMBERS = ("duration_s",)


def _read_run_file(path: Path) -> tuple[pd.DataFrame, str]:
    """One run's rows, or why they cannot be used (cut off, not Parquet, not a history file)."""
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, pyarrow.ArrowException) as exc:  # ArrowInvalid is a ValueError
        return pd.DataFrame(), str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing and not frame.empty:
        return pd.DataFrame(), f"not a history file: no column {', '.join(missing)}"
    wrong = schema_problems(frame)
    if wrong:
        return pd.DataFrame(), f"not the history's schema: {'; '.join(wrong)}"
    empty = [c for c in frame.columns if (c in NUMBERS or c.startswith(METRIC_PREFIX)) and frame[c].dtype == object]
    return frame.astype({c: float for c in empty}), ""  # a metric no row had: numbers, not objects


def schema_problems(frame: pd.DataFrame) -> list[str]:
    """Each column of `frame` the harness reads whose values are not of its kind."""
    if frame.empty:
        return []
    problems = []
    for c in frame.columns:
        column = frame[c]
        if c in TIMESTAMPS:
            if not pd.api.types.is_datetime64_any_dtype(column):  # compared with the run's own start
                problems.append(f"{c} is {column.dtype}, not a timestamp")
        elif c in FLAGS:
            if not pd.api.types.is_bool_dtype(column):
                problems.append(f"{c} holds {_example(column, lambda v: isinstance(v, bool))}, not true/false")
        elif c in NUMBERS or c.startswith(METRIC_PREFIX):
            if not (pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)) and not column.isna().all():
                problems.append(f"{c} holds {_example(column, _is_number)}, not a number")
        elif c in TEXTS:
            if not all(isinstance(v, str) for v in column.dropna()):
                problems.append(f"{c} holds {_example(column, lambda v: isinstance(v, str))}, not text")
            elif c == "verdict" and not column.isin(VERDICTS).all():
                problems.append(f"verdict holds {_example(column, lambda v: v in VERDICTS)}, not a verdict")
    return problems


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _example(column: pd.Series, fits: Callable[[object], bool]) -> str:
    """The first value of `column` that does not fit, as a reader would recognise it."""
    for v in column.dropna():
        if not fits(v):
            return repr(v)[:40]
    return str(column.dtype)


def earlier_rows(history: pd.DataFrame, meta: JSONObject) -> pd.DataFrame:
    """The rows of earlier runs of the same gate as `meta`'s run (never its own, nor
    the shards it was merged from)."""
    if history.empty:
        return history
    started = pd.Timestamp(meta["started"], unit="s", tz="UTC")
    own = {meta["run_id"], *(meta.get("merged_from") or [])}
    keep = (history["gate"] == gate_of(meta)) & (history["started"] < started) & ~history["run_id"].isin(own)
    # rows recorded before the column existed count as complete
    if "complete" in history.columns:
        keep &= history["complete"].ne(False)
    return history[keep]
