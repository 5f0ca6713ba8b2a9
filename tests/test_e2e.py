"""End to end, as a user drives it: the `harness` CLI and pytest over a small scenario
file, real rank processes on the reference engine, real gloo. Each test checks the
verdict, the report, the exit code, and that no process of the run is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.contract.rundir import logs_dir, verdict_files
from harness.engines.launch.stall import STALL_WINDOW_ENV
from tests.kit import (
    communicate,
    harness_cli,
    pytest_cli,
    run_meta,
    scaled,
    start_harness,
    survivors,
    verdict_of,
    wait_until,
)

# One xdist worker runs the whole module (make test's --dist loadgroup): its module-scoped fixture
# (the demo golden) is made once, not once on each worker that gets one of its tests.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

DEMO = """
suite: demo
model: tiny-llama
timeout_s: {timeout}
workloads:
  - {name: logits, kind: logprobs, num_prompts: 3, max_prompt_tokens: 40, top_k: 10}
  - {name: greedy, kind: greedy, num_prompts: 2, max_prompt_tokens: 30, max_new_tokens: 6, top_k: 10}
golden: {tp: 1, pp: 1, sp: false}
matrix: {tp: [1, 2], pp: [1, 2], sp: [false, true]}
exclude: [{tp: 1, sp: true}]
gates: {pr: [tp2-pp2]}
""".replace("{timeout}", str(scaled(120)))  # per scenario, scaled for this machine


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A scenario dir with the demo suite and its golden, made by `harness golden`."""
    root = tmp_path_factory.mktemp("demo")
    (root / "scenarios").mkdir()
    (root / "scenarios" / "demo.yaml").write_text(DEMO)
    env = {**os.environ, "HARNESS_GOLDEN_DIR": str(root / "golden")}
    result = harness(root, env, "golden", "demo", "--work-dir", str(root / "golden-runs"))
    assert result.returncode == 0, result.stderr
    assert (root / "golden" / "demo" / "manifest.json").exists()
    return root, env


