"""A full, read-only or over-quota disk under the harness's own files is the machine's
fault: `error` naming the path, exit code 3, never an engine `crash` ("SafetensorError ...
No space left on device" used to be judged a crash of rank 0).

The full disk is a tmpfs too small for the run's outputs, mounted in a user and mount
namespace of the test's own (no privileges needed where user namespaces are allowed)."""

from __future__ import annotations

import errno
import io
import json
import os
import shlex
import shutil
import subprocess

import pytest

from harness.contract import exit_codes
from harness.contract.outputs import TENSORS_FILE
from harness.contract.storage import describe, storage_error, storage_fault
from tests.kit import ROOT, run_meta, run_process, summary, verdict_of
from tests.kit.cli import environment, harness_command
from tests.kit.present import present

SAFETENSORS_ENOSPC = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


class SafetensorError(Exception):
    """What safetensors raises: no errno, no path, the fault only in its text."""


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/out.bin"), ("ENOSPC", "/r/out.bin")),
        (OSError(errno.EROFS, os.strerror(errno.EROFS)), ("EROFS", None)),
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/q"), ("EDQUOT", "/q")),
        (SafetensorError(SAFETENSORS_ENOSPC), ("ENOSPC", None)),
        (SafetensorError("write failed: Read-only file system"), ("EROFS", None)),
    ],
)
def test_a_disk_fault_is_recognised_by_errno_or_by_its_words(exc, expected):
    fault = storage_fault(exc)
    assert fault is not None and (fault["errno"], fault["path"]) == expected


def test_a_disk_fault_under_a_wrapper_is_found_and_other_errors_are_not():
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/x")
        except OSError as inner:
            raise RuntimeError("the engine could not save") from inner
    except RuntimeError as outer:
        assert present(storage_fault(outer))["path"] == "/r/x"
    for other in (
        FileNotFoundError(errno.ENOENT, "No such file", "/x"),
        KeyError("residual"),
        MemoryError(),
        RuntimeError("tensor of 28 elements"),
    ):
        assert storage_fault(other) is None
    assert storage_error(KeyError("residual"), "/x") is None


