"""A vLLM worker whose step raised ends its process (harness/engines/vllm/failfast.py), so
that a PP engine whose earlier stage crashed dies at once instead of waiting out vLLM's
300 s step timeout. Unit tier: the wrapper and the timer on a stand-in worker (the real
crash, a PP stage raising, is the vLLM tier's: tests/test_vllm.py)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from harness.engines.vllm import failfast


def worker(world_size: int) -> SimpleNamespace:
    return SimpleNamespace(parallel_config=SimpleNamespace(world_size=world_size))


def failing_step(self, scheduler_output):
    raise RuntimeError("CpuCommunicator only supports sending tensors.")


def test_a_step_that_raises_in_a_world_of_several_arms_the_exit_and_still_raises(monkeypatch):
    armed: list[bool] = []
    monkeypatch.setattr(failfast, "arm_exit", lambda: armed.append(True))
    step = failfast.ending_on_failure(failing_step)
    with pytest.raises(RuntimeError, match="only supports sending tensors"):
        step(worker(2), None)
    assert armed == [True]


def test_a_world_of_one_is_left_alone(monkeypatch):
    """Its failure is the answer vLLM's executor reads: the engine dies its own way."""
    armed: list[bool] = []
    monkeypatch.setattr(failfast, "arm_exit", lambda: armed.append(True))
    with pytest.raises(RuntimeError):
        failfast.ending_on_failure(failing_step)(worker(1), None)
    assert armed == []


def test_a_step_that_returns_arms_nothing(monkeypatch):
    armed: list[bool] = []
    monkeypatch.setattr(failfast, "arm_exit", lambda: armed.append(True))
    step = failfast.ending_on_failure(lambda self, output: "sampled")
    assert step(worker(2), None) == "sampled"
    assert armed == []


def test_the_armed_exit_ends_the_process_after_its_grace_with_its_code(capsys):
    exited = threading.Event()
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        exited.set()

    thread = failfast.arm_exit(grace_s=0.05, exit=fake_exit)
    assert thread.daemon  # never keeps a worker alive that vLLM is ending itself
    assert exited.wait(30), "the armed exit never fired"
    assert codes == [failfast.EXIT_CODE]
    assert "the worker exits (70) so that the executor ends it" in capsys.readouterr().err
