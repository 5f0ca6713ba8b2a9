"""Ctrl-C as a terminal delivers it, for the tests that interrupt a harness process.

A shell without job control starts background commands with SIGINT ignored, and an
ignored signal stays ignored across fork and exec: a test run started that way (`.ci/run
&`, some CI runners) would spawn a harness that cannot see Ctrl-C at all. The interrupted
process gets SIGINT's default disposition back, as it has under a terminal, so the tests
check the harness and not how the test run was started."""

import signal


def sigint_as_from_a_terminal() -> None:
    """A Popen preexec_fn: SIGINT back to its default disposition in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
