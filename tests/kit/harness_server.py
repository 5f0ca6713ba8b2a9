"""`harness` commands forked from a pre-imported process, for the harness's own end-to-end tests.

    result = forked_harness(argv, env, timeout, what)   # a CompletedProcess, or None: start it fresh

`make test` starts a few hundred harness processes. Each used to pay about 13 CPU-seconds
before its first rank ran: the harness process imported torch, pydantic and matplotlib,
and its rank pool's zygote imported torch, Dynamo, inductor and the reference engine
again; on two cores that fixed cost was most of the tier's wall time.

Here one server per test process (per xdist worker), started at its first use, is a
rank-pool zygote (harness/engines/launch/zygote.py, the harness's own) that has imported all of
that once (SERVER_PRELOAD). Each command is forked from it as `tests.kit.harness_child`,
which forks its own rank-pool zygote from itself before it starts any thread and then runs
`python -m harness`'s main. A command is what a fresh `python -m harness ARGS` would be:
its own environment, working directory, process group, stdout and stderr; what it does
not get is a fresh import, so the server only serves a command, and a command's zygote only
its ranks, when the environment they would have imported under matches the server's in
every variable read at import time (IMPORT_TIME below; otherwise the command, or its ranks,
start fresh as before).

What stays a fresh `python -m harness`: start_harness (the tests that signal, interrupt or
kill the harness process), the tests that start their own commands, and every command with
HARNESS_TEST_FORK=0 (for a run of the suite as it was).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.engines import compile_cache
from harness.engines.launch.pool import Zygote, ZygoteUnavailable
from harness.engines.reference import COMPILE_IMPORTS, RANK_IMPORTS

SWITCH = "HARNESS_TEST_FORK"
# What a harness command and the reference engine's ranks import before their first line
# of work (measured with -X importtime); anything else they import themselves.
SERVER_PRELOAD = (
    *RANK_IMPORTS,
    *COMPILE_IMPORTS,
    "harness.cli",
    "harness.run.session",
    "harness.run.runner",
    "harness.run.golden",
    "harness.run.report",
    "harness.run.report.html",
    "harness.run.report.plots",
    "harness.inputs.scenarios.loading",
    "harness.engines.reference",
    "harness.inputs.zoo",
    "tests.kit.harness_server",
    "tests.kit.warm_report",  # last: draws the report's figures once (its docstring says why)
)
# Variables a module may read while it is imported (torch's and inductor's configs, the
# OpenMP and BLAS runtimes, matplotlib) or the interpreter at its start (PYTHONPATH,
# PYTHONHASHSEED, ...); READ_WHEN_USED are read only when used, so a run may set its own:
# inductor's cache (torch/_inductor/runtime/cache_dir_utils.py) and breakpoint()'s hook
# (which an in-process ray.init sets in the test process).
IMPORT_TIME = ("TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "OPENBLAS", "CUDA", "NCCL", "MPL", "PYTHON")
READ_WHEN_USED = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "PYTHONBREAKPOINT"})
ROOT = Path(__file__).resolve().parents[2]


def _with_checkout(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))}


# The test process's environment as collection found it (before any test set its own):
# what the harness commands import under, and with the reference engine's launch
# environment on top (harness/engines/reference: the same for every run), its ranks.
COMMAND_ENV = _with_checkout(dict(os.environ))
RANK_ENV = {
    **COMMAND_ENV,
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
    **compile_cache.inductor_env(compile_cache.installed_torch_version()),
}


# pandas imports pyarrow, whose jemalloc starts a background thread at load time; a process
# with a thread the fork would lose must not fork (the zygote refuses), so the server's
# pyarrow runs without one.
SERVER_ONLY_ENV = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}


def _import_time(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in READ_WHEN_USED}


def import_time_differences(env: dict[str, str], reference: dict[str, str]) -> dict[str, tuple]:
    """{variable: (in env, in reference)} for each import-time variable that differs."""
    mine, theirs = _import_time(env), _import_time(reference)
    return {k: (mine.get(k), theirs.get(k)) for k in sorted(mine.keys() | theirs.keys()) if mine.get(k) != theirs.get(k)}


def imports_as_command(env: dict[str, str]) -> bool:
    """In the test process: would a harness command with `env` have imported what the server did?"""
    return not import_time_differences(env, COMMAND_ENV)


# In the server and the commands forked from it: the environment the server imported under.
_IMPORTED_UNDER = _import_time(dict(os.environ))


def imports_as_rank(env: dict[str, str]) -> bool:
    """In a command forked from the server: would a rank with `env` (less the per-rank
    variables) have imported what the server did? (pool.fork_zygote_here's `accepts`)"""
    return _import_time(env) == _IMPORTED_UNDER


_server: Zygote | None = None
_refused = False


def _started() -> Zygote | None:
    global _server, _refused
    if _server is None and not _refused:
        try:
            _server = Zygote(sys.executable, SERVER_PRELOAD, {**RANK_ENV, **SERVER_ONLY_ENV})
        except ZygoteUnavailable as exc:
            _refused = True  # said once; every command then starts fresh
            print(f"tests/kit: harness commands start fresh, the server refused: {exc}", file=sys.stderr)
        else:
            atexit.register(_server.close)
    return _server


def forked_harness(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess | None:
    """`argv` (`python -m harness ARGS`) to its end as a fork of the server, its output
    captured as text; None where the server does not serve it (start it fresh instead).
    Past `timeout` seconds its process group is killed and TimeoutExpired raised."""
    if env.get(SWITCH, "1") == "0" or argv[1:3] != ["-m", "harness"] or not imports_as_command(env):
        return None
    server = _started()
    if server is None:
        return None
    with tempfile.TemporaryDirectory(prefix="harness-cmd-") as out:
        stdout, stderr = Path(out, "stdout"), Path(out, "stderr")
        try:
            command = server.spawn(argv, ["tests.kit.harness_child", *argv[3:]], env, stdout, pgid=0, cwd=cwd, stderr_log=stderr)
        except ZygoteUnavailable:
            return None
        try:
            code = command.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(command.pid)
            command.wait()
            raise subprocess.TimeoutExpired(
                argv, timeout, output=stdout.read_text(errors="replace"), stderr=stderr.read_text(errors="replace")
            ) from None
        return subprocess.CompletedProcess(argv, code, stdout.read_text(errors="replace"), stderr.read_text(errors="replace"))


def _kill_group(pid: int) -> None:
    """The command and what it started in its group (its rank zygote dies with its pipe)."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except ProcessLookupError:
            pass
