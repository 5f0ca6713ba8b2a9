"""The commands a user types to find their way (`harness --help`, `harness list`, a typo,
`harness list --engines`) answer in well under 3 s: they import only what they need. A
typo or `list --engines` took 14-34 s in an engine's repository (3.7 s of CPU): torch came
in through an engine's model table, and vLLM's probe ran on every listing.

Measured as the child's CPU seconds (user + system), which a loaded machine does not
inflate as it does wall time, and as the heavy libraries it imported (`-X importtime`).
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from harness.cli.project_init import init_project
from tests.kit.cli import environment

pytestmark = pytest.mark.e2e

# What only a run needs: a quick command that imports one of them pays seconds for nothing.
HEAVY = ("torch", "transformers", "lm_eval", "pandas", "matplotlib", "pyarrow", "ray", "numpy")
CPU_BUDGET_S = 3.0


def _cpu_and_imports(cwd, *args: str) -> tuple[float, set[str], subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness", *args],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return cpu, imported, done


@pytest.mark.parametrize(
    "args",
    [("--help",), ("list",), ("list", "--gate", "pr"), ("list", "--engines"), ("run", "mine/tp1-pp3"), ("lst",)],
    ids=" ".join,
)
def test_a_quick_command_imports_only_what_it_needs(tmp_path, args):
    init_project(tmp_path, "tiny-llama", suite="mine")  # an engine's repository, as a user has it
    cpu, imported, done = _cpu_and_imports(tmp_path, *args)
    assert done.returncode in (0, 2), done.stderr[-2000:]  # a typo is a usage error, with its hint
    if args[0] == "run":
        assert "did you mean" in done.stderr, done.stderr[-2000:]
    assert not imported & set(HEAVY), f"harness {' '.join(args)} imported {sorted(imported & set(HEAVY))}"
    assert cpu < CPU_BUDGET_S, f"harness {' '.join(args)} took {cpu:.2f} s of CPU"
