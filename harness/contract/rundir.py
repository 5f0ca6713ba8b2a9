"""The directory of one `harness run`: its layout, and a unique name claimed by exactly one run.

The layout (the one place that spells it; reports/README.md describes it for readers):

  <run_dir>/run.json                          the run's plan and metadata
  <run_dir>/scenarios/<name>/                 one per scenario; <name> is its id, "/" -> "__"
                             spec.json        the RunBrief the ranks read
                             verdict.json     the verdict (written by the runner as it goes)
                             outputs/         what the engine's ranks wrote
                             logs/            the rank logs

Two runs started in the same second (or two given the same --run-id) must never
write into one directory: their verdicts would mix and one report would speak for
both. A run claims its directory by creating run.json exclusively (O_EXCL), which
only one process can win; a directory that already holds anything is refused.
The planned scenario list goes into run.json before the first scenario starts, so
a report of a run killed half-way can say which scenarios never ran.

run.json, verdict.json and the report files are written whole or not at all
(`write_json`, `write_files`: temporary files, then renames), so a harness killed, or a
disk that fills up, while writing them leaves the old files or the new ones, never half
of one that no report could read.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

RUN_META = "run.json"
SCENARIOS = "scenarios"
BRIEF = "spec.json"
VERDICT = "verdict.json"
OUTPUTS = "outputs"
LOGS = "logs"

# default ids carry a random part: a second clash is all but impossible
CLAIM_ATTEMPTS = 5
# One directory name under the report directory: never `/`, `..` or a leading `.`, that
# would put a run elsewhere or hide it (checked with fullmatch: `$` lets a final newline in)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def scenario_dir_name(scenario_id: str) -> str:
    """The directory name of a scenario: its id with "/" (suite/case) made "__"."""
    return scenario_id.replace("/", "__")


def scenarios_root(run_dir: Path) -> Path:
    return Path(run_dir) / SCENARIOS


def scenario_dir(run_dir: Path, scenario_id: str) -> Path:
    """Where one scenario of a run keeps its brief (spec.json), verdict, outputs and logs."""
    return scenarios_root(run_dir) / scenario_dir_name(scenario_id)


def verdict_path(run_dir: Path, scenario_id: str) -> Path:
    return scenario_dir(run_dir, scenario_id) / VERDICT


def brief_path(run_dir: Path, scenario_id: str) -> Path:
    return scenario_dir(run_dir, scenario_id) / BRIEF


def outputs_dir(run_dir: Path, scenario_id: str) -> Path:
    return scenario_dir(run_dir, scenario_id) / OUTPUTS


def logs_dir(run_dir: Path, scenario_id: str) -> Path:
    return scenario_dir(run_dir, scenario_id) / LOGS


def run_meta_path(run_dir: Path) -> Path:
    return Path(run_dir) / RUN_META


def verdict_files(run_dir: Path) -> list[Path]:
    """The verdict files of a run directory, in name order."""
    return sorted(scenarios_root(run_dir).glob(f"*/{VERDICT}"))


class RunDirTaken(Exception):
    """The run directory belongs to another run (exit code USAGE)."""


class ResultsNotWritten(Exception):
    """The harness cannot write where its results go (exit code RESULTS_NOT_WRITTEN)."""


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` cannot name a run directory, or None."""
    if RUN_ID.fullmatch(run_id):
        return None
    return (
        f"{run_id!r} is not a run id: use letters, digits, '.', '_' and '-', starting with a letter or digit "
        "(it names one directory under the report directory)"
    )


def new_run_id(suffix: str = "", prefix: str = "") -> str:
    """Time (to the second, so ids sort by start) plus a random part that keeps two
    runs started in the same second apart, then e.g. the gate and shard."""
    return f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}{suffix}"


def claim_new_run_dir(report_dir: Path, meta: Mapping[str, object], suffix: str = "") -> Path:
    """A fresh directory under report_dir with a new run id, claimed for this run."""
    for attempt in range(CLAIM_ATTEMPTS):
        try:
            return claim_run_dir(report_dir, new_run_id(suffix), meta)
        except RunDirTaken:
            if attempt == CLAIM_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def claim_run_dir(report_dir: Path, run_id: str, meta: Mapping[str, object]) -> Path:
    """Create report_dir/run_id for this run, with `meta` (the planned scenarios) as
    its run.json, or raise RunDirTaken if any run (or anything else) is already there."""
    problem = run_id_problem(run_id)
    # the CLI and the pytest plugin check theirs first: a caller's bug
    if problem:
        raise ValueError(problem)
    run_dir = Path(report_dir) / run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        taken = any(run_dir.iterdir())
    except OSError as exc:
        raise ResultsNotWritten(
            f"cannot create the run directory {run_dir}: {_why(exc)}; "
            "make --report-dir (or $HARNESS_REPORTS_DIR) a writable directory"
        ) from None
    if not taken:
        # the claim is a hard link of a whole run.json: exclusive as O_EXCL is (link() fails
        # when the name exists), and never an empty or half-written run.json if killed
        try:
            tmp = _write_temp(run_meta_path(run_dir), json_text({**meta, "run_id": run_id}))
        except OSError as exc:
            raise ResultsNotWritten(
                f"cannot write in the run directory {run_dir}: {_why(exc)}; make --report-dir (or $HARNESS_REPORTS_DIR) writable"
            ) from None
        try:
            os.link(tmp, run_meta_path(run_dir))
        except FileExistsError:
            taken = True
        finally:
            os.unlink(tmp)
    if taken:
        raise RunDirTaken(
            f"the run directory {run_dir} is already in use (another run's results, or other files); "
            "give another --run-id, or leave it out for a fresh one; remove that directory only if its run is of no use"
        )
    scenarios_root(run_dir).mkdir()
    return run_dir


def write_json(path: Path, data: object) -> None:
    """Write `data` as JSON to `path` whole or not at all: a temporary file beside it,
    then a rename over it. A reader, or a harness killed half-way, sees the old file or
    the new one."""
    write_files({Path(path): json_text(data)})


def json_text(data: object) -> str:
    return json.dumps(data, indent=1)


def write_files(files: dict[Path, str | bytes]) -> None:
    """Write several files of a run directory all or none, in the order given: each
    goes to a temporary file beside it, and only once every one is whole are they
    renamed over the old ones. A disk that fills up half-way (or a harness killed)
    leaves the previous set of files as it was: never a cut-off report.html beside a
    summary.md that speaks for a run it could not finish writing."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, text in files.items():
            staged.append((_write_temp(Path(path), text), Path(path)))
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _write_temp(path: Path, content: str | bytes) -> str:
    """`content` in a new temporary file beside `path` (named .<name>.<random>, which no
    reader of a run directory looks at); its name."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        if isinstance(content, bytes):
            with os.fdopen(fd, "wb") as binary:
                binary.write(content)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(content)
        # mkstemp makes it private; run directories are shared
        os.chmod(tmp, 0o644)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def check_writable(directory: Path, what: str, hint: str) -> None:
    """Fail before any scenario runs when `directory` cannot take files: an hour of
    scenarios whose results cannot be stored is an hour lost."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ResultsNotWritten(f"cannot write the {what} {directory}: {_why(exc)}; {hint}") from None


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
