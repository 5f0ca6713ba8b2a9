"""The part of the launcher that lives inside each rank process.

Engine processes call `run_rank(main)` as their entry point. It gives the launcher
what it needs to name a failing rank and explain a stuck one:
  * on an exception, a JSON error record (exception type, message, frame, traceback, time)
    written to $HARNESS_RANK_ERROR_FILE, then exit code 1; under torch.compile the type,
    message and frame are the model's own exception's, under Dynamo's wrappers (rootcause.py);
    one raised in the harness's own code (a harness_step, or a harness frame with no engine
    frame under it: ownership.py) says so, and the verdict is `error`, not `crash`;
  * on SIGUSR1, a stack dump of every thread to stderr (the rank's log), which the
    launcher sends before it kills a hung run;
  * on Linux, death of the rank when the launcher dies (PR_SET_PDEATHSIG), so a
    killed harness leaves no rank behind;
  * `heartbeat(phase)` / `in_collective()`, which an engine MAY call to report progress:
    the launcher's stall detector (harness/engines/launch/stall.py) then declares a hang as soon
    as no rank has moved for its stall window while some rank waits in a collective,
    instead of at the scenario timeout. An engine that never calls them keeps the
    timeout-only behaviour;
  * $HARNESS_RANK_FAULT, a fault any engine's ranks take without fault switches of their
    own: `raise@R` makes global rank R raise as `run_rank` starts it, `hang@R` makes it
    sleep there forever (the conformance kit's crash and hang checks use it for engines
    that have no `rank-raise@N` / `rank-hang@N` switches; `harness run --env` sets it).

Standard library only: this module runs inside an engine's own environment.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from harness.contract.settings.variables import LAUNCHER_PID, RANK_ERROR_FILE, RANK_FAULT, RANK_HEARTBEAT_FILE
from harness.contract.storage import storage_fault
from harness.engines.launch.ownership import harness_code_fault, module_dirs
from harness.engines.launch.rootcause import RootCause, root_of

ERROR_FILE_ENV = RANK_ERROR_FILE.name
DUMP_SIGNAL = signal.SIGUSR1
#: the launcher's pid: lets a rank notice that the launcher died before PDEATHSIG was armed
LAUNCHER_PID_ENV = LAUNCHER_PID.name
#: where this rank's heartbeat goes (set by the launcher; unset -> heartbeat() does nothing)
HEARTBEAT_FILE_ENV = RANK_HEARTBEAT_FILE.name
# working on its own: a silence here is not a hang by itself
COMPUTE = "compute"
# waiting on its peers: a silence here with every rank idle is one
COLLECTIVE = "collective"
#: one fixed-size record, rewritten in place: "<beat number> <phase>", space padded
HEARTBEAT_RECORD_BYTES = 40

#: "raise@R" | "hang@R": a fault injected into global rank R of any engine (see the docstring)
RANK_FAULT_ENV = RANK_FAULT.name
RANK_FAULT_KINDS = ("raise", "hang")

# opened on the first beat; -1 when there is no heartbeat file
_beat_fd: int | None = None
_beat_count = 0


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the launcher) dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        # no prctl: the launcher's process-group kill still covers us
        return
    # The launcher may have died between fork and prctl: then we were already
    # re-parented and PDEATHSIG will never fire. Check that it is still there.
    launcher = LAUNCHER_PID.raw() or ""
    if launcher.isdigit():
        try:
            os.kill(int(launcher), 0)
        except ProcessLookupError:
            os._exit(1)
        except OSError:
            pass


# The attribute harness_step puts on an exception raised in the harness's own code in a rank
HARNESS_FAULT = "harness_fault"
# The attribute blame_engine puts on an exception the harness's code raises about the engine
ENGINE_FAULT = "engine_fault"
# Modules of the engine's own code inside the harness package (run_rank's engine_code):
# their frames are the engine's when the error record decides whose code raised
_engine_code: tuple[str, ...] = ()


def blame_engine(exc: BaseException) -> BaseException:
    """Mark `exc`, raised by the harness's code about what the engine did (it returned fewer
    rows than asked, an injected rank fault stands in for an engine's), as the engine's
    failure: a `crash`, although the harness's frame raised it. Returns `exc`, to raise."""
    setattr(exc, ENGINE_FAULT, True)
    return exc


@contextmanager
def harness_step(what: str) -> Iterator[None]:
    """The harness's own code inside a rank, not the engine's (building the engine's
    arguments, loading a prompt's media, writing the outputs): an exception raised here
    is the harness's fault. The error record says so, and the verdict is `error: could
    not <what>: <exception>`, never an engine `crash`. The innermost step names it."""
    try:
        yield
    except Exception as exc:
        if not getattr(exc, HARNESS_FAULT, None):
            first = str(exc).splitlines()[0] if str(exc) else ""
            try:
                setattr(exc, HARNESS_FAULT, f"could not {what}: {type(exc).__name__}" + (f": {first}" if first else ""))
            except AttributeError:
                # an exception type without a __dict__: the record then says crash
                pass
        raise


