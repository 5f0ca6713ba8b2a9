"""Processes a test started, or that a run it started started: alive or not, and
whether any of a run's processes outlived it.

Every test that starts ranks ends by checking that nothing of its run is left
behind. A run's processes are found by what they carry: the run directory appears
in every rank's command line (the reference engine's brief path) or in its
environment (the error-file path the launcher gives each rank, inherited by every
process an engine starts itself, as vLLM's workers are). `survivors` looks at both.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _state(pid: int | str) -> str:
    """The one-letter state of /proc/<pid>/stat (after the command name, which may hold ')')."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie has finished (only its exit status is left)."""
    try:
        return _state(pid) not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def survivors(run_dir: Path) -> list[str]:
    """Live processes of a run ("pid: command line"): every process, but this one,
    whose command line, environment or stdout mentions `run_dir`. (A rank forked from
    the rank pool has the zygote's environment in /proc; its stdout is its log.)"""
    marker = str(run_dir).encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            stdout = os.readlink(f"/proc/{pid}/fd/1").encode() if Path(f"/proc/{pid}/fd/1").exists() else b""
            state = _state(pid)
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if (marker in cmdline or marker in environ or marker in stdout) and state not in ("Z", "X"):
            command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"{pid}: {command}")
    return found


def pids_in(pid_dir: Path, prefix: str = "") -> list[int]:
    """The pids the launcher tests' rank programs (tests/ranks/) wrote into `pid_dir`."""
    return [int(p.read_text()) for p in Path(pid_dir).glob(f"{prefix}*.pid")]


def ranks_ready(pid_dir: Path, count: int) -> bool:
    """At least `count` ranks of tests/ranks/ have reached their collective (ready files)."""
    return len(list(Path(pid_dir).glob("ready*"))) >= count


def assert_no_survivors(pid_dir: Path, world_size: int) -> None:
    """Every rank of tests/ranks/ and the grandchild each spawned have ended."""
    ranks, grands = pids_in(pid_dir, "rank"), pids_in(pid_dir, "grand")
    assert len(ranks) >= world_size and len(grands) >= world_size, sorted(os.listdir(pid_dir))
    left = [pid for pid in ranks + grands if alive(pid)]
    assert not left, f"processes survived the run: {left}"


def sigint_as_from_a_terminal() -> None:
    """A Popen preexec_fn: SIGINT back to its default disposition in the child, as a
    terminal's Ctrl-C finds it. A shell without job control starts background commands
    with SIGINT ignored, and an ignored signal stays ignored across fork and exec: a test
    run started that way (`.ci/run &`, some CI runners) would spawn a harness that cannot
    see Ctrl-C at all; the tests check the harness, not how the test run was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
