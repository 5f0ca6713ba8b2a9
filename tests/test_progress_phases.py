"""The progress line says what the engine is doing now: vLLM's driver sits in one `vllm.LLM(...)`
call for minutes (its workers join the process group, load the model, compile and warm up),
and the line said "joining the process group" all along. The workers announce each start-up
step as it starts (engines/vllm/startup.py -> contract/phases.py), and the line reads them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.contract.phases import DOING, announce, announced, read_doing
from harness.contract.settings.variables import RANK_OUTPUT_DIR
from harness.engines.vllm import startup
from harness.run.report.progress import doing_in


def mark(outputs, *marks) -> None:
    (outputs / "phases").mkdir(parents=True, exist_ok=True)
    (outputs / "phases" / "rank0.json").write_text(json.dumps({"rank": 0, "marks": [list(m) for m in marks]}))


def doing(outputs, who: str, activity: str, since: float) -> None:
    (outputs / "phases").mkdir(parents=True, exist_ok=True)
    (outputs / "phases" / f"doing-{who}.json").write_text(json.dumps({"doing": activity, "since": since}))


def test_the_line_follows_the_engines_start_up_not_the_ranks_last_mark(tmp_path):
    mark(tmp_path, ("start", 10.0))
    assert doing_in(tmp_path) == "joining the process group"  # an engine that announces nothing: as before
    doing(tmp_path, "rank0", "engine-start", 11.0)
    assert doing_in(tmp_path) == "starting the engine's processes"
    doing(tmp_path, "vllm-worker-1", "rendezvous", 12.0)
    assert doing_in(tmp_path) == "waiting for the process group"  # the workers say more than the driver
    doing(tmp_path, "vllm-worker-1", "compile", 30.0)
    doing(tmp_path, "vllm-worker-2", "load", 31.0)
    assert doing_in(tmp_path) == ("loading the model (1 of 2 of the engine's processes; the others are further on)")
    doing(tmp_path, "vllm-worker-2", "compile", 40.0)
    assert doing_in(tmp_path) == "compiling and warming up"
    mark(tmp_path, ("start", 10.0), ("load", 200.0))  # vllm.LLM returned: older announcements are over
    assert doing_in(tmp_path) == "warming up / compiling, or running its workloads"


def test_announcements_are_read_back_and_an_unknown_activity_is_refused(tmp_path):
    announce(tmp_path, "rank0", "load")
    ((activity, since),) = read_doing(tmp_path).values()
    assert activity == "load" and since > 0
    with pytest.raises(ValueError, match="unknown activity 'compiling'"):
        announce(tmp_path, "rank0", "compiling")
    (tmp_path / "phases" / "doing-bad.json").write_text("{not json")
    assert list(read_doing(tmp_path)) == ["rank0"]  # a half-written or foreign file is skipped
    assert announced({}, after=0.0) is None and announced({"w": ("load", 1.0)}, after=2.0) is None


def test_a_vllm_worker_announces_each_start_up_step_as_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(startup, "TIMELINE", {})
    monkeypatch.setenv(RANK_OUTPUT_DIR.name, str(tmp_path))
    seen = []

    class Worker:
        def __init__(self, eager: bool):
            self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(enforce_eager=eager))

        def load_model(self):
            seen.append(read_doing(tmp_path))  # announced before the step runs

        def compile_or_warm_up_model(self):
            seen.append(read_doing(tmp_path))

    startup._time_steps(Worker)
    Worker(eager=False).load_model()
    Worker(eager=False).compile_or_warm_up_model()
    assert [next(iter(s.values()))[0] for s in seen] == ["load", "compile"]
    monkeypatch.setattr(startup, "TIMELINE", {})
    Worker(eager=True).compile_or_warm_up_model()
    assert next(iter(read_doing(tmp_path).values()))[0] == "warmup"  # eager: no compile to announce


def test_every_step_announces_a_known_activity():
    for step in startup.STEPS:
        activity = startup.ACTIVITY[step]
        assert all(a in DOING for a in (activity if isinstance(activity, tuple) else (activity,)))
