import os
import signal
import sys

from harness.cli import main
from harness.contract.exit_codes import INTERRUPTED


def _stopped_while_exiting(signum, frame):
    """main has returned and its report is whole; a Ctrl-C or SIGTERM while the interpreter
    shuts down (atexit closes the rank pool's zygotes) ends it at once with the interrupt
    code, never SIGTERM's default death (143) or a KeyboardInterrupt traceback. What the
    zygotes still run dies with them: they see their pipe close."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED)


code = main()
for _sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_sig, _stopped_while_exiting)
sys.exit(code)
