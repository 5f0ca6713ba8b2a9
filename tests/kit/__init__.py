"""The test kit: what the harness's own tests share, so each thing is written once.

  tests/kit/timing.py    budgets scaled by HARNESS_TEST_TIME_SCALE; the readiness wait
                         (wait_until), processes run or waited for under a budget
  tests/kit/cli.py       the CLI runner: `python -m harness ...` (and pytest) in a process
                         of its own, with env and a timeout that says it was one
  tests/kit/runs.py      the verdict reader: a run directory's verdicts, run.json, summary
  tests/kit/procs.py     the survivor check: a run's processes still alive; Ctrl-C as
                         from a terminal
  tests/kit/ranks.py     a RunBrief's ranks through the launcher, or in this process
  tests/kit/handmade.py  run directories of hand-written verdicts (report tests, no ranks)
  tests/kit/logprobs.py  hand-made logprob outputs for the comparison rules

Tests import from here, never from another test file. The most used names are
re-exported: `from tests.kit import harness_cli, verdict_of, survivors, wait_until`.
"""

from tests.kit.cli import ROOT, harness_cli, pytest_cli, start_harness
from tests.kit.procs import alive, assert_no_survivors, ranks_ready, sigint_as_from_a_terminal, survivors
from tests.kit.runs import outcomes, outputs_meta, run_meta, summary, verdict_of, verdicts
from tests.kit.timing import (
    TIME_SCALE_ENV,
    communicate,
    run_process,
    scaled,
    time_scale,
    timeout_message,
    wait_process,
    wait_until,
)

__all__ = [
    "ROOT",
    "harness_cli",
    "pytest_cli",
    "start_harness",
    "alive",
    "assert_no_survivors",
    "ranks_ready",
    "sigint_as_from_a_terminal",
    "survivors",
    "outcomes",
    "outputs_meta",
    "run_meta",
    "summary",
    "verdict_of",
    "verdicts",
    "TIME_SCALE_ENV",
    "communicate",
    "run_process",
    "scaled",
    "time_scale",
    "timeout_message",
    "wait_process",
    "wait_until",
]
