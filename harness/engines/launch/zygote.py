"""The rank pool's zygote: one process that imports an engine's heavy modules once and
forks ranks from that state, so a rank does not spend its first seconds importing torch.

    python harness/engines/launch/zygote.py MODULE...    (started by harness/engines/launch/pool.py)

It imports MODULE... (the engine's `LaunchPlan.preload`), checks that the fork will
be safe, then serves the launcher over its stdin/stdout, one JSON object per line:

  -> {"ready": true} | {"unsafe": why} | {"error": traceback}   once, after the imports
  <- {"spawn": [module, arg...], "command": [python, "-m", module, arg...], "env": {...},
      "cwd": dir, "log": path, "pgid": 0 | N, "stderr_log": path (optional: stderr apart),
      "imports": [module...] (optional: imported here first, once; LaunchPlan.preload_on_request)}
  -> {"pid": N} | {"error": why}                                  the answer to a spawn
  -> {"exited": N, "code": c | null, "signal": name | null}       when a rank exits
  <- {"reap": N}                                                  the launcher is done with it
  end-of-file on stdin: every rank still alive is killed with its process group, and
  the zygote exits.

Why a fork here is safe, also on CUDA machines: the zygote only imports. It never runs
a tensor operation (no OpenMP pool exists to be lost in the child), never initialises
CUDA (the child does, after its CUDA_VISIBLE_DEVICES is set), and it refuses to serve
when its imports left a second thread or an initialised CUDA context behind; the
launcher then starts ranks the usual way.

A forked rank is what `python -m MODULE ARG...` would be: its own environment (set
before the module runs), working directory, process group (the run's, set by both the
zygote and the child, so there is no race), stdin from /dev/null and stdout+stderr to
its log. The zygote reports exits without reaping (waitid WNOWAIT) and reaps a rank
only when the launcher says so, so a dead rank 0 keeps its pid, and with it the run's
process group id, until the run's cleanup, as a rank the launcher started itself does.

Environment read at import time (OMP_NUM_THREADS, TORCHINDUCTOR_* switches) is the
zygote's own: the launcher keeps one zygote per (python, preload, environment), so
a rank only ever comes from a zygote whose environment equals its own but for the
per-rank variables (RANK, MASTER_PORT, ...).

Run as a script by path; standard library and the launcher's blame.py only, until it
imports MODULE....
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import sys
import traceback
from pathlib import Path

# Run by path: the repository root instead of this script's directory (harness/engines/launch/
# must not shadow anything), for the launcher's own helpers (stdlib only, like nodeside.py).
# Imported as a module (pool.py's fork_zygote_here), the path is the importer's to keep.
if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from harness.engines.launch.blame import child_exit  # noqa: E402

# how often live ranks are checked for an exit
POLL_S = 0.02
# Modules whose import starts a math library's thread pool that survives a fork: torch
# (OpenMP, and numpy's OpenBLAS) and OpenCV (its own OpenBLAS, which vLLM's multimodal code
# imports). OpenBLAS stops its pool before a fork (pthread_atfork) and the child starts a
# new one when it needs it, as OpenMP does. Their threads are allowed when a preload list
# names the module; any other thread still makes the zygote refuse.
THREAD_POOL_MODULES = ("torch", "cv2")


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1  # no /proc: the CUDA check still holds


def unsafe_reason(allowed_threads: int) -> str | None:
    """Why forking this process would not be safe, or None. `allowed_threads`: what
    the THREAD_POOL_MODULES left (e.g. torch's OpenMP workers, which the child's OpenMP
    runtime recreates: PyTorch supports a fork after import, its DataLoader workers rely on it)."""
    threads = thread_count()
    if threads > allowed_threads:
        return (
            f"the preloaded modules left {threads - allowed_threads} thread(s) running beyond the math "
            "libraries' own pools (a fork keeps only the calling thread)"
        )
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda") and torch.cuda.is_initialized():
        return "the preloaded modules initialised CUDA (a forked child could not use it)"
    return None


def send(out, message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def become_rank(request: dict) -> None:
    """In the forked child: turn into `python -m MODULE ARG...` with the request's
    environment, directory, process group and log, then run the module. Never returns."""
    code = 1
    try:
        # before the environment changes: it shares argv's memory
        show_command(request["command"])
        os.setpgid(0, request["pgid"])
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any python process
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # what `python -m` puts first
        os.environ.clear()
        os.environ.update(request["env"])
        redirect_output(request["log"], request.get("stderr_log"))
        module, *args = request["spawn"]
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the rank's log is where a failure must show
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def redirect_output(log: str, stderr_log: str | None) -> None:
    """stdin from /dev/null, stdout to `log`, stderr to `stderr_log` or, without one, to `log`
    too (one file description: their lines interleave as written)."""
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, stderr_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        if path is None:
            os.dup2(1, fd)
            continue
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)


def show_command(command: list[str]) -> None:
    """What ps, top and /proc/<pid>/cmdline show for this rank: its own command line
    rather than the zygote's (an engine interpreter without setproctitle keeps the
    zygote's; the rank's log and its process group still say which run it belongs to)."""
    try:
        from setproctitle import setproctitle
    except ImportError:
        return
    setproctitle(" ".join(command))


def import_on_request(modules: list[str], allowed_threads: int) -> str | None:
    """Import what a spawn request asks for that is not imported yet; why the fork would
    then not be safe (or the import failed), or None. What one request imported, every
    later rank inherits."""
    missing = [module for module in modules if module not in sys.modules]
    if not missing:  # nothing imported since the start's checks: nothing to check again
        return None
    try:
        for module in missing:
            importlib.import_module(module)
    except BaseException:  # noqa: BLE001 - the launcher starts this rank fresh instead
        return "importing " + ", ".join(missing) + " failed: " + traceback.format_exc().strip().splitlines()[-1]
    return unsafe_reason(allowed_threads)


def spawn(request: dict, protocol_fd: int) -> int:
    pid = os.fork()
    if pid == 0:
        # the launcher's pipe is the zygote's: its end-of-file must not wait for ranks
        os.close(protocol_fd)
        become_rank(request)
    # the parent sets the group too: it exists before the next rank asks to join it
    try:
        os.setpgid(pid, request["pgid"])
    except OSError:
        # the child already did it (and may have moved on to exec-like state)
        pass
    return pid


def answer_spawn(request: dict, protocol_fd: int, allowed_threads: int) -> tuple[int | None, str]:
    """(the forked rank's pid, "") or (None, why not): the request's own imports first."""
    problem = import_on_request(request.get("imports", []), allowed_threads)
    if problem:
        return None, problem
    try:
        return spawn(request, protocol_fd), ""
    except OSError as exc:
        return None, f"fork failed: {exc}"


def serve(out, allowed_threads: int = 1) -> None:
    """`allowed_threads`: what the math libraries' pools left after the preloads (unsafe_reason)."""
    running: set[int] = set()  # forked and not yet reported as exited
    exited: set[int] = set()  # reported, waiting for the launcher's "reap"
    pending = b""
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready:
            chunk = os.read(stdin, 65536)
            if not chunk:
                break  # the launcher is gone or done
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                if "spawn" in request:
                    pid, problem = answer_spawn(request, out.fileno(), allowed_threads)
                    if pid is None:
                        send(out, {"error": problem})
                    else:
                        running.add(pid)
                        send(out, {"pid": pid})
                elif "reap" in request and request["reap"] in exited:
                    os.waitpid(request["reap"], 0)
                    exited.discard(request["reap"])
        for pid in list(running):
            status = child_exit(pid)
            if status is not None:
                running.discard(pid)
                exited.add(pid)
                send(out, {"exited": pid, "code": status[0], "signal": status[1]})
    # End-of-file: nothing forked here may outlive the launcher, nor what a rank started
    # itself (it shares the rank's process group: the run's).
    for pid in running:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fork_here() -> tuple[int, int, int]:
    """A zygote forked from this process, serving at once: (its pid, the fd to write requests
    to, the fd to read its answers from). For a process that has imported what its ranks need
    and runs no thread beyond the math libraries' pools (the caller's to know): the fork
    keeps only the calling thread."""
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # as a started zygote: not the terminal's group
            os.setpgid(0, 0)
            os.close(requests_w)
            os.close(replies_r)
            os.dup2(requests_r, 0)
            os.close(requests_r)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when we stop
            out = os.fdopen(replies_w, "w")
            send(out, {"ready": True})
            serve(out, thread_count())
            code = 0
        finally:
            os._exit(code)
    os.close(requests_r)
    os.close(replies_w)
    return pid, requests_w, replies_r


def main() -> None:
    # The protocol owns the original stdout; fd 1 goes to stderr so that a preloaded
    # module that prints cannot corrupt it.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    # the preloads import as under `python -m`, from the working directory
    sys.path[0] = os.getcwd()
    allowed_threads = 1
    try:
        for module in sys.argv[1:]:
            importlib.import_module(module)
            if module in THREAD_POOL_MODULES:
                allowed_threads = thread_count()
    except BaseException:  # noqa: BLE001 - reported to the launcher, which falls back
        send(out, {"error": traceback.format_exc()})
        return
    why = unsafe_reason(allowed_threads)
    if why:
        send(out, {"unsafe": why})
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when we stop
    send(out, {"ready": True})
    serve(out, allowed_threads)


if __name__ == "__main__":
    main()
