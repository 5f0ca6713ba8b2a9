"""vLLM's engine core and workers forked from the driver, which has imported vLLM already.

vLLM starts its engine core, and its workers, through one helper
(`vllm.utils.system_utils.get_mp_context`): by `fork` unless a reason forces `spawn`. Its CPU
platform always forces spawn (it sets VLLM_WORKER_MULTIPROC_METHOD=spawn when it checks the
config), so on CPU each of those processes was a fresh interpreter importing torch and vLLM
again, one after the other: most of a tiny scenario's time went to `worker start + import`,
which forking all but removes (docs/BENCHMARKS.md has the times). On GPUs vLLM forks by default.

Here the driver lets vLLM fork on CPU too, as it does on GPUs. vLLM's own reasons for spawn
still hold (CUDA or XPU initialised, a Ray actor, NUMA binding), and so does what makes a fork
safe on CPU: no thread pool started by running something. A child keeps a pool's state but
not its threads, and OpenMP then hangs at the child's first parallel region (torch after one
tensor operation in the parent). The rule is the rank pool zygote's
(harness/engines/launch/zygote.py): the threads allowed at a fork are those the imports left (the
BLAS pools of numpy and OpenCV, which stop before a fork and restart in the child), Python's
own and ZeroMQ's background threads (vLLM's sockets; the child makes its own). Any other
native thread makes that process spawn instead, said in the log. In practice none runs: the
driver builds only the config and tokenizer before vLLM starts its engine core, which starts
its workers before it runs anything.

A forked engine core or worker is what a spawned one is but for the imports it inherits: the
same environment, the driver's log as stdout and stderr, the run's process group (the
launcher's group kill reaches it), vLLM's log prefix naming it, the harness's worker hooks
(evidence.py, faults.py) installed. One difference is at its end: multiprocessing ends a
forked child with os._exit, so no C++ destructor runs, and the one that unlinks vLLM's CPU
communicator's shared memory is among them (files in /dev/shm, per TP or PP group).
A forked worker removes them itself as it exits, normally or by an exception or SIGTERM
(multiprocessing runs its finalizers then), and the driver removes what a killed one left.
HARNESS_VLLM_FORK=0 leaves vLLM's choice (spawn on CPU); tests/test_vllm.py compares the two
bit for bit.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from harness.contract.settings.variables import VLLM_FORK

FORK_ENV = VLLM_FORK.name
METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
# libzmq names its I/O and reaper threads; a child never uses its parent's ZeroMQ context
# (vLLM makes new sockets in each process), as on GPUs, where vLLM forks with them running.
SAFE_NATIVE_THREADS = ("ZMQbg/",)
# How this process was started: set in a child vLLM forked from a process where the harness
# installed the switch below; a spawned engine core or worker imports this module afresh.
STARTED = {"by": "spawn"}
# The threads running when the switch was installed, after the imports: their pools.
_IMPORT_THREADS: set[int] = set()


def _threads() -> list[tuple[int, str]]:
    """(thread id, name) of each of this process's threads (Linux /proc; none elsewhere)."""
    found = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                found.append((int(tid), f.read().strip()))
        except OSError:
            pass  # it ended meanwhile
    return found


def pool_threads() -> list[str]:
    """Native threads that a fork would leave broken in the child: neither this main thread,
    nor one the imports left, nor one Python started, nor ZeroMQ's."""
    known = _IMPORT_THREADS | {os.getpid()} | {t.native_id for t in threading.enumerate() if t is not threading.main_thread()}
    return [name for tid, name in _threads() if tid not in known and not name.startswith(SAFE_NATIVE_THREADS)]


def remember_import_threads() -> None:
    """Record the threads running now, after the imports and before anything runs, as allowed at a fork."""
    _IMPORT_THREADS.update(tid for tid, _ in _threads())


def unsafe_to_fork() -> str | None:
    """Why this process must not fork now, or None."""
    pools = pool_threads()
    if pools:
        # a thread ZeroMQ has just started names itself at once: look again
        time.sleep(0.05)
        pools = pool_threads()
    if pools:
        return f"{len(pools)} native thread(s) beyond Python's and ZeroMQ's are running ({', '.join(sorted(set(pools)))})"
    return None


