"""A run's results are its own, complete or said to be incomplete, and stored or said
not to be: run directories no two runs share, reports of killed and interrupted runs
that name what never ran, exit codes CI can tell apart, provenance that is really the
harness's own. A CI job must never read a run as more than it was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import harness
from harness.cli import main
from harness.cli.run import harness_versions
from harness.contract import exit_codes, rundir
from harness.contract.rundir import verdict_files
from harness.run.plan.devices import DevicePool, default_lock_dir
from harness.run.report.history import load_history
from tests.kit import ROOT, communicate, harness_cli, scaled, start_harness, summary, timeout_message, wait_until
from tests.kit.handmade import failing, make_run, passing
from tests.kit.present import present

# A scenario that needs 2 devices, run with --devices 1: it ends `unsupported` (as
# expected) without launching a rank, so a whole `harness run` costs seconds.
CHEAP = """
suite: cheap
model: tiny-llama
workloads:
  - {name: logits, kind: logprobs, num_prompts: 1, max_prompt_tokens: 8, top_k: 5}
golden: {tp: 1, pp: 1}
matrix: {tp: [2], pp: [1]}
"""


@pytest.fixture
def cheap(tmp_path) -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "cheap.yaml").write_text(CHEAP)
    return tmp_path


def cheap_run_args(root: Path, *extra: str) -> list[str]:
    """A run that starts no rank: one device for a tp2 scenario ends it `unsupported`
    (--allow-empty: these tests are about run directories, not about what was tested)."""
    return [
        "--scenarios",
        str(root / "scenarios"),
        "run",
        "cheap/tp2-pp1",
        "--devices",
        "1",
        "--report-dir",
        str(root / "reports"),
        "--allow-empty",
        *extra,
    ]


def run_dirs(reports: Path) -> list[Path]:
    return sorted(p for p in reports.iterdir() if p.name != "history")


# 1. Run directories -----------------------------------------------------------------


def test_two_runs_started_in_the_same_second_get_a_directory_each(cheap, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda *a: "20260101-000000")  # both runs start "in the same second"
    assert main(cheap_run_args(cheap)) == exit_codes.OK
    assert main(cheap_run_args(cheap)) == exit_codes.OK
    first, second = run_dirs(cheap / "reports")  # two directories, not one shared
    for run_dir in (first, second):
        meta = json.loads((run_dir / "run.json").read_text())
        assert meta["run_id"] == run_dir.name and meta["scenarios"] == ["cheap/tp2-pp1"]
        assert meta["counts"] == {"unsupported": 1}
    assert len(load_history(cheap / "reports" / "history")) == 2  # each run's row kept


@pytest.mark.e2e
def test_a_run_refuses_the_directory_another_run_owns(cheap):
    first = harness_cli(*cheap_run_args(cheap, "--run-id", "same"))
    assert first.returncode == exit_codes.OK, first.stderr
    run_dir = cheap / "reports" / "same"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    second = harness_cli(*cheap_run_args(cheap, "--run-id", "same"))
    assert second.returncode == exit_codes.USAGE
    assert "already in use" in second.stderr and "--run-id" in second.stderr and "Traceback" not in second.stderr
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before  # the first run's results are untouched


def test_the_layout_of_a_run_directory(tmp_path):
    """harness/contract/rundir.py spells the layout; everything else (runner, reports, tests) asks it."""
    run_dir = rundir.claim_run_dir(tmp_path, "r", {"scenarios": ["suite/tp1-pp2"]})
    assert rundir.run_meta_path(run_dir) == run_dir / "run.json" and rundir.run_meta_path(run_dir).is_file()
    assert rundir.scenarios_root(run_dir).is_dir()
    where = run_dir / "scenarios" / "suite__tp1-pp2"
    assert rundir.scenario_dir(run_dir, "suite/tp1-pp2") == where
    assert (
        rundir.verdict_path(run_dir, "suite/tp1-pp2"),
        rundir.brief_path(run_dir, "suite/tp1-pp2"),
        rundir.outputs_dir(run_dir, "suite/tp1-pp2"),
        rundir.logs_dir(run_dir, "suite/tp1-pp2"),
    ) == (where / "verdict.json", where / "spec.json", where / "outputs", where / "logs")
    rundir.verdict_path(run_dir, "suite/tp1-pp2").parent.mkdir()
    rundir.verdict_path(run_dir, "suite/tp1-pp2").write_text("{}")
    assert rundir.verdict_files(run_dir) == [where / "verdict.json"]


@pytest.mark.parametrize(
    "what, text, found",
    [
        *((what, "[]", "holds a JSON array where a JSON object") for what in ("verdict.json", "spec.json", "outputs.json")),
        *((what, "null", "holds JSON null where a JSON object") for what in ("verdict.json", "spec.json", "outputs.json")),
        ("verdict.json", '{"colour": "blue"}', "is not a verdict: unexpected field 'colour'"),
        ("spec.json", '{"colour": "blue"}', "is not a run brief: unexpected field 'colour'"),
    ],
)
def test_a_run_file_that_is_json_but_not_what_it_should_be_is_an_error_naming_it(tmp_path, what, text, found):
    """A file a user can damage by hand (a bad merge, an edit) used to end in a bare
    AttributeError or TypeError that named neither the file nor what it should hold."""
    from harness.contract.outputs import EngineOutputs
    from harness.contract.runbrief import RunBrief
    from harness.contract.verdict import Verdict

    EngineOutputs(meta={"engine": "reference"}).save(tmp_path)
    path = tmp_path / what
    path.write_text(text)
    load = {"verdict.json": Verdict.load, "spec.json": RunBrief.load, "outputs.json": lambda _: EngineOutputs.load(tmp_path)}
    with pytest.raises(ValueError) as err:
        load[what](path)
    assert str(path) in str(err.value) and found in str(err.value), err.value


def test_rebuilding_the_report_of_a_run_whose_run_json_is_not_an_object_names_it(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r", [passing("s/tp1-pp1")])
    (run_dir / "run.json").write_text("[]")
    assert main(["report", str(run_dir)]) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert f"{run_dir / 'run.json'} holds a JSON array where a JSON object" in err, err


def test_of_runs_racing_for_one_run_id_exactly_one_gets_it(tmp_path):
    from harness.contract.rundir import RunDirTaken, claim_run_dir

    won, refused = [], []
    start = threading.Barrier(8)

    def claim(i):
        start.wait()
        try:
            won.append(claim_run_dir(tmp_path, "same", {"scenarios": [f"s/{i}"]}))
        except RunDirTaken:
            refused.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7


# 2. Runs whose scenarios did not all end --------------------------------------------


def killed_run(base: Path, run_id: str, ended: list, planned: list[str], started: float) -> Path:
    """A run directory as a SIGKILLed harness leaves it: the planned list in run.json,
    the verdicts of the scenarios that ended, no `finished`."""
    run_dir = make_run(base, run_id, ended, started=started, scenarios=planned)
    meta = json.loads((run_dir / "run.json").read_text())
    del meta["finished"]
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


def test_report_of_a_killed_run_names_what_never_ran_and_is_not_a_success(tmp_path, capsys):
    run_dir = killed_run(tmp_path, "killed", [passing("s/tp1-pp1")], ["s/tp1-pp1", "s/tp2-pp1"], started=1000.0)
    assert main(["report", str(run_dir)]) == exit_codes.INCOMPLETE
    text = summary(run_dir)
    assert "**INCOMPLETE**: 1 pass, 1 never ran of 2 scenarios" in text and "**OK**" not in text
    assert "never ran" in text and "`s/tp2-pp1`" in text
    assert "INCOMPLETE" in (run_dir / "pr-comment.md").read_text()
    cases = {c.get("name"): [child.tag for child in c] for c in ET.parse(run_dir / "junit.xml").getroot().iter("testcase")}
    assert cases == {"tp1-pp1": [], "tp2-pp1": ["error"]}  # CI does not read it as green
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["never_ran"] == ["s/tp2-pp1"] and meta["complete"] is False
    assert "Incomplete" in (run_dir / "report.html").read_text()


def test_an_incomplete_run_is_never_the_previous_run_of_its_gate(tmp_path):
    both = ["s/tp1-pp1", "s/tp2-pp1"]
    r0 = make_run(tmp_path, "r0", [failing("s/tp1-pp1"), passing("s/tp2-pp1")], started=1000.0)
    r1 = killed_run(tmp_path, "r1", [passing("s/tp1-pp1")], both, started=2000.0)
    r2 = make_run(tmp_path, "r2", [passing("s/tp1-pp1"), passing("s/tp2-pp1")], started=3000.0)
    for run_dir in (r0, r1, r2):
        main(["report", str(run_dir)])
    changes = json.loads((r2 / "run.json").read_text())["changes"]
    assert changes["previous_run"] == "r0"  # not the killed r1
    history = load_history(tmp_path / "history")
    assert set(history[history["run_id"] == "r1"]["complete"]) == {False}  # kept, marked
    assert set(history[history["run_id"] != "r1"]["complete"]) == {True}


@pytest.mark.e2e
def test_a_harness_killed_after_one_scenario_leaves_an_incomplete_run(tmp_path):
    reports, run_dir = tmp_path / "reports", tmp_path / "reports" / "killed"
    proc = start_harness(
        "run",
        "llama-tiny/tp1-pp1",
        "llama-tiny/tp2-pp1",
        "--jobs",
        "1",
        "--devices",
        "2",
        "--report-dir",
        str(reports),
        "--run-id",
        "killed",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: len(verdict_files(run_dir)) >= 1, 600, "the first scenario to end", poll_s=0.05, proc=proc)
    finally:
        proc.kill()
        proc.wait()
    ended = [json.loads(p.read_text())["scenario"] for p in verdict_files(run_dir)]
    assert len(ended) == 1, f"the harness was to be killed after one scenario, {ended} ended"
    result = harness_cli("report", str(run_dir))
    assert result.returncode == exit_codes.INCOMPLETE, result.stdout + result.stderr
    (never,) = {"llama-tiny/tp1-pp1", "llama-tiny/tp2-pp1"} - set(ended)
    assert "**INCOMPLETE**" in summary(run_dir) and f"`{never}`" in summary(run_dir)
    assert set(load_history(reports / "history")["complete"]) == {False}


# 4. Results that cannot be written --------------------------------------------------


@pytest.mark.e2e
def test_a_history_that_cannot_be_written_stops_the_run_before_any_scenario(cheap):
    not_a_dir = cheap / "history-file"
    not_a_dir.write_text("a file, not a directory")
    result = harness_cli(*cheap_run_args(cheap, "--history", str(not_a_dir)))
    assert result.returncode == exit_codes.RESULTS_NOT_WRITTEN, result.stdout + result.stderr
    assert "cannot write the history store" in result.stderr and str(not_a_dir) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (cheap / "reports").exists() or run_dirs(cheap / "reports") == []  # no report at all, none claiming OK


@pytest.mark.e2e  # the harness CLI in a process of its own
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_history_directory_stops_the_run(cheap):
    history = cheap / "history"
    (history / "runs").mkdir(parents=True)
    (history / "runs").chmod(0o555)
    result = harness_cli(*cheap_run_args(cheap, "--history", str(history)))
    assert result.returncode == exit_codes.RESULTS_NOT_WRITTEN and "Traceback" not in result.stderr


@pytest.mark.e2e
def test_a_report_directory_that_cannot_be_made_is_a_distinct_exit_code(cheap):
    (cheap / "file").write_text("")
    result = harness_cli(*cheap_run_args(cheap, "--report-dir", str(cheap / "file" / "reports")))
    assert result.returncode == exit_codes.RESULTS_NOT_WRITTEN, result.stdout + result.stderr
    assert "cannot" in result.stderr and str(cheap / "file") in result.stderr and "Traceback" not in result.stderr


def test_a_report_whose_history_cannot_be_written_says_so_and_claims_no_success(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r1", [passing("s/tp1-pp1")])
    (tmp_path / "history-file").write_text("")
    assert main(["report", str(run_dir), "--history", str(tmp_path / "history-file")]) == exit_codes.RESULTS_NOT_WRITTEN
    text = summary(run_dir)
    assert "**NOT RECORDED**" in text and "**OK**" not in text and "could not be written" in text
    assert json.loads((run_dir / "run.json").read_text())["history_error"]
    assert main(["report", str(run_dir)]) == exit_codes.OK  # recorded once the history can be written
    assert "**OK**" in summary(run_dir) and "history_error" not in json.loads((run_dir / "run.json").read_text())


def test_rebuilding_a_report_where_it_cannot_be_written_is_a_distinct_exit_code(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r1", [passing("s/tp1-pp1")])
    (run_dir / "summary.md").mkdir()  # in the way of the file (a read-only directory does not stop root)
    assert main(["report", str(run_dir)]) == exit_codes.RESULTS_NOT_WRITTEN
    assert "cannot write the report" in capsys.readouterr().err


def test_every_exit_code_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in ("OK", "NOT_AS_EXPECTED", "USAGE", "RESULTS_NOT_WRITTEN", "INCOMPLETE", "NOTHING_TESTED", "INTERRUPTED"):
        assert f"| {getattr(exit_codes, name)} |" in readme, name


# 5. Runs interrupted before their first scenario ------------------------------------


def test_a_run_interrupted_before_its_first_scenario_can_be_rebuilt(tmp_path, capsys):
    run_dir = tmp_path / "early"
    run_dir.mkdir()  # as a run interrupted that early left it: run.json with the plan, nothing else
    (run_dir / "run.json").write_text(
        json.dumps({"run_id": "early", "gate": "pr", "started": 1000.0, "scenarios": ["s/tp1-pp1"], "interrupted": True})
    )
    assert main(["report", str(run_dir)]) == exit_codes.INCOMPLETE
    text = summary(run_dir)
    assert "**INCOMPLETE**: 1 never ran of 1 scenarios" in text and "`s/tp1-pp1`" in text


@pytest.mark.e2e
def test_ctrl_c_before_the_first_scenario_ends_says_none_ran(tmp_path):
    """The run waits for a device this test holds, so no scenario can end before Ctrl-C."""
    run_dir = tmp_path / "reports" / "early"
    held = DevicePool(1, "cpu", lock_dir=default_lock_dir("cpu")).try_lease(1, "held by the test")
    assert held is not None
    proc = start_harness(
        "run", "llama-tiny/tp1-pp1", "--devices", "1", "--jobs", "1", "--report-dir", str(run_dir.parent), "--run-id", "early"
    )
    try:
        seen = []
        for line in present(proc.stdout):  # (piped by start_harness) the scenario has started: it now waits for the held device
            seen.append(line)
            if "start llama-tiny/tp1-pp1" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = communicate(proc, 300, "the interrupted harness to exit")
    finally:
        held.release()
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + out
    assert proc.returncode == exit_codes.INTERRUPTED, out
    assert "harness: 1 never ran; report:" in out and "harness: ; report" not in out
    text = summary(run_dir)
    assert "**INCOMPLETE**" in text and "**OK**" not in text and "`llama-tiny/tp1-pp1`" in text
    assert harness_cli("report", str(run_dir)).returncode == exit_codes.INCOMPLETE


# 15. Provenance ---------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.e2e
def test_a_copy_inside_another_git_repository_records_no_commit(tmp_path):
    outer = tmp_path / "monorepo"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "README").write_text("another project")
    git(outer, "add", "README")
    git(outer, "commit", "-q", "-m", "another project's commit")
    outer_commit = git(outer, "rev-parse", "--short", "HEAD")
    copy = outer / "vendor" / "harness-copy"  # the project copied in, no .git of its own
    shutil.copytree(ROOT / "harness", copy / "harness", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    code = "import json; from harness.cli.run import harness_versions; print(json.dumps(harness_versions()))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(copy)},
        check=True,
    )
    versions = json.loads(result.stdout)
    assert versions["harness_commit"] == "unknown" and outer_commit not in result.stdout
    assert versions["harness_version"] == harness.__version__


def test_the_projects_own_checkout_records_its_commit_and_version():
    toplevel = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=False, cwd=ROOT, capture_output=True, text=True)
    if toplevel.returncode != 0 or Path(toplevel.stdout.strip()).resolve() != ROOT.resolve():
        pytest.skip("this copy of the project is not a git checkout of its own")
    versions = harness_versions()
    assert versions["harness_commit"] == git(ROOT, "rev-parse", "--short", "HEAD")
    assert versions["harness_version"] == harness.__version__


# 14. A harness killed while it writes a file (found by reading the code beside the soak, docs/RELIABILITY.md) -----

BIG = 48 * 2**20  # a file that takes many pages to write: the kill lands while it is written

WRITERS = {
    # the runner's last act for a scenario
    "verdict": (
        "from harness.contract.verdict import Verdict; "
        "Verdict('s/tp1-pp1', 'pass', 'x' * {big}).save(run_dir / 'scenarios' / 's__tp1-pp1' / 'verdict.json')"
    ),
    # the report at the start and the end of every run (and every `harness report`)
    "run.json": "from harness.run.report import write_report; write_report(run_dir, {{'pad': 'x' * {big}}})",
}


@pytest.mark.e2e
@pytest.mark.parametrize("what", sorted(WRITERS))
def test_a_harness_killed_while_writing_a_run_file_leaves_the_old_file_or_the_whole_new_one(tmp_path, what):
    """A SIGKILL mid-write must not leave half a verdict.json or run.json: `harness report`
    could not read the run any more, and a half verdict is a scenario that ran but
    cannot be reported."""
    run_dir = make_run(tmp_path, "r1", [], scenarios=["s/tp1-pp1"])
    (run_dir / "scenarios" / "s__tp1-pp1").mkdir(parents=True)
    before = (run_dir / "run.json").read_text()
    code = f"import sys; from pathlib import Path; run_dir = Path(sys.argv[1]); {WRITERS[what].format(big=BIG)}"
    child = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], cwd=ROOT)
    deadline = time.monotonic() + scaled(120)
    try:
        while time.monotonic() < deadline and child.poll() is None:
            sizes = [p.stat().st_size for p in run_dir.rglob("*") if p.is_file()]
            if max(sizes, default=0) > 2**20:  # the big file is being written
                child.send_signal(signal.SIGKILL)
                break
        else:
            pytest.fail(
                timeout_message(f"the child to start writing {what}", scaled(120))
                if child.poll() is None
                else f"the child ended ({child.returncode}) before it could be killed mid-write"
            )
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    written = max((p.stat().st_size for p in run_dir.rglob("*") if p.is_file()), default=0)
    assert written < BIG, "the write ended before the kill: make BIG bigger"
    meta = json.loads((run_dir / "run.json").read_text())  # whole: the old one, or the new one
    assert meta == json.loads(before) or meta.get("pad") == "x" * BIG
    for path in verdict_files(run_dir):  # none, or a whole one
        assert json.loads(path.read_text())["reason"] == "x" * BIG
