"""The part of the launcher that lives inside each rank process.

Engine processes call `run_rank(main)` as their entry point. It gives the launcher
what it needs to name a failing rank and explain a stuck one:
  * on an exception, a JSON error record (exception type, message, traceback, time)
    written to $HARNESS_RANK_ERROR_FILE, then exit code 1;
  * on SIGUSR1, a stack dump of every thread to stderr (the rank's log), which the
    launcher sends before it kills a hung run;
  * on Linux, death of the rank when the launcher dies (PR_SET_PDEATHSIG), so a
    killed harness leaves no rank behind.

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
from typing import Callable, NoReturn

ERROR_FILE_ENV = "HARNESS_RANK_ERROR_FILE"
DUMP_SIGNAL = signal.SIGUSR1
#: the launcher's pid: lets a rank notice that the launcher died before PDEATHSIG was armed
LAUNCHER_PID_ENV = "HARNESS_LAUNCHER_PID"


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
        return  # no prctl: the launcher's process-group kill still covers us
    # The launcher may have died between fork and prctl: then we were already
    # re-parented and PDEATHSIG will never fire. Check that it is still there.
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if launcher.isdigit():
        try:
            os.kill(int(launcher), 0)
        except ProcessLookupError:
            os._exit(1)
        except OSError:
            pass


def write_error_record(exc: BaseException) -> None:
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    record = {
        "rank": int(os.environ.get("RANK", "0")),
        "pid": os.getpid(),
        "exception_type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "time": time.time(),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)  # the launcher never reads a half-written record


def run_rank(main: Callable[[], None]) -> NoReturn:
    """Run `main` as a watched rank: exit 0 on success, 1 with an error record on failure."""
    die_with_parent()
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    try:
        main()
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher
        write_error_record(exc)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # skip atexit hooks that may block on a dead process group
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
