"""Real vLLM: a numeric failure is located inside vLLM's workers (harness/engines/vllm/record.py
records, harness/run/stages/localize.py runs, harness/run/compare/modules.py compares). The
hooks change no bit of what vLLM computes; a fault that corrupts one module on one TP rank is
named by layer, module class and source line, and rank; a PP stage that receives zeros is
named at its boundary, from the eager run of the compiled layout (hooks do not run inside
vLLM's compiled graph). Slow (vLLM engine starts, three scenarios): HARNESS_TEST_VLLM=1."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from harness.contract.outputs import EngineOutputs
from harness.contract.rundir import OUTPUTS
from harness.engines.vllm.faults import CORRUPT_LAYER
from harness.inputs.scenarios.loading import load_scenarios
from harness.run.compare import modules
from harness.run.stages import localize
from harness.run.stages.context import RunContext
from tests.kit import ROOT, harness_cli, survivors, verdict_of

pytestmark = pytest.mark.skipif(not os.environ.get("HARNESS_TEST_VLLM"), reason="real vLLM engine starts: run `make test-vllm`")


def scenario(sid: str):
    return next(s for s in load_scenarios([ROOT / "scenarios" / "vllm-llama.yaml"]) if s.id == sid)


def test_hooked_and_unhooked_workloads_of_one_engine_give_bit_equal_logits(tmp_path):
    """One engine start of tp2-pp1, the same prompt three times: unhooked, hooked (every decoder
    layer and its modules, on both TP ranks), unhooked again. All three bit-equal."""
    s = scenario("vllm-llama/tp2-pp1")
    recording = localize.recording_scenario(s, dict(s.settings), "vllm-llama/tp2-pp1-hooks")
    hooked = recording.suite.workloads[0]
    plain = hooked.model_copy(update={"record_modules": False})
    suite = recording.suite.model_copy(
        update={"workloads": [plain.model_copy(update={"name": "before"}), hooked, plain.model_copy(update={"name": "after"})]}
    )
    ended = localize._run(dataclasses.replace(recording, suite=suite), tmp_path, RunContext(), None, True)
    assert ended is None, ended.reason if ended else ""
    out = EngineOutputs.load(tmp_path / OUTPUTS)
    for name in ("before", "after"):
        for field in ("topk_ids", "topk_logprobs", "offsets"):
            assert out.tensors[f"{name}.{field}"].equal(out.tensors[f"{hooked.name}.{field}"]), (name, field)
    workers = modules.load_recording(tmp_path / OUTPUTS / localize.HIDDEN_DIR / hooked.name)
    assert sorted(w.tp_rank for w in workers) == [0, 1]
    # embed_tokens, norm and 4 layers of 4 modules each, every one started and returned
    assert all(len(w.events) == 2 * (2 + 4 * 5) for w in workers), [len(w.events) for w in workers]


def run(tmp_path: Path, fault: str, sid: str) -> tuple[dict, Path]:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    text = (ROOT / "scenarios" / "vllm-llama.yaml").read_text()
    (scenarios / "vllm-llama.yaml").write_text(text + f"faults: [{fault}]\n")
    # not narrowed: the trials of a compiled PP row (eager PP among them) are not what is tested here
    args = ("run", "--report-dir", str(tmp_path), "--run-id", "r", "--interaction-trials", "0", sid)
    result = harness_cli(*args, scenarios=scenarios, timeout=900, what=f"harness run {sid}")
    assert result.returncode == 1, result.stdout + result.stderr
    run_dir = tmp_path / "r"
    assert not survivors(run_dir)
    return verdict_of(run_dir, sid), run_dir


def test_one_module_corrupted_on_one_tp_rank_is_named_with_its_layer_class_source_and_rank(tmp_path):
    v, run_dir = run(tmp_path, "tp-corrupt-mlp@1", "vllm-llama/tp2-pp1")
    assert v["verdict"] == "fail", v["reason"]
    loc = v["localization"]
    assert (loc["module"], loc["side"], loc["diverging_tp_ranks"], loc["pp_stage"]) == (
        f"layers.{CORRUPT_LAYER}.mlp",
        "output",
        [1],
        0,
    ), loc
    assert loc["module_class"] == "LlamaMLP" and loc["source"].startswith("vllm/model_executor/models/llama.py:"), loc
    lead = f"LlamaMLP, {loc['source']}: output differs on TP rank 1, input agrees"
    assert v["reason"].startswith(lead), v["reason"]
    # the report and the PR comment carry it; the recording runs are kept in the run directory
    assert lead in (run_dir / "pr-comment.md").read_text() and lead in (run_dir / "summary.md").read_text()
    assert v["timings"]["phases"]["localize"] > 0
    assert (run_dir / localize.LOCALIZE_DIR / "vllm-llama__golden" / localize.DONE).exists()


def test_a_pp_stage_receiving_zeros_is_named_at_its_boundary_from_the_eager_run_of_the_compiled_layout(tmp_path):
    v, run_dir = run(tmp_path, "pp-zero-aux@1", "vllm-llama/tp1-pp2-compile")
    assert v["verdict"] == "fail", v["reason"]
    loc = v["localization"]
    assert loc["compiled"] and (loc["module"], loc["side"], loc["pp_stage"], loc["layer"]) == ("layers.2", "input", 1, 2), loc
    assert loc["module_class"] == "LlamaDecoderLayer", loc
    assert v["reason"].startswith("eager tp=1, pp=2 diverges too, so not compile's doing: LlamaDecoderLayer"), v["reason"]
    assert "input `residual` differs after layers.1 agreed" in v["reason"], v["reason"]
    assert "received by PP stage 1 from the stage before: the PP boundary" in v["reason"], v["reason"]
