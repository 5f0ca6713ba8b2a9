"""The conformance kit against real engines: real ranks, the harness's runner and launcher.

The built-in `reference` engine must pass every check (it has fault switches: its crash
and hang fire mid-run); `hf` passes or skips each with the reason (one process, eager:
no parallel setting; no fault switches, so crash and hang come through
$HARNESS_RANK_FAULT); an engine of an installed package passes through its entry point
and `python -m harness conformance`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.conformance import KitOptions, run_kit
from tests.kit import scaled
from tests.kit.plugins import Site

pytestmark = pytest.mark.e2e  # starts engine ranks

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """One work dir for the module: the reference engine's golden is made once."""
    return tmp_path_factory.mktemp("kit")


def options(**extra) -> KitOptions:
    return KitOptions(timeout_s=scaled(300), hang_timeout_s=scaled(60), **extra)


def by_name(results) -> dict:
    return {r.name: r for r in results}


def test_the_reference_engine_passes_every_check(work):
    results = by_name(run_kit("reference", work, options()))
    assert list(results) == ["load", "versions", "unsupported", "outputs", "matches-reference", "parallel-tp2", "crash", "hang"]
    assert results.pop("matches-reference").status == "skip"  # it is the reference
    failed = [r.line() for r in results.values() if r.status != "pass"]
    assert not failed, "\n".join(failed)
    assert "rank-raise@1" in results["crash"].detail and "rank 1 crashed: RuntimeError" in results["crash"].detail
    assert "rank-hang@1" in results["hang"].detail and "stacks of rank(s) [0, 1]" in results["hang"].detail


@pytest.mark.nightly_only  # the kit's representative in make test is the reference engine's run above (74 s here)
def test_the_hf_engine_passes_or_skips_each_check_with_its_reason(work):
    pytest.importorskip("transformers")
    results = by_name(run_kit("hf", work, options()))
    lines = "\n".join(r.line() for r in results.values())
    assert all(r.status in ("pass", "skip") and r.detail for r in results.values()), lines
    assert results["parallel-tp2"].status == "skip" and "does not support tp=2" in results["parallel-tp2"].detail
    for name in ("load", "versions", "unsupported", "outputs", "matches-reference", "crash", "hang"):
        assert results[name].status == "pass", lines
    assert "HARNESS_RANK_FAULT=raise@0" in results["crash"].detail  # hf has no fault switches
    assert "rank 0 at " in results["hang"].detail and "rankside.py" in results["hang"].detail


def test_an_installed_packages_engine_passes_through_its_entry_point(tmp_path, monkeypatch):
    site = Site(tmp_path / "site", monkeypatch)
    module = f"ref_plugin_{site.tag}"
    (site.root / f"{module}.py").write_text(
        "from harness.engines.reference import ReferenceEngine\n\n\nclass RefPlugin(ReferenceEngine):\n    name = 'ref-plugin'\n"
    )
    site.install("harness-ref-plugin", "0.1", {"harness.engines": {"ref-plugin": f"{module}:RefPlugin"}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), str(ROOT)])}
    checks = ["--check", "load", "--check", "versions", "--check", "unsupported", "--check", "outputs"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "conformance",
            "ref-plugin",
            *checks,
            "--work-dir",
            str(tmp_path / "kit"),
            "--timeout",
            str(scaled(300)),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS  load               from harness-ref-plugin 0.1 (" in done.stdout
    assert "4 checks: 4 pass, 0 fail, 0 skip" in done.stdout
    assert "outputs.json names engine 'reference', not 'ref-plugin'" in done.stdout  # a note, not a failure
