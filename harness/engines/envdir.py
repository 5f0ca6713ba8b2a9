"""A directory built once and shared: engine environments (harness/inputs/engine_envs.py) and the
torch environments they stand on (harness/engines/vllm/releases.py).

Built under a lock file (two harnesses asking at once build once; the second waits),
complete only once its marker file is written, last. A build that fails leaves nothing
but its log: a half-built directory would be taken for an environment, and a failed
release's files would stay on the disk.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

MARKER = ".harness-env.json"  # written last: the directory is complete


class BuildFailed(RuntimeError):
    """The build raised; what it wrote is removed, its log kept (`log`)."""

    def __init__(self, what: str, cause: BaseException, log: Path):
        self.log = log
        super().__init__(f"installing {what} failed: {cause}; nothing of it is kept but its log: {log}")


# the lines of an install worth showing in a log: its own steps, and pip's packages and sizes
_SHOWN = ("install:", "Collecting ", "Downloading ", "Installing collected", "Successfully installed", "ERROR", "vllm ")


def stream_command(cmd: list[str], env: dict, say) -> int:
    """Run an install command, saying its steps and pip's downloads (package, size) as they
    come, each with the time so far: minutes of silence read as a hung job. Returns its exit
    code; on failure the tail of everything it printed is said too."""
    started = time.monotonic()
    tail: list[str] = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-30:]
            if line.lstrip().startswith(_SHOWN):
                minutes, seconds = divmod(int(time.monotonic() - started), 60)
                say(f"[{minutes}:{seconds:02d}] {line.strip()}")
    if proc.returncode != 0:
        for line in tail:
            say(f"  | {line}")
    return proc.returncode


def is_built(directory: Path) -> bool:
    return (directory / MARKER).exists()


def unmark(directory: Path) -> None:
    """`directory` no longer counts as built: the next build_once builds it again."""
    (directory / MARKER).unlink(missing_ok=True)


def log_of(directory: Path) -> Path:
    return directory.parent / f"{directory.name}.install.log"


def build_once(directory: Path, what: str, build: Callable[[Path, object], None], say=print, **record) -> Path:
    """`directory`, built first by `build(directory, log)` unless it is complete already."""
    if is_built(directory):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    log = log_of(directory)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"harness: waiting for another harness installing {what} into {directory} ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(directory):
            return directory
        shutil.rmtree(directory, ignore_errors=True)  # what an interrupted build left
        say(f"harness: installing {what} into {directory} (once; this takes minutes; log: {log})")
        start = time.monotonic()
        try:
            with open(log, "w") as out:
                build(directory, out)
        except Exception as exc:  # noqa: BLE001 - any failure: remove what it wrote, keep the log
            shutil.rmtree(directory, ignore_errors=True)
            raise BuildFailed(what, exc, log) from exc
        seconds = round(time.monotonic() - start, 1)
        (directory / MARKER).write_text(
            json.dumps({**record, "installed": time.time(), "seconds": seconds, "bytes": disk_usage(directory)}, indent=1)
        )
        say(f"harness: installed {what} in {seconds:.0f}s")
    return directory


def disk_usage(directory: Path) -> int:
    """Bytes under `directory`, each file once (hard links), links not followed."""
    seen, total = set(), 0
    for path in directory.rglob("*"):
        try:
            st = path.lstat()
        except OSError:
            continue
        if path.is_symlink() or not path.is_file() or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_size
    return total