def install() -> None:
    """Let vLLM fork its processes on CPU where vLLM itself would not force spawn, in this
    process and in every process forked from it. Nothing on other platforms, or with
    HARNESS_VLLM_FORK=0. Called after the imports, before anything runs."""
    if not VLLM_FORK.on():
        return
    from vllm.platforms import current_platform

    try:
        from vllm.utils import system_utils
    except ImportError:
        # a release without this layout: vLLM's own choice stands
        return
    if (
        not current_platform.is_cpu()
        or not callable(getattr(system_utils, "_maybe_force_spawn", None))
        or getattr(system_utils._maybe_force_spawn, "harness", False)
    ):
        return
    vllm_decides = system_utils._maybe_force_spawn

    def decide() -> None:
        # vLLM's own reasons still set spawn; its CPU platform's blanket one does not
        os.environ[METHOD_ENV] = "fork"
        vllm_decides()
        why = os.environ[METHOD_ENV] == "fork" and unsafe_to_fork()
        if why:
            os.environ[METHOD_ENV] = "spawn"
            print(f"harness: vLLM's next process is spawned, not forked: {why}", file=sys.stderr, flush=True)

    remember_import_threads()
    decide.harness = True  # type: ignore[attr-defined]
    system_utils._maybe_force_spawn = decide  # get_mp_context looks it up at each call
    os.register_at_fork(after_in_child=_forked)
    from multiprocessing import util

    util.register_after_fork(_AFTER_FORK, _remove_at_exit)


def _forked() -> None:
    STARTED["by"] = "fork"
    # a forked child has one thread: whatever starts in it later is its own
    _IMPORT_THREADS.clear()


class _AfterFork:
    """What multiprocessing's after-fork callbacks hang on (it holds a weak reference)."""


_AFTER_FORK = _AfterFork()


def _remove_at_exit(_marker: _AfterFork) -> None:
    """In a child multiprocessing forked, once it has cleared its parent's finalizers: one
    that multiprocessing runs as this child ends, normally, by an exception or by SIGTERM
    (not by SIGKILL). vLLM's CPU worker has set VLLM_DIST_IDENT by then."""
    from multiprocessing import util

    util.Finalize(None, _remove_own_shared_memory, exitpriority=0)


def _remove_own_shared_memory() -> None:
    # not the rendezvous file: a peer may still be ending its process groups through it
    remove_shared_memory([os.environ.get("VLLM_DIST_IDENT")], rendezvous=False)


# where a worker writes its VLLM_DIST_IDENT as it sets up its process groups: a worker that dies
# by a signal (vLLM 0.32's EP segfault) never runs its own removal, and the driver, which has no
# evidence from it, removes its segments by this record (8 MB each per rank and group; from 0.31
# down the identifier is the rendezvous port, which a later run can draw again: EEXIST)
IDENTS_DIR = "shm-idents"


def record_ident(output_dir: str | None) -> None:
    """In a vLLM worker: its VLLM_DIST_IDENT into `output_dir`/shm-idents/<pid> (never fails the worker)."""
    ident = os.environ.get("VLLM_DIST_IDENT")
    if not (ident and output_dir):
        return
    try:
        folder = os.path.join(output_dir, IDENTS_DIR)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, str(os.getpid())), "w") as f:
            f.write(ident)
    except OSError:
        pass


def recorded_idents(output_dir: str | None) -> list[str]:
    """The identifiers this run's workers recorded (record_ident)."""
    import glob

    idents = []
    for path in glob.glob(os.path.join(output_dir or "", IDENTS_DIR, "*")) if output_dir else []:
        try:
            with open(path) as f:
                idents.append(f.read().strip())
        except OSError:
            pass
    return sorted(set(filter(None, idents)))


def remove_shared_memory(idents: list, shm_dir: str = "/dev/shm", rendezvous: bool = True) -> list[str]:
    """Remove vLLM CPU workers' communicator segments (`<ident>-<group>-[<ranks>]-cpushm_<rank>`)
    and, with `rendezvous`, their rendezvous file (`<tmp>/<ident>`), for these identifiers
    (VLLM_DIST_IDENT, each worker's). Unlinking a name leaves the memory mapped for a peer
    still using it. Only names with a worker's own identifier, so a run beside this one keeps
    its files. Returns what went."""
    import glob
    import tempfile

    removed = []
    for ident in {i for i in idents if i and "/" not in i}:
        store = [os.path.join(tempfile.gettempdir(), ident)] if rendezvous else []
        for path in [*glob.glob(os.path.join(shm_dir, glob.escape(ident) + "-*")), *store]:
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
    return removed


def started_by(workers: list[dict]) -> dict:
    """How vLLM started its engine core (the driver's last decision) and its workers (each
    worker's own answer, evidence.py), for the outputs' meta."""
    import vllm.envs

    return {"engine_core": vllm.envs.VLLM_WORKER_MULTIPROC_METHOD, "workers": sorted({str(w.get("started_by")) for w in workers})}
