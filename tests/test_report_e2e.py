"""Reports end to end: real runs on the reference engine, a fault switched on in the
second, the regression at the top of every report, shards merged into one report,
and the HTML opened in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kit import harness_cli, pytest_cli, run_meta, run_process, scaled, verdicts

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]

SUITE = """
suite: rdemo
model: tiny-llama
timeout_s: {timeout}
workloads:
  - {name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 24, top_k: 10}
  - {name: greedy, kind: greedy, num_prompts: 1, max_prompt_tokens: 16, max_new_tokens: 4, top_k: 10}
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2], pp: [1, 2]}
gates: {pr: [tp1-pp1, tp2-pp1]}
""".replace("{timeout}", str(scaled(120)))  # per scenario, scaled for this machine


def env_of(root: Path) -> dict:
    """The suite's own golden; the history beside each report directory."""
    return {"HARNESS_GOLDEN_DIR": str(root / "golden"), "HARNESS_HISTORY_DIR": None}


def harness(root: Path, *args: str) -> subprocess.CompletedProcess:
    return harness_cli(*args, scenarios=root / "scenarios", env=env_of(root))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A clean PR-gate run, then the gate's two-rank scenario with rank 1 made to raise
    (tp1-pp1 has no rank 1: that fault is an `error` there)."""
    root = tmp_path_factory.mktemp("reports-e2e")
    (root / "scenarios").mkdir()
    (root / "scenarios" / "rdemo.yaml").write_text(SUITE)
    made = harness(root, "golden", "rdemo", "--work-dir", str(root / "golden-runs"))
    assert made.returncode == 0, made.stderr
    reports = root / "reports"
    clean = harness(root, "run", "--gate", "pr", "--report-dir", str(reports), "--run-id", "clean")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    faulty = harness(root, "run", "rdemo/tp2-pp1", "--gate", "pr", "--report-dir", str(reports), "--run-id", "faulty",
                     "--fault", "rank-raise@1")
    return root, reports, faulty


def test_a_fault_in_the_second_run_is_reported_as_a_new_regression(runs):
    root, reports, faulty = runs
    assert faulty.returncode == 1, faulty.stdout + faulty.stderr
    assert "failures so far: 1" in faulty.stdout  # plain progress lines: not a terminal
    meta = run_meta(reports / "faulty")
    assert meta["changes"]["previous_run"] == "clean"
    assert meta["changes"]["new_failures"] == ["rdemo/tp2-pp1"]
    assert meta["changes"]["fixed"] == [] and meta["changes"]["still_failing"] == []
    summary = (reports / "faulty" / "summary.md").read_text()
    assert summary.index("New failures (regressions): 1") < summary.index("| scenario |")
    comment = (reports / "faulty" / "pr-comment.md").read_text()
    assert "`rdemo/tp2-pp1` crash (was pass in `clean`)" in comment and "`harness run rdemo/tp2-pp1 --fault rank-raise@1`" in comment
    assert sorted(p.name for p in (reports / "history" / "runs").iterdir()) == ["clean.parquet", "faulty.parquet"]


def test_two_real_shards_merge_into_the_report_of_the_unsharded_run(runs):
    root, reports, _ = runs
    for shard, scenario in (("shard0", "rdemo/tp1-pp1"), ("shard1", "rdemo/tp2-pp1")):
        result = harness(root, "run", scenario, "--gate", "pr", "--report-dir", str(root / shard), "--run-id", shard)
        assert result.returncode == 0, result.stdout + result.stderr
    out = root / "merged" / "clean-merged"
    merged = harness(root, "report", "--merge", str(root / "shard1" / "shard1"), str(root / "shard0" / "shard0"), "-o", str(out))
    assert merged.returncode == 0, merged.stdout + merged.stderr

    def rows(run_dir: Path) -> dict:
        return {sid: (v["verdict"], v["as_expected"], [(c["name"], c["passed"], c["metrics"]) for c in v["checks"]])
                for sid, v in verdicts(run_dir).items()}

    assert rows(out) == rows(reports / "clean")  # the reference engine on CPU is deterministic
    merged_meta, clean_meta = run_meta(out), run_meta(reports / "clean")
    assert merged_meta["counts"] == clean_meta["counts"] == {"pass": 2}
    assert merged_meta["scenarios"] == clean_meta["scenarios"] and merged_meta["merged_from"] == ["shard0", "shard1"]


def test_a_pytest_session_of_the_pr_gate_compares_with_the_cli_runs(runs):
    root, reports, _ = runs
    result = pytest_cli(str(root / "scenarios"), "-m", "pr", "-p", "harness.pytest_plugin", "-p", "no:cacheprovider",
                        "--harness-report-dir", str(reports), env=env_of(root), what="a pytest session of the PR gate")
    assert result.returncode == 0, result.stdout[-3000:]
    (run_dir,) = reports.glob("pytest-*")
    meta = run_meta(run_dir)
    assert meta["gate"] == "pr" and meta["changes"]["previous_run"] == "faulty"
    assert meta["changes"]["fixed"] == ["rdemo/tp2-pp1"] and meta["changes"]["new_failures"] == []
    assert "report.html" in result.stdout


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    return run_process([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], 180, "headless Chromium",
                       capture_output=True, text=True)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
def test_the_html_report_opens_in_a_browser_and_shows_the_regression_first(runs, tmp_path):
    import numpy as np
    from matplotlib.image import imread

    _, reports, _ = runs
    page = (reports / "faulty" / "report.html").as_uri()
    dom = _chromium(tmp_path / "profile-dom", "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    regressions = dom.stdout[dom.stdout.index('id="regressions"'):dom.stdout.index("<h2>Matrix</h2>")]
    assert "Regressed since <code>clean</code>: 1 new failure(s)" in regressions
    assert "rdemo/tp2-pp1" in regressions and "rdemo/tp1-pp1" not in regressions

    shot = tmp_path / "report.png"
    taken = _chromium(tmp_path / "profile-shot", "--window-size=1280,1400", f"--screenshot={shot}", page)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    pixels = imread(shot)[..., :3]
    assert pixels.shape[0] >= 1000 and pixels.std() > 0.05  # not a blank page
    banner = np.array([0xff, 0xeb, 0xee]) / 255  # the regression banner's background
    crash = np.array([0x8e, 0x24, 0xaa]) / 255  # the crash cell of the heat map
    for colour in (banner, crash):
        assert (np.abs(pixels - colour).max(-1) < 0.02).sum() > 500, f"no {colour} area in the screenshot"
