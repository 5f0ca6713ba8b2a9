"""The exit codes of the `harness` command (README.md, "Exit codes", lists them).

CI tells them apart: 1 means the change under test broke something; 2, 3 and 4 mean
the harness could not give a full answer, and say why on stderr.
"""

from __future__ import annotations

from collections.abc import Mapping

# every planned scenario ended, each as expected
OK = 0
# a scenario ended fail/crash/hang/error, passed unexpectedly or lost coverage; --diff: NEW regressed
NOT_AS_EXPECTED = 1
# bad arguments or inputs, nothing ran: bad scenario file, no match, run directory taken, not a run
USAGE = 2
# the run directory, its report, the history store or a scenario's files could not be written
RESULTS_NOT_WRITTEN = 3
# planned scenarios never ended (the harness was killed): no verdict on the whole run
INCOMPLETE = 4
# every scenario ended unsupported (or every golden was skipped): green would test nothing (pytest's 5)
NOTHING_TESTED = 5
# Ctrl-C or SIGTERM: ranks stopped, the report covers what ended
INTERRUPTED = 130


def nothing_tested_text(count: int, allow_option: str) -> str:
    """What `harness run` and a pytest session say when every scenario ended unsupported: the
    same words, so that neither way in passes a suite that tests nothing."""
    return (
        f"NOTHING TESTED: all {count} scenarios ended unsupported (the reasons are in the report); exit 5. "
        f"`harness list --engines` shows what each engine runs; {allow_option} accepts this"
    )


def of_run(meta: Mapping[str, object], interrupted: bool = False) -> int:
    """The exit code of a run (or a rebuilt report of one) from its run.json.
    Results that were not stored come first: nothing else about the run is then
    on record. A failure found beats an incomplete run: the change is unsafe
    whatever the scenarios that never ran would have said."""
    if meta.get("history_error") or meta.get("results_not_written"):  # the latter: a disk fault in a scenario
        return RESULTS_NOT_WRITTEN
    if interrupted:
        return INTERRUPTED
    if meta.get("not_as_expected") or meta.get("coverage_lost"):
        return NOT_AS_EXPECTED
    if meta.get("never_ran"):
        return INCOMPLETE
    if meta.get("nothing_tested") and not meta.get("allow_empty"):
        return NOTHING_TESTED
    return OK