def harness(root: Path, env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI on the scenario files under `root`, within scaled(timeout) seconds."""
    return harness_cli(*args, scenarios=root / "scenarios", env=env, timeout=timeout)


def run(root: Path, env: dict, run_id: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    result = harness(root, env, "run", "--report-dir", str(root / "reports"), "--run-id", run_id, *args)
    return result, root / "reports" / run_id


def test_matrix_passes_against_the_golden(demo):
    root, env = demo
    result, run_dir = run(root, env, "clean", "demo")
    assert result.returncode == 0, result.stdout + result.stderr
    for sid in ("demo/tp1-pp1", "demo/tp2-pp1", "demo/tp1-pp2", "demo/tp2-pp2", "demo/tp2-pp1-sp", "demo/tp2-pp2-sp"):
        v = verdict_of(run_dir, sid)
        assert v["verdict"] == "pass", v["reason"]
        boundary = {"pp_contract"} if "pp2" in sid else set()  # the PP contract check joins at a stage boundary
        assert {c["name"] for c in v["checks"]} == {"logits", "greedy"} | boundary
    assert "**OK**" in (run_dir / "summary.md").read_text()
    assert (run_dir / "junit.xml").exists()
    assert len(list(logs_dir(run_dir, "demo/tp2-pp2").glob("rank*.log"))) == 4
    assert not survivors(run_dir)


def test_rank_that_raises_is_a_crash_naming_the_rank(demo):
    root, env = demo
    result, run_dir = run(root, env, "raise", "demo/tp2-pp2", "--fault", "rank-raise@3")
    assert result.returncode == 1
    v = verdict_of(run_dir, "demo/tp2-pp2")
    assert v["verdict"] == "crash" and v["crash"]["rank"] == 3, v["reason"]
    assert "RuntimeError" in v["crash"]["exception"] and "injected failure on rank 3" in v["crash"]["traceback"]
    assert "rank 3 crashed" in (run_dir / "summary.md").read_text()
    assert "harness run demo/tp2-pp2 --fault rank-raise@3" in v["reproduce"]
    assert not survivors(run_dir)


def test_rank_that_is_killed_is_a_crash_naming_rank_and_signal(demo):
    root, env = demo
    result, run_dir = run(root, env, "kill", "demo/tp2-pp1", "--fault", "rank-exit@1")
    assert result.returncode == 1
    v = verdict_of(run_dir, "demo/tp2-pp1")
    assert v["verdict"] == "crash" and v["crash"]["rank"] == 1 and v["crash"]["signal"] == "SIGKILL", v["reason"]
    assert not survivors(run_dir)


def test_rank_that_hangs_is_declared_by_the_stall_detector_with_every_rank_located(demo):
    """The rank-hang fault with a 600 s timeout: only the stall detector (its window at 5 s,
    not its 20 s default) can end the run as a hang before the test's own limit. One run for
    both claims: the detector's (who idles, who waits) and the hang's location (every rank's
    stack)."""
    root, env = demo
    result, run_dir = run(
        root, {**env, STALL_WINDOW_ENV: "5"}, "hang", "demo/tp2-pp1", "--fault", "rank-hang@1", "--timeout", "600"
    )
    assert result.returncode == 1
    v = verdict_of(run_dir, "demo/tp2-pp1")
    assert v["verdict"] == "hang", v["reason"]
    assert "declared by the stall detector" in v["reason"] and "rank 1 idle outside one" in v["reason"], v["reason"]
    assert v["hang"]["stall"]["idle"] == [1] and v["hang"]["stall"]["waiting"] == [0]
    assert set(v["hang"]["stuck_at"]) == {"0", "1"}
    assert "faults.py" in v["hang"]["stuck_at"]["1"]  # the hung rank, at the injected sleep
    assert "faults.py" not in v["hang"]["stuck_at"]["0"]  # its peer, waiting in a collective
    assert all("(most recent call first)" in v["hang"]["stacks"][r] for r in ("0", "1"))
    assert not survivors(run_dir)


def test_ctrl_c_stops_the_ranks_and_still_writes_the_report(demo):
    root, env = demo
    run_dir = root / "reports" / "interrupt"
    proc = start_harness(
        "run",
        "demo/tp1-pp1",
        "demo/tp2-pp2",
        "--report-dir",
        str(root / "reports"),
        "--run-id",
        "interrupt",
        "--fault",
        "rank-hang@0",
        scenarios=root / "scenarios",
        env=env,
    )
    log = logs_dir(run_dir, "demo/tp1-pp1") / "rank0.log"
    wait_until(lambda: log.exists() and bool(survivors(run_dir)), 60, "the first rank to start", poll_s=0.2, proc=proc)
    time.sleep(2)
    assert survivors(run_dir), "the rank never started"
    proc.send_signal(signal.SIGINT)
    out, _ = communicate(proc, 60, "the interrupted harness to exit")
    assert proc.returncode == 130, out
    assert run_meta(run_dir)["interrupted"] is True
    assert "interrupted" in (run_dir / "summary.md").read_text()
    assert not survivors(run_dir)


def test_missing_golden_is_an_error_that_says_how_to_make_it(demo, tmp_path):
    root, env = demo
    result, run_dir = run(root, {**env, "HARNESS_GOLDEN_DIR": str(tmp_path / "none")}, "nogolden", "demo/tp1-pp1")
    assert result.returncode == 1
    v = verdict_of(run_dir, "demo/tp1-pp1")
    assert v["verdict"] == "error" and "harness golden demo" in v["reason"]
    assert not logs_dir(run_dir, "demo/tp1-pp1").exists()  # no launch without a golden


def test_stale_golden_names_what_differs(demo, tmp_path):
    root, env = demo
    import shutil

    stale = tmp_path / "golden"
    shutil.copytree(root / "golden", stale)
    manifest = json.loads((stale / "demo" / "manifest.json").read_text())
    manifest["workload_sha256"] = "0" * 64
    (stale / "demo" / "manifest.json").write_text(json.dumps(manifest))
    result, run_dir = run(root, {**env, "HARNESS_GOLDEN_DIR": str(stale)}, "stale", "demo/tp1-pp1")
    assert result.returncode == 1
    v = verdict_of(run_dir, "demo/tp1-pp1")
    assert v["verdict"] == "error" and "workload_sha256: golden has '000" in v["error"]["exception"]


def test_expected_failure_and_unexpected_pass(demo, tmp_path):
    """The fault goes on the command line of the run that needs it: a suite-wide rank
    fault aimed at a rank a one-rank scenario lacks is refused as an input error."""
    root, env = demo
    scen = tmp_path / "scenarios"
    scen.mkdir()
    (scen / "demo.yaml").write_text(
        DEMO
        + "expected_failures:\n  - {match: {tp: 2, pp: 1, sp: false}, reason: 'known bug: rank 1 raises'}\n"
        + "  - {match: {tp: 1, pp: 1}, reason: 'marked broken, but it is fixed'}\n"
    )
    broken = harness(
        tmp_path, env, "run", "demo/tp2-pp1", "--fault", "rank-raise@1", "--report-dir", str(tmp_path / "r"), "--run-id", "x"
    )
    result = harness(tmp_path, env, "run", "demo/tp1-pp1", "--report-dir", str(tmp_path / "r"), "--run-id", "y")
    xfail, fixed = verdict_of(tmp_path / "r" / "x", "demo/tp2-pp1"), verdict_of(tmp_path / "r" / "y", "demo/tp1-pp1")
    assert xfail["verdict"] == "expected-failure" and xfail["observed"] == "crash" and xfail["as_expected"]
    assert broken.returncode == 0, broken.stdout + broken.stderr
    assert fixed["verdict"] == "pass" and not fixed["as_expected"]  # a fixed bug is noticed
    assert result.returncode == 1 and "demo/tp1-pp1" in result.stderr


# The demo scenarios live outside the project, where its conftest.py does not reach.
PLUGIN = ["-p", "harness.pytest_plugin", "-p", "no:cacheprovider"]


def test_pytest_collects_one_item_per_scenario_and_runs_under_xdist(demo, tmp_path):
    root, env = demo
    collect = pytest_cli(
        str(root / "scenarios"), "--collect-only", "-q", "-m", "pr", *PLUGIN, env=env, timeout=120, what="pytest --collect-only"
    )
    assert "demo.yaml::tp2-pp2" in collect.stdout and "1/6 tests collected" in collect.stdout, collect.stdout
    result = pytest_cli(
        str(root / "scenarios" / "demo.yaml") + "::tp1-pp1",
        str(root / "scenarios" / "demo.yaml") + "::tp2-pp1",
        "-n",
        "2",
        *PLUGIN,
        "--harness-report-dir",
        str(tmp_path),
        env=env,
        timeout=300,
        what="pytest -n 2 over two scenarios",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout
    (run_dir,) = tmp_path.glob("pytest-*")  # both xdist workers wrote into one run directory
    assert len(verdict_files(run_dir)) == 2 and (run_dir / "summary.md").exists()


def test_bad_scenario_file_is_reported_with_file_and_field(tmp_path):
    (tmp_path / "scenarios").mkdir()
    bad = tmp_path / "scenarios" / "bad.yaml"
    bad.write_text(DEMO.replace("golden: {tp: 1, pp: 1, sp: false}", "golden: {tp: 1, pp: 1, sp: false, ep: 4}"))
    result = harness(tmp_path, dict(os.environ), "list")
    assert result.returncode == 2
    assert str(bad) in result.stderr and "golden names axes not in the matrix: ['ep']" in result.stderr
