"""The rank pool: ranks forked from a zygote that has already imported the engine.

A rank started afresh spends its first seconds importing torch, Dynamo and inductor, in
every scenario and on every rank (docs/BENCHMARKS.md has the times: "start" and the
imports inside "load" and "warmup"). An engine that names those modules in its launch
plan (`LaunchPlan.preload`) gets its ranks from a zygote (zygote.py): one process per
(python, preload, environment) that imported them once and forks a rank per request.
The zygote stays up for the harness process's lifetime (beyond MAX_ZYGOTES of them, the
least recently used one that runs no rank is closed), so the second scenario on the same engine and
environment starts its ranks in milliseconds.

Where the pool does not serve, ranks start as before, each its own fresh process:
  * HARNESS_RANK_POOL=0;
  * the engine names no preload modules (vLLM: it starts its own processes);
  * ranks on other nodes (behind an exec prefix);
  * a command that is not `PYTHON -m MODULE ARG...`;
  * the zygote refused to serve: its imports failed, or left a thread or a CUDA context
    behind (said once on stderr).

A forked rank is handed to the launcher as a `ForkedRank`, which answers what the
launcher asks of a subprocess.Popen (pid, poll, wait, kill, and peek_exit without
reaping); the zygote reports its exit and reaps it when the launcher is done with it.
Standard library only, like the rest of the launcher.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.contract.launchplan import DEVICE_SLOTS_ENV
from harness.contract.settings.variables import RANK_POOL
from harness.engines.launch.rankside import ERROR_FILE_ENV, HEARTBEAT_FILE_ENV, LAUNCHER_PID_ENV

OFF_ENV = RANK_POOL.name
MAX_ZYGOTES = 4
_ZYGOTE_SCRIPT = Path(__file__).with_name("zygote.py")
# What differs between the ranks of one run and between runs of one engine, and is read
# only once a rank runs (never at import): the zygote's environment is the rank's
# without these, so runs of every size share one zygote. PYTEST_CURRENT_TEST: pytest names
# the running test in it, so a harness run inside a test suite would otherwise get a
# zygote per test.
PER_RANK_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        ERROR_FILE_ENV,
        HEARTBEAT_FILE_ENV,
        LAUNCHER_PID_ENV,
        DEVICE_SLOTS_ENV,
        "PYTEST_CURRENT_TEST",
    }
)


class ZygoteUnavailable(RuntimeError):
    """The zygote could not start or refused to serve; ranks start fresh instead."""


class ForkedRank:
    """A rank forked by a zygote: the part of subprocess.Popen the launcher uses."""

    # no control channel: signals reach it directly
    stdin = None

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None
        self._exit: tuple[int | None, str | None] | None = None
        self._exited = threading.Event()
        self._reaped = False
        # Set when the rank died because the zygote did: the harness's own helper failed,
        # not the engine (the runner makes that an `error` verdict, never a `crash`).
        self.lost: str | None = None

    def exited(self, code: int | None, sig: str | None) -> None:
        self._exit = (code, sig)
        self._exited.set()

    def peek_exit(self) -> tuple[int | None, str | None] | None:
        """(exit code, signal name) once it exited, None while it runs; it stays a zombie
        (its pid, the run's group id, not reusable) until poll() or wait() reaps it."""
        return self._exit

    def poll(self) -> int | None:
        if self._exit is None:
            return None
        if not self._reaped:
            self._reaped = True
            self.zygote.reap(self.pid)
        code, sig = self._exit
        self.returncode = code if code is not None else -int(getattr(signal, sig or "SIGKILL", signal.SIGKILL))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code

    def kill(self) -> None:
        if self._exit is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Forked:
    """A zygote forked from this process (zygote.fork_here): what Zygote asks of its
    subprocess.Popen (pid, poll, wait, kill), and its two pipes."""

    def __init__(self, pid: int, requests_fd: int, replies_fd: int):
        self.pid = pid
        self.returncode: int | None = None
        self.requests, self.replies = os.fdopen(requests_fd, "wb"), os.fdopen(replies_fd, "rb")

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"zygote pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Zygote:
    """One zygote process and the thread that reads what it says."""

    def __init__(self, python: str, preload: tuple[str, ...], env: dict[str, str], forked: Forked | None = None):
        """Start `python zygote.py PRELOAD...` with `env`, or take over `forked`, a zygote
        forked from this process (fork_here)."""
        if forked is None:
            popen = subprocess.Popen(
                [python, str(_ZYGOTE_SCRIPT), *preload],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # not the terminal's group: Ctrl-C is the harness's to handle
                stderr=subprocess.DEVNULL,
                process_group=0,
            )
            assert popen.stdin is not None and popen.stdout is not None
            self.proc: subprocess.Popen | Forked = popen
            self._requests, self._replies = popen.stdin, popen.stdout
        else:
            self.proc, self._requests, self._replies = forked, forked.requests, forked.replies
        first = self._replies.readline()
        answer = json.loads(first) if first.strip() else {"error": "the zygote exited while importing"}
        if not answer.get("ready"):
            self.close()
            why = answer.get("unsafe") or (answer.get("error") or "").strip().splitlines()[-1:] or ["no answer"]
            raise ZygoteUnavailable(why if isinstance(why, str) else why[0])
        self._lock = threading.Lock()  # one request at a time on the pipe
        self._answers: queue.Queue = queue.Queue()
        self._ranks: dict[int, ForkedRank] = {}
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def _read(self) -> None:
        for line in self._replies:
            message = json.loads(line)
            # registered here, so its exit (next on the pipe) finds it
            if "pid" in message:
                rank = self._ranks[message["pid"]] = ForkedRank(self, message["pid"])
                self._answers.put(rank)
            elif "exited" in message:
                self._ranks[message["exited"]].exited(message["code"], message["signal"])
            else:
                self._answers.put(ZygoteUnavailable(message.get("error", "unexpected answer")))
        # The zygote is gone, and with it every rank it forked (PDEATHSIG, rankside).
        lost = [rank for rank in self._ranks.values() if rank.peek_exit() is None]
        if lost:
            why = f"the rank pool's zygote (pid {self.proc.pid}) {_ended(self.proc.wait())}, and its ranks died with it"
            for rank in lost:
                rank.lost = why
                rank.exited(None, "SIGKILL")
        self._answers.put(ZygoteUnavailable("the zygote exited"))

    def _send(self, message: dict) -> None:
        self._requests.write((json.dumps(message) + "\n").encode())
        self._requests.flush()

    def spawn(
        self,
        argv: list[str],
        module_argv: list[str],
        env: dict[str, str],
        log: Path,
        pgid: int,
        stderr_log: Path | None = None,
        cwd: Path | None = None,
        imports: tuple[str, ...] = (),
    ) -> ForkedRank:
        """`module_argv` forked as `argv` would start, in `cwd` (default: ours), stdout (and
        stderr, without `stderr_log`) to `log`, in process group `pgid` (0: its own), after
        the zygote imported `imports` (LaunchPlan.preload_on_request) if it had not yet."""
        request = {
            "spawn": module_argv,
            "command": argv,
            "env": env,
            "cwd": str(cwd or os.getcwd()),
            "log": str(log),
            "pgid": pgid,
            **({"stderr_log": str(stderr_log)} if stderr_log else {}),
            **({"imports": list(imports)} if imports else {}),
        }
        with self._lock:
            try:
                self._send(request)
            except (BrokenPipeError, ValueError) as exc:
                raise ZygoteUnavailable("the zygote exited") from exc
            answer = self._answers.get()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def reap(self, pid: int) -> None:
        with self._lock:
            # its exit is recorded; a later rank may get its pid
            self._ranks.pop(pid, None)
            try:
                self._send({"reap": pid})
            except (BrokenPipeError, ValueError):
                pass  # gone: it took its zombies with it

    def alive(self) -> bool:
        return self.proc.poll() is None

    def busy(self) -> bool:
        """Does a rank it forked still run? (Closing it would kill that rank.)"""
        return any(rank.peek_exit() is None for rank in list(self._ranks.values()))

    def close(self) -> None:
        """End-of-file: the zygote kills what it still runs and exits."""
        try:
            self._requests.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _ended(returncode: int) -> str:
    """How a process ended, from its Popen return code, in a verdict's words."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


_zygotes: OrderedDict[tuple, Zygote] = OrderedDict()
_refused: dict[tuple, str] = {}
_lock = threading.Lock()
# why a zygote could not fork a rank after importing what the rank asked for (said once each)
_said: set[str] = set()
# Zygotes forked from this process (fork_zygote_here), each waiting for the first rank it
# can serve: (the modules this process had imported, the environments it accepts, zygote).
_waiting: list[tuple[frozenset[str], Callable[[dict[str, str]], bool], Zygote]] = []


def fork_zygote_here(accepts: Callable[[dict[str, str]], bool]) -> None:
    """Fork a zygote from this process now; the pool hands it the first rank of this
    interpreter whose preload modules are all imported here and whose environment (less
    the per-rank variables) `accepts` says those imports would not have differed under.
    For a process that is itself a fork of a pre-imported one and has started no thread
    yet (the harness processes of the harness's own tests, tests/kit/harness_server.py):
    its ranks then start without a python start or an import of their own."""
    from harness.engines.launch.zygote import fork_here

    zygote = Zygote(sys.executable, (), {}, forked=Forked(*fork_here()))
    with _lock:
        _waiting.append((frozenset(sys.modules), accepts, zygote))


def _adopt(python: str, preload: tuple[str, ...], env: dict[str, str]) -> Zygote | None:
    """A waiting zygote forked here that can serve these ranks, taken off the list; or None."""
    for i, (imported, accepts, zygote) in enumerate(_waiting):
        if python == sys.executable and imported.issuperset(preload) and zygote.alive() and accepts(env):
            return _waiting.pop(i)[2]
    return None


def module_argv(argv: list[str]) -> tuple[str, list[str]] | None:
    """`PYTHON -m MODULE ARG...` -> (PYTHON, [MODULE, ARG...]); None for any other command."""
    if len(argv) >= 3 and argv[1] == "-m":
        return argv[0], argv[2:]
    return None


def _zygote(key: tuple, python: str, preload: tuple[str, ...], env: dict[str, str]) -> Zygote | None:
    with _lock:
        if key in _refused:
            return None
        zygote = _zygotes.get(key)
        if zygote is not None and zygote.alive():
            _zygotes.move_to_end(key)
            return zygote
        try:
            zygote = _zygotes[key] = _adopt(python, preload, env) or Zygote(python, preload, env)
        except ZygoteUnavailable as exc:
            _refused[key] = str(exc)
            print(f"harness: ranks start fresh, not from the rank pool: {exc}", file=sys.stderr)
            return None
        idle = [k for k, z in _zygotes.items() if k != key and not z.busy()]  # least recently used first
        for old in idle[: max(0, len(_zygotes) - MAX_ZYGOTES)]:
            _zygotes.pop(old).close()
        return zygote


def spawn_rank(
    argv: list[str], preload: list[str], env: dict[str, str], log: Path, pgid: int, on_request: Sequence[str] = ()
) -> ForkedRank | None:
    """The rank `argv` with `env`, forked from the pool's zygote for its engine and
    environment (which imports `on_request` first, LaunchPlan.preload_on_request), its
    output in `log`, in process group `pgid` (0: a new group, its own); None where the
    pool does not serve (see the module docstring): start it as usual."""
    command = module_argv(argv)
    if command is None or not preload or not RANK_POOL.on():
        return None
    python, rest = command
    base = {k: v for k, v in env.items() if k not in PER_RANK_ENV}
    key = (python, tuple(preload), tuple(sorted(base.items())))
    zygote = _zygote(key, python, tuple(preload), base)
    if zygote is None:
        return None
    try:
        return zygote.spawn(argv, rest, env, log, pgid, imports=tuple(on_request))
    except ZygoteUnavailable as exc:
        if on_request and str(exc) not in _said:  # the run's own imports failed there: said once, as a refusal is
            _said.add(str(exc))
            print(f"harness: ranks start fresh, not from the rank pool: {exc}", file=sys.stderr)
        return None


def close_all() -> None:
    """Close every zygote (their ranks, if any still run, die with them)."""
    with _lock:
        while _zygotes:
            _zygotes.popitem()[1].close()
        while _waiting:
            _waiting.pop()[2].close()


atexit.register(close_all)
