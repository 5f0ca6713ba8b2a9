"""bench/vllm_ab.py's logic without a vLLM run: which scenarios it picks, how it judges a
setting held to a live reference and a crash told by vLLM's log, when two verdicts count as
the same, and the table with its ratio. (The measured run is `make bench-vllm-ab`.)"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.contract.expectations import apply_expectations
from harness.contract.outputs import EngineOutputs
from harness.contract.runbrief import RunBrief
from harness.engines.vllm import VllmEngine
from harness.inputs.scenarios.loading import load_scenarios

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ab = _load("vllm_ab")


def outcome(verdict: str, observed: str | None = None, seconds: float = 1.0, reason: str = "r"):
    return ab.Outcome(verdict, seconds, observed, reason)


def test_an_expected_failure_counts_as_the_failure_it_was():
    same = [
        ("pass", None, "pass", None),
        ("expected-failure", "fail", "fail", None),
        ("expected-failure", "crash", "crash", None),
        ("expected-failure", "crash", "expected-failure", "crash"),
        ("unsupported", None, "unsupported", None),
    ]
    for a, a_seen, b, b_seen in same:
        assert ab.Row("s", outcome(a, a_seen), outcome(b, b_seen)).same, (a, a_seen, b, b_seen)
    differ = [
        ("pass", None, "fail", None),
        ("expected-failure", "fail", "expected-failure", "crash"),
        ("expected-failure", "crash", "pass", None),
        ("error", None, "pass", None),
    ]
    for a, a_seen, b, b_seen in differ:
        assert not ab.Row("s", outcome(a, a_seen), outcome(b, b_seen)).same, (a, a_seen, b, b_seen)


def test_the_table_shows_each_way_the_totals_and_every_disagreement():
    rows = [
        ab.Row("vllm-llama/tp2-pp1", outcome("pass", seconds=61.0), outcome("pass", seconds=9.5)),
        ab.Row("vllm-gemma4/tp1-pp2-compile", outcome("expected-failure", "fail", 70.0), outcome("fail", None, 12.0, "why")),
    ]
    text = "\n".join(ab.table(rows, harness_wall=30.0, vllm_wall=140.0))
    assert "| `vllm-llama/tp2-pp1` | 61.0 | 9.5 | pass | pass | yes |" in text
    assert "| `vllm-gemma4/tp1-pp2-compile` | 70.0 | 12.0 | expected-failure (fail) | fail | yes |" in text
    assert "| **total (wall)** | **140.0** | **30.0** | | | 2/2 |" in text
    rows.append(ab.Row("vllm-qwen3/tp2-pp1", outcome("pass", reason="held"), outcome("crash", reason="Worker_TP1 died")))
    assert "| **NO** |" in "\n".join(ab.table(rows, 30.0, 140.0))
    [wrong] = ab.mismatches(rows)
    assert "vllm-qwen3/tp2-pp1" in wrong and "held" in wrong and "Worker_TP1 died" in wrong


def test_the_ratio_line_says_whether_the_target_is_met():
    assert "**0.25x**" in ab.verdict_line(25.0, 100.0) and "met)" in ab.verdict_line(25.0, 100.0)
    assert "missed by 0.10" in ab.verdict_line(40.0, 100.0)
    assert ab.ratio(1.0, 0.0) == float("inf")


def test_a_scenario_without_a_harness_verdict_never_agrees():
    [row] = ab.rows_of(["s/tp1"], {"s/tp1": outcome("pass")}, {})
    assert row.harness.verdict == "error" and "missing" in row.harness.reason and not row.same


def test_the_default_subset_is_the_gates_text_suites_and_all_is_the_gate():
    scenarios = load_scenarios()
    picked, choice = ab.chosen(scenarios, None, whole_gate=False)
    gate, _ = ab.chosen(scenarios, None, whole_gate=True)
    assert picked and all(ab.GATE in s.gates and s.suite.suite in ab.DEFAULT_SUITES for s in picked)
    assert {s.id for s in gate if s.suite.suite in ab.DEFAULT_SUITES} == {s.id for s in picked}
    assert len(gate) > len(picked) and f"{len(picked)} of its {len(gate)}" in choice
    named, _ = ab.chosen(scenarios, ["vllm-llama/tp2-pp1"], whole_gate=False)
    assert [s.id for s in named] == ["vllm-llama/tp2-pp1"]


def test_a_setting_starts_with_vllms_start_method_and_no_harness_cache_or_fork(monkeypatch):
    for name in ("VLLM_CACHE_ROOT", "HARNESS_VLLM_FORK", "VLLM_WORKER_MULTIPROC_METHOD"):
        monkeypatch.delenv(name, raising=False)
    [scenario] = [s for s in load_scenarios() if s.id == "vllm-llama/tp2-pp1"]
    env = ab.setting_env(scenario)
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert "VLLM_CACHE_ROOT" not in env and "HARNESS_VLLM_FORK" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_the_setting_process_passes_the_drivers_arguments_without_the_harness_hooks(tmp_path):
    setting = _load("vllm_ab_setting")
    workloads = [{"name": "logits", "kind": "logprobs", "prompts": [[1, 2, 3]], "top_k": 5}]
    brief = RunBrief(
        "vllm-llama/tp2-pp1", "vllm", "/m", "float32", {"tp": 2, "pp": 1, "compile": False}, workloads, str(tmp_path)
    )
    kwargs = setting.vllm_kwargs(brief)
    assert "worker_extension_cls" not in kwargs
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["enforce_eager"] and kwargs["distributed_executor_backend"] == "mp"


def _logits(directory: Path, shift: float) -> str:
    ids = torch.tensor([[5, 6, 7, 8], [6, 5, 8, 7], [7, 8, 5, 6]])
    lps = torch.tensor([[-0.5, -1.5, -2.5, -3.5]] * 3) + torch.tensor([[shift, 0.0, 0.0, 0.0]] * 3)
    out = EngineOutputs()
    out.put("logits", topk_ids=ids, topk_logprobs=lps, offsets=torch.tensor([0, 3]))
    out.save(directory)
    return str(directory)


@pytest.mark.parametrize(("shift", "verdict"), [(0.0, "pass"), (1e-6, "pass"), (0.05, "fail")])
def test_a_setting_is_judged_against_the_live_reference_with_the_scenarios_tolerance(tmp_path, shift, verdict):
    workloads = [{"name": "logits", "kind": "logprobs", "top_k": 4}]
    scenario = SimpleNamespace(
        id="s/tp2", suite=SimpleNamespace(dtype="float32", evals=[], tolerances=SimpleNamespace(model_dump=dict))
    )
    reference = SimpleNamespace(brief=SimpleNamespace(output_dir=_logits(tmp_path / "ref", 0.0), workloads=workloads), evals=[])
    tested = SimpleNamespace(brief=SimpleNamespace(output_dir=_logits(tmp_path / "set", shift), workloads=workloads), evals=[])
    v = ab.compared(scenario, reference, tested)
    assert v.verdict == verdict, v.reason
    assert "max|dlogprob|" in v.reason


def test_a_crash_is_told_by_vllms_log_and_meets_the_scenarios_expectation(tmp_path):
    prefix = "(Worker_PP1 pid=27010) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] "
    log = tmp_path / "vllm.log"
    log.write_text(
        "\n".join(
            prefix + line
            for line in [
                "WorkerProc hit an exception.",
                "Traceback (most recent call last):",
                '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 3174, in sync_and_gather_intermediate_tensors',
                "    assert self.intermediate_tensors is not None",
                "AssertionError",
            ]
        )
        + "\n"
    )
    v = ab.crash_verdict("vllm-llama/tp1-pp2", VllmEngine(), 1, log)
    assert v.verdict == "crash" and "Worker_PP1" in v.reason and "AssertionError" in v.reason
    assert v.crash["exitcode"] == 1 and v.crash["log"] == str(log)
    [scenario] = [s for s in load_scenarios() if s.id == "vllm-llama/tp1-pp2"]
    v.versions = {"engine": "vllm", "vllm": "0.32.0"}
    judged = apply_expectations(v, scenario.expectations, scenario.known_bugs)
    assert (judged.verdict, judged.observed) == ("expected-failure", "crash"), judged.reason
    unknown = tmp_path / "silent.log"
    unknown.write_text("something else went wrong\n")
    plain = ab.crash_verdict("s", VllmEngine(), -9, unknown)
    assert plain.verdict == "crash" and "exit code -9" in plain.reason


def test_a_partial_table_covers_the_finished_scenarios_by_their_scenario_times():
    rows = [ab.Row("s/tp2", outcome("pass", seconds=80.0), outcome("pass", seconds=10.0))]
    text = "\n".join(ab.partial(rows, planned=12))
    assert "1 of 12 scenarios" in text and "| **total (scenario times)** | **80.0** | **10.0** |" in text
    assert "**0.12x**" in text