def harness_fault_in(exc: BaseException, engine_code: tuple[str, ...] | None = None) -> str | None:
    """Why `exc` is the harness's fault, or None: its harness_step's words; else, unless the
    harness blamed the engine, its innermost harness frame when no engine frame lies under
    it (ownership.py), whatever library raised below."""
    marked = getattr(exc, HARNESS_FAULT, None)
    if marked or getattr(exc, ENGINE_FAULT, False):
        return marked or None
    try:
        return harness_code_fault(exc, module_dirs(_engine_code if engine_code is None else engine_code))
    except Exception:  # noqa: BLE001 - reading the frames must never lose the record
        return None


def write_error_record(exc: BaseException, engine_code: tuple[str, ...] | None = None) -> None:
    """The rank's error record (the module doc); `engine_code`: as run_rank's (default: the
    running rank's)."""
    path = RANK_ERROR_FILE.raw()
    if not path:
        return
    # under torch.compile: the model's own exception, not Dynamo's wrapper of it
    try:
        root = root_of(exc)
    except Exception:  # noqa: BLE001 - the record must be written whatever unwrapping meets
        root = RootCause(type(exc).__name__, str(exc), None, None)
    record = {
        "harness_fault": harness_fault_in(exc, engine_code),  # raised in the harness's own code
        "rank": int(os.environ.get("RANK", "0")),
        "pid": os.getpid(),
        "exception_type": root.exception_type,
        "message": root.message,
        "frame": root.frame,
        # the model's own line, when it was raised below it (sequence.py)
        "model_frame": root.model_frame,
        "wrapper": root.wrapper,
        "traceback": "".join(traceback.format_exception(exc)),
        # a full or read-only disk: the machine's fault, not the engine's
        "storage": storage_fault(exc),
        "time": time.time(),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    # the launcher never reads a half-written record
    os.replace(tmp, path)


def heartbeat(phase: str = COMPUTE) -> None:
    """Tell the launcher this rank moved, and whether it now computes or waits on its
    peers. Cheap (one pwrite of a few bytes to a file in the run's log dir, no sockets),
    so it can be called around every collective. A no-op outside a launched rank."""
    global _beat_fd, _beat_count
    if _beat_fd is None:
        path = RANK_HEARTBEAT_FILE.raw()
        _beat_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644) if path else -1
    if _beat_fd < 0:
        return
    _beat_count += 1
    record = f"{_beat_count} {phase}".ljust(HEARTBEAT_RECORD_BYTES - 1) + "\n"
    # same size every time, at offset 0: the file is never seen shorter or truncated
    os.pwrite(_beat_fd, record.encode()[:HEARTBEAT_RECORD_BYTES], 0)


@contextmanager
def in_collective() -> Iterator[None]:
    """Wrap a collective (all-reduce, send/recv, barrier...): a beat on entering it,
    marked as waiting on peers, and a beat on leaving it, back to computing."""
    heartbeat(COLLECTIVE)
    try:
        yield
    finally:
        heartbeat(COMPUTE)


def parse_rank_fault(value: str) -> tuple[str, int]:
    """`raise@1` -> ("raise", 1); anything else is a ValueError that shows the form."""
    kind, _, rank = value.strip().partition("@")
    if kind not in RANK_FAULT_KINDS or not rank.isdigit():
        raise ValueError(
            f"${RANK_FAULT_ENV}={value!r}: expected one of {', '.join(k + '@<global rank>' for k in RANK_FAULT_KINDS)}"
        )
    return kind, int(rank)


def fire_rank_fault() -> None:
    """Act on $HARNESS_RANK_FAULT if it names this rank (a malformed value fails every rank)."""
    value = RANK_FAULT.raw()
    if not value:
        return
    kind, target = parse_rank_fault(value)
    rank = int(os.environ.get("RANK", "0"))
    if target != rank:
        return
    if kind == "raise":
        raise blame_engine(RuntimeError(f"{RANK_FAULT_ENV}: injected failure on rank {rank}"))
    while True:  # hang: stuck where a stack dump can show it
        time.sleep(3600)


def run_rank(main: Callable[[], None], engine_code: tuple[str, ...] = ()) -> NoReturn:
    """Run `main` as a watched rank: exit 0 on success, 1 with an error record on failure.
    `engine_code`: the modules of the engine's own code inside the harness package (the
    reference engine's), so that an exception raised there is the engine's `crash`; any
    other harness frame with no engine frame under it makes the record the harness's fault."""
    global _engine_code
    _engine_code = tuple(engine_code)
    die_with_parent()
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    try:
        fire_rank_fault()
        main()
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher
        write_error_record(exc)
        traceback.print_exc()
        sys.stderr.flush()
        # skip atexit hooks that may block on a dead process group
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
