"""Where a scenario's time goes: the ranks' phase marks, the runner's laps, the verdict's
`timings` and the report's breakdown. Behaviour only: no timing budget is asserted."""

import json
import time

import pytest

from harness.contract.phases import PhaseMarks, rank_breakdown, read_marks
from harness.contract.rundir import outputs_dir, verdict_path
from harness.contract.verdict import Verdict
from harness.run import timings
from harness.run.report import write_report
from tests.kit.handmade import make_run, passing


def test_marks_are_written_as_the_rank_passes_them(tmp_path):
    marks = PhaseMarks(tmp_path, rank=3)
    marks.mark("start")
    assert [name for name, _ in read_marks(tmp_path)[3]] == ["start"]  # a rank that dies now still told us
    marks.mark("load")
    assert [name for name, _ in read_marks(tmp_path)[3]] == ["start", "load"]


def test_unreadable_marks_are_skipped(tmp_path):
    (tmp_path / "phases").mkdir()
    (tmp_path / "phases" / "rank0.json").write_text("{half")
    assert read_marks(tmp_path) == {}


def test_breakdown_follows_the_slowest_rank_and_adds_up_to_the_launch():
    marks = {
        0: [("start", 101.0), ("rendezvous", 101.5), ("load", 102.0), ("warmup", 104.0), ("workloads", 105.0)],
        1: [("start", 101.2), ("rendezvous", 101.5), ("load", 102.5), ("warmup", 103.0), ("workloads", 105.0)],
    }
    b = rank_breakdown(marks, 100.0, 106.0)
    assert list(b) == ["start", "rendezvous", "load", "warmup", "workloads", "exit"]
    assert b == {"start": 1.2, "rendezvous": 0.3, "load": 1.0, "warmup": 1.5, "workloads": 1.0, "exit": 1.0}
    assert sum(b.values()) == pytest.approx(6.0)


def test_a_lagging_clock_never_gives_a_negative_phase():
    b = rank_breakdown({0: [("start", 99.0), ("load", 101.0)]}, 100.0, 100.5)
    assert all(s >= 0 for s in b.values()) and b["start"] == 0.0


def test_launch_without_marks_is_one_engine_phase(tmp_path):
    watch = timings.Stopwatch()
    watch.lap("prepare")
    watch.launch(str(tmp_path), 10.0, 12.5)  # an engine that marks nothing
    watch.lap("compare")
    t = watch.timings()
    assert list(t["phases"]) == ["prepare", "launch", "compare"]
    assert t["engine_s"] == 2.5 and t["harness_s"] == pytest.approx(t["phases"]["prepare"] + t["phases"]["compare"])


def test_wait_for_devices_is_neither_engine_nor_harness():
    t = timings.summarise({"prepare": 0.5, "wait": 7.0, "start": 1.0, "exit": 0.2, "compare": 0.3})
    assert t == {
        "phases": {"prepare": 0.5, "wait": 7.0, "start": 1.0, "exit": 0.2, "compare": 0.3},
        "engine_s": 1.2,
        "harness_s": 0.8,
        "wait_s": 7.0,
    }
    assert timings.harness_other(t) == pytest.approx(0.5)


def test_gate_total_sums_phases_over_scenarios():
    a = timings.summarise({"prepare": 1.0, "start": 2.0})
    b = timings.summarise({"prepare": 0.5, "start": 1.0, "evals": 3.0})
    assert timings.total([a, b, {}])["phases"] == {"prepare": 1.5, "start": 3.0, "evals": 3.0}


def test_a_verdict_without_timings_still_loads(tmp_path):
    """verdict.json of runs made before timings existed."""
    d = passing("s/tp1").to_dict()
    d.pop("timings")
    (tmp_path / "verdict.json").write_text(json.dumps(d))
    assert Verdict.load(tmp_path / "verdict.json").timings == {}


def _timed(scenario: str) -> Verdict:
    v = passing(scenario)
    v.timings = timings.summarise(
        {
            "prepare": 0.2,
            "golden": 0.1,
            "wait": 0.0,
            "start": 1.5,
            "rendezvous": 0.1,
            "load": 0.3,
            "warmup": 4.0,
            "workloads": 1.0,
            "write": 0.1,
            "exit": 0.3,
            "compare": 0.2,
            "verdict": 0.01,
        }
    )
    return v


def test_report_shows_the_breakdown_and_the_harness_share(tmp_path):
    run = make_run(tmp_path, "r1", [_timed("s/tp1"), _timed("s/tp2"), passing("s/tp4")])  # tp4: an old verdict
    meta = write_report(run)
    summary = (run / "summary.md").read_text()
    assert "## Where the time went" in summary
    assert "| `s/tp1` | 0.0 | 1.5 | 0.1 | 0.3 | 4.0 | 1.0 | 0.1 | 0.3 | 0.2 |  | 0.3 | 7.8 |" in summary
    assert "| **sum** | 0.0 | 3.0 |" in summary and "`s/tp4` |" not in summary.split("## Where the time went")[1]
    assert "The harness's own share: 1.0s of 15.6s (6.5%)" in summary
    html = (run / "report.html").read_text()
    assert "Time: engine 7.3s (start 1.5 · rendezvous 0.1 · load 0.3 · warmup 4.0" in html
    assert meta["report_s"] > 0 and json.loads((run / "run.json").read_text())["report_s"] == meta["report_s"]


@pytest.mark.e2e
def test_a_real_scenario_records_every_phase_in_its_verdict(tmp_path):
    from harness.inputs.scenarios.loading import load_scenarios
    from harness.inputs.scenarios.scenario import select
    from harness.run.runner import run_scenario

    scenario = select(load_scenarios(), ["llama-tiny/tp2-pp1"])[0]
    before = time.time()
    v = run_scenario(scenario, tmp_path / "run")
    assert v.verdict == "pass", v.explain()
    phases = v.timings["phases"]
    assert list(phases) == [
        "prepare",
        "support",
        "golden",
        "wait",
        "start",
        "rendezvous",
        "load",
        "warmup",
        "workloads",
        "write",
        "exit",
        "compare",
        "verdict",
    ]
    assert all(s >= 0 for s in phases.values())
    # the phases partition the scenario: together no longer than its wall time
    assert sum(phases.values()) <= v.duration_s + 0.05
    assert v.timings["engine_s"] == pytest.approx(sum(phases[p] for p in timings.ENGINE_PHASES if p in phases), abs=1e-2)
    saved = Verdict.load(verdict_path(tmp_path / "run", "llama-tiny/tp2-pp1"))
    assert saved.timings == v.timings
    marks = read_marks(outputs_dir(tmp_path / "run", "llama-tiny/tp2-pp1"))
    assert sorted(marks) == [0, 1] and all(t >= before for m in marks.values() for _, t in m)


def test_bench_prints_the_gate_breakdown_with_the_harness_share():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "pr_gate.py"
    spec = importlib.util.spec_from_file_location("bench_pr_gate", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lines = bench.breakdown_lines([_timed("s/tp1").timings, _timed("s/tp2").timings], report_s=0.5, wall_s=20.0)
    text = "\n".join(lines)
    assert "| warmup (engine) | 8.0 | 40.0% |" in text
    assert "| report (harness) | 0.5 | 2.5% |" in text
    assert "| **harness's own** | **1.5** | **7.6%** |" in text  # prepare+golden+compare+verdict x2, + report
