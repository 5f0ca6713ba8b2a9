"""Progress while a run runs: plain lines for logs, a live display for a terminal."""

import io
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from rich.console import Console

from harness.contract.verdict import Verdict
from harness.inputs.scenarios.scenario import Scenario
from harness.run.report.progress import LineProgress, LiveProgress, choose_progress


def finish_from_threads(progress, n: int) -> None:
    """n scenarios start and finish on n threads at once (as under --jobs)."""
    progress.start(n, Path("reports/x"))
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        scenario = SimpleNamespace(id=f"s/tp{i}")
        progress.scenario_started(scenario)
        barrier.wait()
        progress.scenario_finished(Verdict(scenario.id, "fail" if i % 4 == 0 else "pass", "r"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    progress.close()


def test_plain_lines_count_done_and_failures_under_threads():
    out = io.StringIO()
    finish_from_threads(LineProgress(out), 16)
    lines = out.getvalue().splitlines()
    assert lines[0] == "harness: running 16 scenarios -> reports/x"
    finished = [line for line in lines if "failures so far" in line]
    assert len(finished) == 16
    assert sorted(int(line[1:].split("/")[0]) for line in finished) == list(range(1, 17))  # no count lost or repeated
    assert sum("NOT AS EXPECTED" in line for line in finished) == 4
    assert lines[-1].startswith("harness: 16/16 scenarios in ") and lines[-1].endswith(", 4 not as expected")


def test_live_display_prints_every_finished_scenario_and_a_summary():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    finish_from_threads(LiveProgress(console), 8)
    text = out.getvalue()
    for i in range(8):
        assert f"s/tp{i}: " in text
    assert "harness: 8/8 scenarios in " in text and "2 not as expected" in text


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_display_only_for_a_person_at_a_terminal(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert isinstance(choose_progress(io.StringIO()), LineProgress)  # a pipe or a log file
    assert isinstance(choose_progress(FakeTerminal()), LiveProgress)
    monkeypatch.setenv("CI", "true")
    assert isinstance(choose_progress(FakeTerminal()), LineProgress)


def test_a_long_scenario_prints_what_it_is_doing_in_a_log(tmp_path):
    """A compile scenario ran 3-4 minutes with nothing printed when the output was a pipe:
    now a line at least every beat names it, its time so far and its phase."""
    import json

    from tests.kit.timing import wait_until

    out = io.StringIO()
    progress = LineProgress(out, beat_s=0.05)
    progress.start(1, tmp_path)
    progress.scenario_started(cast(Scenario, SimpleNamespace(id="s/tp2-compile")))  # only its id is read
    wait_until(lambda: "still running s/tp2-compile" in out.getvalue(), 30, "the first beat line")
    assert "preparing: building the model" in out.getvalue()
    marks = tmp_path / "scenarios" / "s__tp2-compile" / "outputs" / "phases"
    marks.mkdir(parents=True)
    (marks / "rank0.json").write_text(json.dumps({"rank": 0, "marks": [["start", 1.0], ["rendezvous", 2.0], ["load", 3.0]]}))
    wait_until(lambda: "warming up / compiling, or running" in out.getvalue(), 30, "a beat line with the phase")
    progress.scenario_finished(Verdict("s/tp2-compile", "pass", "ok"))
    progress.close()
    after_close = out.getvalue()
    assert after_close.rstrip().endswith("0 not as expected")  # no beat after the end


def test_a_wait_for_devices_is_said_apart_from_the_scenarios_time():
    from harness.run.report.progress import duration_text

    waited = Verdict("s/tp2", "pass", "ok", duration_s=122.4, timings={"wait_s": 110.2})
    assert duration_text(waited) == "122.4s, 110s of it waiting for devices"
    assert duration_text(Verdict("s/tp2", "pass", "ok", duration_s=12.4, timings={"wait_s": 0.01})) == "12.4s"


def failing_verdict(scenario: str, reproduce: str, engine: str = "reference") -> Verdict:
    return Verdict(scenario, "fail", "logits: max|dlogprob|=3.1e-01", reproduce=reproduce, versions={"engine": engine})


def test_a_failing_verdict_says_how_to_reproduce_it_the_moment_it_is_known():
    out = io.StringIO()
    progress = LineProgress(out)
    progress.start(3, Path("reports/x"))
    progress.scenario_finished(Verdict("s/tp1", "pass", "ok", reproduce="make s/tp1"))
    progress.scenario_finished(failing_verdict("s/tp2", "make s/tp2"))
    # the next line, not the report at the end: the gate may have minutes to go
    assert out.getvalue().splitlines()[-1] == "    reproduce: make s/tp2"
    assert "reproduce: make s/tp1" not in out.getvalue()  # a pass says nothing more
    progress.scenario_finished(failing_verdict("v/tp2", "make v/tp2", engine="vllm"))
    # an engine with repro scripts also gets `harness repro`, from this run's symptom
    assert out.getvalue().splitlines()[-2:] == [
        "    reproduce: make v/tp2",
        "    standalone script (engine API only): harness repro v/tp2 --run reports/x",
    ]
    progress.close()


def test_no_standalone_script_for_a_run_with_a_fault_switched_on():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=300)
    progress = LiveProgress(console)
    progress.start(1, Path("reports/x"))
    progress.scenario_finished(failing_verdict("v/tp2", "harness run v/tp2 --fault pp-buffer-missing-key", engine="vllm"))
    progress.close()
    assert "    reproduce: harness run v/tp2 --fault pp-buffer-missing-key" in out.getvalue()
    assert "harness repro" not in out.getvalue()  # the engine's public API has no fault switches
