"""Reports end to end: real runs on the reference engine, a fault switched on in the
second, the regression at the top of every report, shards merged into one report,
and the HTML opened in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kit import harness_cli, pytest_cli, run_meta, run_process, scaled, verdicts
from tests.kit.present import present

# One xdist worker runs the whole module (make test's --dist loadgroup): its module-scoped fixture
# (the clean and the faulty run) is made once, not once on each worker that gets one of its tests.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("report-e2e")]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

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
    faulty = harness(
        root,
        "run",
        "rdemo/tp2-pp1",
        "--gate",
        "pr",
        "--report-dir",
        str(reports),
        "--run-id",
        "faulty",
        "--fault",
        "rank-raise@1",
    )
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
    assert (
        "`rdemo/tp2-pp1` crash (was pass in `clean`)" in comment and "`harness run rdemo/tp2-pp1 --fault rank-raise@1`" in comment
    )
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
        return {
            sid: (v["verdict"], v["as_expected"], [(c["name"], c["passed"], c["metrics"]) for c in v["checks"]])
            for sid, v in verdicts(run_dir).items()
        }

    assert rows(out) == rows(reports / "clean")  # the reference engine on CPU is deterministic
    merged_meta, clean_meta = run_meta(out), run_meta(reports / "clean")
    assert merged_meta["counts"] == clean_meta["counts"] == {"pass": 2}
    # the same scenarios; a gate run lists them in its launch order (what failed before first,
    # harness/run/plan/priority.py), which shards merged from two machines cannot have
    assert sorted(merged_meta["scenarios"]) == sorted(clean_meta["scenarios"])
    assert merged_meta["merged_from"] == ["shard0", "shard1"]


def test_a_pytest_session_of_the_pr_gate_compares_with_the_cli_runs(runs):
    root, reports, _ = runs
    result = pytest_cli(
        str(root / "scenarios"),
        "-m",
        "pr",
        "-p",
        "harness.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "--harness-report-dir",
        str(reports),
        env=env_of(root),
        what="a pytest session of the PR gate",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (run_dir,) = reports.glob("pytest-*")
    meta = run_meta(run_dir)
    assert meta["gate"] == "pr" and meta["changes"]["previous_run"] == "faulty"
    assert meta["changes"]["fixed"] == ["rdemo/tp2-pp1"] and meta["changes"]["new_failures"] == []
    assert "report.html" in result.stdout


WINDOW = "--window-size=1400,1400"  # the width the report is read at
# Injected into a copy of a report (the report itself runs no script): opens every
# section, as a reader digging in would, then writes into the page what it measured:
# elements that reach past the window's width outside a box that scrolls, boxes that
# scroll, the sections closed at load, each heat map's drawn and shown size.
PROBE = """<script>
addEventListener("load", () => {
  const closed = [...document.querySelectorAll("details:not([open])")].map(d => d.id);
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const width = document.documentElement.clientWidth;
  const scrolls = e => { for (let a = e.parentElement; a; a = a.parentElement) if (getComputedStyle(a).overflowX !== "visible") return true; return false; };
  const beyond = [...document.body.querySelectorAll("*")].filter(e => e.getBoundingClientRect().right > width + 1 && !scrolls(e));
  const heatmaps = [...document.querySelectorAll("img[alt^='verdict heat map of']")].map(
    i => ({alt: i.alt, drawn: [i.naturalWidth, i.naturalHeight], shown: [i.width, i.height]}));
  const out = {width, page: document.documentElement.scrollWidth, beyond: beyond.map(e => e.tagName + "." + e.className),
               scrolling: [...document.querySelectorAll(".scroll")].filter(b => b.scrollWidth > b.clientWidth).length, closed, heatmaps};
  document.body.insertAdjacentHTML("beforeend", "<pre id=probe>" + JSON.stringify(out) + "</pre>");
});
</script>"""


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium, which its callers' tests are skipped without."""
    return run_process(
        [present(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        180,
        "headless Chromium",
        capture_output=True,
        text=True,
    )


def _probed(report: Path, tmp_path: Path) -> tuple[str, dict]:
    """The report's DOM at 1400 px, every section open, and what PROBE measured in it."""
    import json

    page = tmp_path / "probed.html"
    page.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium(tmp_path / "profile-probe", WINDOW, "--dump-dom", page.as_uri())
    assert dom.returncode == 0 and '<pre id="probe">' in dom.stdout, dom.stderr[-2000:]
    found = dom.stdout.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0]
    return dom.stdout, json.loads(found.replace("&quot;", '"').replace("&amp;", "&"))


def _reads_at_1400_px(probe: dict) -> None:
    assert probe["width"] >= 1360 and probe["page"] <= probe["width"], probe  # the page itself never scrolls sideways
    assert probe["beyond"] == [], probe["beyond"]


def _not_run_pixels(dom: str) -> dict[str, int]:
    """Per heat map in the page: its pixels of the 'not run' colour."""
    import base64
    import io
    import re

    import numpy as np
    from matplotlib.image import imread

    from harness.run.report.plots import COLORS

    not_run = np.array([int(COLORS["not run"][i : i + 2], 16) for i in (1, 3, 5)]) / 255
    found = {}
    for alt, data in re.findall(r'alt="verdict heat map of ([^"]+)" src="data:image/png;base64,([^"]+)"', dom):
        pixels = imread(io.BytesIO(base64.b64decode(data)))[..., :3]
        found[alt] = int((np.abs(pixels - not_run).max(-1) < 0.004).sum())
    return found


@pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)"
)
def test_the_html_report_opens_in_a_browser_and_shows_the_regression_first(runs, tmp_path):
    import numpy as np
    from matplotlib.image import imread

    _, reports, _ = runs
    page = (reports / "faulty" / "report.html").as_uri()
    dom = _chromium(tmp_path / "profile-dom", WINDOW, "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    regressions = dom.stdout[dom.stdout.index('id="regressions"') : dom.stdout.index("<h2>Scenarios</h2>")]
    assert "Regressed since <code>clean</code>: 1 new failure(s)" in regressions
    assert "rdemo/tp2-pp1" in regressions and "rdemo/tp1-pp1" not in regressions
    # a PR gate: the scenario table, then the heat maps and what their numbers are
    assert (
        dom.stdout.index("<h2>Scenarios</h2>")
        < dom.stdout.index('id="heatmap-label"')
        < dom.stdout.index('alt="verdict heat map')
    )
    _, probe = _probed(reports / "faulty" / "report.html", tmp_path)
    _reads_at_1400_px(probe)
    (one_cell,) = probe["heatmaps"]
    assert one_cell["drawn"][0] < 300 and one_cell["drawn"][1] < 200 and one_cell["shown"] == one_cell["drawn"], one_cell

    shot = tmp_path / "report.png"
    taken = _chromium(tmp_path / "profile-shot", WINDOW, f"--screenshot={shot}", page)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (1400, 1400) and pixels.std() > 0.05  # not a blank page
    banner = np.array([0xFF, 0xEB, 0xEE]) / 255  # the regression banner's background
    crash = np.array([0x8E, 0x24, 0xAA]) / 255  # the crash cell of the table and the heat map
    for colour in (banner, crash):
        assert (np.abs(pixels - colour).max(-1) < 0.02).sum() > 500, f"no {colour} area in the screenshot"


def _pr_gate_of_three_suites(base: Path) -> Path:
    """A PR gate's few scenarios of a tp x pp x sp matrix (one failing, with a check of many
    metrics), a one-scenario suite, and a suite the engine could not run at all."""
    from harness.contract.verdict import Verdict
    from harness.run.report import write_report
    from tests.kit.handmade import failing, make_run, passing

    wide = failing("tiny/tp2-pp2")
    wide.checks[0]["metrics"].update({f"a_metric_with_a_long_name_{i}": i / 7 for i in range(30)})
    tiny = [passing("tiny/tp1-pp1"), passing("tiny/tp2-pp1"), passing("tiny/tp1-pp2"), wide, passing("tiny/tp2-pp2-sp")]
    vl = [
        Verdict(f"vl/tp{t}-pp1", "unsupported", "the engine takes no images", settings={"tp": t, "pp": 1, "sp": False})
        for t in (1, 2)
    ]
    run = make_run(base, "pr-three", [*tiny, passing("one/tp2-pp1"), *vl])
    write_report(run)
    return run / "report.html"


@pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)"
)
def test_a_pr_gate_report_reads_at_1400_px_with_every_section_open(tmp_path):
    import numpy as np
    from matplotlib.image import imread

    report = _pr_gate_of_three_suites(tmp_path)
    dom, probe = _probed(report, tmp_path)
    assert dom.index("<h2>Scenarios</h2>") < dom.index("<h2>Matrix</h2>") < dom.index('alt="verdict heat map')
    assert "<b>max |dlogprob|</b>" in dom[dom.index('id="heatmap-label"') : dom.index('alt="verdict heat map')]
    _reads_at_1400_px(probe)
    assert probe["scrolling"] >= 1  # the metrics table is wider than its box: it scrolls there
    # not run: the sp=on panel shows its one scenario, not a 2 x 2 grid of three "not run";
    # the suite that tested nothing is one line, its heat map in a closed section
    not_run = _not_run_pixels(dom)  # a "not run" cell is thousands (the sp=on panel had 42000 before)
    assert sorted(not_run) == ["one", "tiny", "vl"] and max(not_run.values()) < 500, not_run  # antialiased edges
    assert "untested-suites" in probe["closed"]
    folded = dom[dom.index('id="untested-suites"') :]
    folded = folded[: folded.index("</details>")]
    assert 'alt="verdict heat map of vl"' in folded and 'alt="verdict heat map of tiny"' not in folded
    sizes = {h["alt"].rsplit(" ", 1)[1]: h for h in probe["heatmaps"]}
    assert sizes["one"]["drawn"][1] < 200 and sizes["one"]["shown"] == sizes["one"]["drawn"]  # a one-cell suite drawn small
    assert sizes["tiny"]["drawn"][1] < 300 and sizes["tiny"]["drawn"][0] < probe["width"]

    shot = tmp_path / "report.png"
    taken = _chromium(tmp_path / "profile-shot", WINDOW, f"--screenshot={shot}", report.as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (1400, 1400) and pixels.std() > 0.05
    fail = np.array([0xE5, 0x39, 0x35]) / 255  # the failing scenario: its table row and its heat-map cell
    rows = np.flatnonzero((np.abs(pixels - fail).max(-1) < 0.02).sum(1) > 0)
    assert rows.size and rows[0] < 700, "no failing scenario in the first screen"