def can_mount_a_tmpfs() -> bool:
    """A user and mount namespace of our own (unshare -Urm), where anyone may mount a tmpfs."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


def run_on_a_tmpfs(tmp_path, size: str, what: str):
    """`harness run llama-tiny/tp1-pp1 --run-id r` with its --report-dir on a tmpfs of
    `size`, mounted in a user and mount namespace of its own; the result, and a copy of
    the run directory (the tmpfs is gone with its namespace)."""
    reports, history = tmp_path / "reports", tmp_path / "history"
    reports.mkdir()
    run = shlex.join(
        harness_command(
            "run", "llama-tiny/tp1-pp1", "--jobs", "1", "--report-dir", str(reports), "--history", str(history), "--run-id", "r"
        )
    )
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(reports))} && {run}; code=$?; "
        f"cp -r {shlex.quote(str(reports / 'r'))} {shlex.quote(str(tmp_path / 'r'))}; exit $code"
    )
    result = run_process(
        ["unshare", "-Urm", "sh", "-c", script], 600, what, cwd=ROOT, env=environment(), capture_output=True, text=True
    )
    return result, tmp_path / "r"


@pytest.mark.e2e
@pytest.mark.skipif(
    not can_mount_a_tmpfs(), reason="needs `unshare -Urm` (user namespaces) to mount a small tmpfs as a full disk"
)
def test_a_rank_whose_outputs_meet_a_full_disk_is_a_machine_fault_with_exit_code_3(tmp_path):
    """The real thing: the run directory on a 160 KiB tmpfs, which takes the run's brief,
    logs and verdict but not llama-tiny's 220 KB of outputs. The engine's rank meets the
    full disk (safetensors' error, which names no path), the harness names the path."""
    result, run_dir = run_on_a_tmpfs(tmp_path, "160k", "harness run on a full disk")
    reports = tmp_path / "reports"
    assert result.returncode == exit_codes.RESULTS_NOT_WRITTEN, result.stdout + result.stderr
    outputs = reports / "r" / "scenarios" / "llama-tiny__tp1-pp1" / "outputs" / TENSORS_FILE
    verdict = verdict_of(run_dir, "llama-tiny/tp1-pp1")
    assert verdict["verdict"] == "error", verdict["reason"]  # not `crash`: the engine did nothing wrong
    assert verdict["reason"].startswith(f"machine fault: rank 0 cannot write {outputs}: No space left on device (ENOSPC)")
    assert "results not written (a disk fault, not the engine): llama-tiny/tp1-pp1" in result.stderr
    assert "**OK**" not in summary(run_dir)
    assert run_meta(run_dir)["results_not_written"] == ["llama-tiny/tp1-pp1"]


def test_the_harness_meeting_a_full_disk_in_a_scenario_is_a_machine_fault(tmp_path, monkeypatch):
    """The runner's own writes (spec.json, its directories) are the harness's files too."""
    from harness.inputs.scenarios.loading import load_scenarios
    from harness.run import runner

    scenario = next(s for s in load_scenarios(None) if s.id == "llama-tiny/tp1-pp1")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/reports/r/spec.json")

    monkeypatch.setattr(runner, "_run", full)
    verdict = runner.run_scenario(scenario, tmp_path)
    assert verdict.error is not None
    assert verdict.verdict == "error" and verdict.error["storage"]["path"] == "/reports/r/spec.json"
    assert verdict.reason.startswith("machine fault: the harness cannot write /reports/r/spec.json")
    assert describe(verdict.error["storage"]) in verdict.reason


REPORT_FILES = ("run.json", "junit.xml", "summary.md", "pr-comment.md", "report.html")


def test_a_report_the_disk_cannot_take_whole_leaves_the_previous_report_as_it_was(tmp_path, monkeypatch):
    """The report files are written all or none. The disk fills up while
    report.html is written: the start-of-run report (INCOMPLETE) stays, whole, and no
    file says OK for a run whose report could not be written."""
    from harness.contract import rundir
    from harness.run.report import write_report
    from tests.kit.handmade import make_run, passing

    run_dir = make_run(tmp_path, "r", [])
    meta = run_meta(run_dir)
    meta["scenarios"] = ["s/tp1-pp1"]
    (run_dir / "run.json").write_text(json.dumps(meta))
    write_report(run_dir)  # the start-of-run report: the planned scenario has not ended
    before = {name: (run_dir / name).read_bytes() for name in REPORT_FILES}
    assert "**INCOMPLETE**" in summary(run_dir)
    passing("s/tp1-pp1").save(rundir.verdict_path(run_dir, "s/tp1-pp1"))

    class DiskFullHalfWay(io.TextIOWrapper):
        def write(self, text):
            super().write(text[: len(text) // 2])  # half of it reaches the disk, then ENOSPC
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fdopen(fd, mode, **kwargs):
        if ".report.html." in os.readlink(f"/proc/self/fd/{fd}"):
            return DiskFullHalfWay(open(fd, "wb"), **kwargs)
        return open(fd, mode, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)  # the module rundir writes through
    with pytest.raises(OSError, match="No space left"):
        write_report(run_dir)
    assert {name: (run_dir / name).read_bytes() for name in REPORT_FILES} == before
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([*REPORT_FILES, "scenarios"])  # no temporary file left
    assert "**OK**" not in summary(run_dir) and "**OK**" not in (run_dir / "pr-comment.md").read_text()
    assert 'errors="1"' in (run_dir / "junit.xml").read_text()  # the never-ended scenario, not a green suite
    assert (run_dir / "report.html").read_text().rstrip().endswith("</html>")

    monkeypatch.undo()  # space again: `harness report` rebuilds it
    write_report(run_dir)
    assert "**OK**" in summary(run_dir)


@pytest.mark.e2e
@pytest.mark.skipif(
    not can_mount_a_tmpfs(), reason="needs `unshare -Urm` (user namespaces) to mount a small tmpfs as a full disk"
)
def test_a_run_whose_report_meets_a_full_disk_exits_3_and_no_report_file_says_ok(tmp_path):
    """The failure as first seen: a tmpfs that takes the scenario's outputs and verdict (about
    260 KB) but not the final report beside the start-of-run one. Used to exit 3 with
    summary.md and pr-comment.md saying OK, junit.xml green and report.html cut off."""
    result, run_dir = run_on_a_tmpfs(tmp_path, "288k", "harness run with a report on a full disk")
    reports = tmp_path / "reports"
    assert result.returncode == exit_codes.RESULTS_NOT_WRITTEN, result.stdout + result.stderr
    assert f"harness: cannot write the report in {reports / 'r'}: No space left on device" in result.stderr
    assert verdict_of(run_dir, "llama-tiny/tp1-pp1")["verdict"] == "pass"  # the result itself is on disk
    assert "**OK**" not in summary(run_dir) and "**OK**" not in (run_dir / "pr-comment.md").read_text()
    assert 'errors="0"' not in (run_dir / "junit.xml").read_text()
    assert (run_dir / "report.html").read_text().rstrip().endswith("</html>")
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]  # no temporary file left
