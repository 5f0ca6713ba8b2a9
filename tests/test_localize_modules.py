"""Module-level localization without an engine: the recorder vLLM's workers run
(harness/engines/vllm/record.py) on a toy decoder in this process, and the comparison
(harness/run/compare/modules.py) of its recordings: a module that corrupts its output on one
TP rank, a PP stage that receives a wrong tensor, a row-parallel partial output, two runs whose
first steps hold different prompts."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from harness.engines.vllm import record
from harness.run.compare import modules

H = 8


class PPMissingLayer(nn.Identity):
    """vLLM's name for a layer another PP stage holds (the recorder skips it by name)."""


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(H)
        self.self_attn = nn.Linear(H, H)
        self.mlp = nn.Linear(H, H)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = self.input_layernorm(hidden)
        x = x + self.self_attn(x)
        return x + self.mlp(x)


class Decoder(nn.Module):
    def __init__(self, held: range | None = None, layers: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens: nn.Module = nn.Embedding(32, H)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.norm: nn.Module = nn.LayerNorm(H)
        held = held if held is not None else range(layers)
        if 0 not in held:
            self.embed_tokens = PPMissingLayer()
        if layers - 1 not in held:
            self.norm = PPMissingLayer()
        for i in range(layers):
            if i not in held:
                self.layers[i] = PPMissingLayer()

    def forward(self, ids: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(len(ids))
        h = self.embed_tokens(ids) if hidden is None else hidden
        for layer in self.layers:
            if not isinstance(layer, PPMissingLayer):
                h = layer(positions, h)
        return h if isinstance(self.norm, PPMissingLayer) else self.norm(h)


class Model(nn.Module):
    """The decoder under a `model` attribute, as vLLM's *ForCausalLM holds it."""

    def __init__(self, held: range | None = None) -> None:
        super().__init__()
        self.model = Decoder(held)

    def forward(self, ids, hidden=None):
        return self.model(ids, hidden)


def mlp(model: Model, layer: int) -> nn.Module:
    held = model.model.layers[layer]
    assert isinstance(held, Layer)
    return held.mlp


IDS = torch.tensor([1, 5, 7, 9, 2, 3])


def recorded(model: Model, directory, ranks: dict, ids=IDS, hidden=None, rows: int = 256) -> torch.Tensor:
    record.start(model, rows)
    out = model(ids, hidden)
    record.stop(str(directory), {"tp_size": 1, "pp_size": 1, **ranks})
    return out


def golden(tmp_path):
    path = tmp_path / "golden"
    recorded(Model(), path, {"tp_rank": 0, "pp_rank": 0})
    return path


def test_the_recorder_keeps_every_place_once_in_the_order_it_ran_and_leaves_the_output_alone(tmp_path):
    model = Model()
    plain = model(IDS)
    hooked = recorded(model, tmp_path, {"tp_rank": 0, "pp_rank": 0}, rows=4)
    assert torch.equal(plain, hooked)  # the hooks read, never write
    assert not record._ARMED and all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    (worker,) = modules.load_recording(tmp_path)
    assert worker.events[:4] == ["embed_tokens:in", "embed_tokens:out", "layers.0:in", "layers.0.input_layernorm:in"]
    assert worker.events[-1] == "norm:out" and len(worker.events) == len(set(worker.events)) == 2 * (2 + 3 * 4)
    assert worker.tensors["layers.1.mlp:out0"].shape == (4, H)  # bounded to the rows asked
    assert torch.equal(worker.tensors["layers.0:in0"], IDS[:4].clone().new_tensor(range(4)))  # the positions, kept
    assert worker.classes["layers.1.mlp"].startswith("Linear torch/nn/modules/linear.py:")


def test_a_module_that_differs_on_one_tp_rank_is_named_with_that_rank(tmp_path):
    gold = golden(tmp_path)
    for rank in (0, 1):
        model = Model()
        if rank == 1:
            mlp(model, 1).register_forward_hook(lambda m, a, out: out * (1 + 1e-3))
        recorded(model, tmp_path / "tp2", {"tp_rank": rank, "tp_size": 2, "pp_rank": 0})
    found = modules.locate(gold, tmp_path / "tp2", "float32", label="tp2")
    assert (found["module"], found["side"], found["diverging_tp_ranks"], found["layer"]) == ("layers.1.mlp", "output", [1], 1)
    assert found["text"].startswith("Linear, torch/nn/modules/linear.py:")
    assert "output differs on TP rank 1, input agrees" in found["text"]


def test_a_pp_stage_that_receives_a_wrong_tensor_is_named_at_the_boundary(tmp_path):
    gold = golden(tmp_path)
    first = Model(held=range(0, 2))
    sent = recorded(first, tmp_path / "pp2", {"tp_rank": 0, "pp_rank": 0})
    recorded(Model(held=range(2, 3)), tmp_path / "pp2", {"tp_rank": 0, "pp_rank": 1}, hidden=sent * 0.5)
    found = modules.locate(gold, tmp_path / "pp2", "float32", label="pp2")
    assert (found["module"], found["side"], found["pp_stage"], found["layer"]) == ("layers.2", "input", 1, 2)
    assert "received by PP stage 1 from the stage before: the PP boundary" in found["text"], found["text"]


def test_a_pre_reduce_partial_output_is_held_to_the_golden_summed_over_the_ranks(tmp_path):
    gold = golden(tmp_path)
    for rank in (0, 1):
        model = Model()
        # each rank's half of the MLP output; the sum is whole (a row-parallel module without its all-reduce)
        mlp(model, 0).register_forward_hook(lambda m, a, out, r=rank: out * (0.25 if r == 0 else 0.75))
        recorded(model, tmp_path / "tp2", {"tp_rank": rank, "tp_size": 2, "pp_rank": 0})
    found = modules.locate(gold, tmp_path / "tp2", "float32", label="tp2")
    # the partial agrees summed; what follows it (the layer's output, built from the partial) does not
    assert found["module"] == "layers.0" and found["side"] == "output", found["text"]


def test_only_the_leading_rows_both_first_steps_share_are_compared(tmp_path):
    gold = golden(tmp_path)
    longer = torch.cat([IDS, torch.tensor([4, 4, 4])])  # a second prompt in this run's first step
    recorded(Model(), tmp_path / "run", {"tp_rank": 0, "pp_rank": 0}, ids=longer)
    found = modules.locate(gold, tmp_path / "run", "float32")
    assert found["layer"] is None and found["agrees"], found["text"]
    other = torch.tensor([2, 5, 7, 9, 2, 3])
    recorded(Model(), tmp_path / "other", {"tp_rank": 0, "pp_rank": 0}, ids=other)
    found = modules.locate(gold, tmp_path / "other", "float32")
    assert found["layer"] is None and "agrees" not in found and "start with other tokens" in found["text"], found["text"]


def test_a_run_whose_hooks_never_ran_says_so(tmp_path):
    gold = golden(tmp_path)
    model = Model()
    record.start(model)
    record.stop(str(tmp_path / "compiled"), {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1})
    found = modules.locate(gold, tmp_path / "compiled", "float32", label="tp1-pp1-compile")
    assert found["recorded"] is False and "no hook ran" in found["text"]


def vllm_llama(sid: str):
    from harness.inputs.scenarios.loading import load_scenarios
    from tests.kit import ROOT

    return next(s for s in load_scenarios([ROOT / "scenarios" / "vllm-llama.yaml"]) if s.id == sid)


def failed(*kinds: str):
    from harness.contract.verdict import Verdict

    checks = [{"name": k, "kind": k, "passed": False, "summary": "x"} for k in kinds]
    return Verdict("s", "fail", "x", checks=checks)


def test_localization_runs_for_a_numeric_failure_of_a_recording_engine_only():
    from harness.contract.verdict import Verdict
    from harness.run.stages import localize

    tp2 = vllm_llama("vllm-llama/tp2-pp1")
    assert localize.wanted(tp2, failed("logprobs"))
    assert not localize.wanted(tp2, failed("accuracy", "same-layout"))  # not a number against the golden
    assert not localize.wanted(tp2, Verdict("s", "crash", "x"))
    reference = dataclasses.replace(tp2, suite=tp2.suite.model_copy(update={"engine": "reference"}))
    assert not localize.wanted(reference, failed("logprobs"))  # it captures its own (localize.py)
    dp2 = dataclasses.replace(tp2, settings={**tp2.settings, "dp": 2})
    assert not localize.wanted(dp2, failed("logprobs"))  # DP replicas record nothing


def test_a_recording_run_is_the_first_logprobs_prompt_recorded_and_nothing_else():
    from harness.run.stages import localize

    tp2 = vllm_llama("vllm-llama/tp2-pp1")
    recording = localize.recording_scenario(tp2, dict(tp2.suite.golden), "vllm-llama/golden")
    (workload,) = recording.suite.workloads
    assert (workload.kind, workload.num_prompts, workload.record_modules) == ("logprobs", localize.PROMPTS, True)
    assert recording.suite.evals == [] and recording.expectations == () and recording.known_bugs == ()
    assert recording.engine_settings == dict(tp2.suite.golden)


def test_a_compiled_row_says_whether_its_eager_twin_agrees():
    from harness.run.stages import localize

    agrees = localize._compiled(
        {"layer": None, "recorded": True, "agrees": True, "text": "every module agrees"}, "eager tp=2, pp=1"
    )
    assert agrees["text"].startswith(
        "eager tp=2, pp=1 agrees with the golden at every recorded module: the divergence is in the compiled graph"
    )
    differs = localize._compiled(
        {"layer": 1, "module": "layers.1.mlp", "text": "LlamaMLP, x.py:1: output differs"}, "eager tp=2, pp=1"
    )
    assert differs["text"] == "eager tp=2, pp=1 diverges too, so not compile's doing: LlamaMLP, x.py:1: output differs"
    unrecorded = {"layer": None, "recorded": True, "text": "not localized: the first steps start with other tokens"}
    assert localize._compiled(dict(unrecorded), "eager")["text"] == unrecorded["text"]


def test_the_report_names_the_module_and_its_ranks():
    from harness.contract.verdict import Verdict
    from harness.run.compare.localize import describe
    from harness.run.report.markdown import where_diverged

    loc = {
        "layer": 1,
        "place": "layer 1 mlp",
        "module_class": "LlamaMLP",
        "source": "vllm/model_executor/models/llama.py:82",
        "pp_stage": 0,
        "tp_rank": 1,
        "diverging_tp_ranks": [1],
        "text": "t",
    }
    assert describe(loc) == "t"  # the reason's lead, BUG.md's line (harness/run/repro.py)
    assert where_diverged(Verdict("s", "fail", "x", localization=loc)) == (
        "layer 1 mlp (LlamaMLP, vllm/model_executor/models/llama.py:82), pp stage 0, tp rank 1"
    )


def test_the_runner_localizes_unless_told_not_to_and_a_failed_localization_changes_no_verdict(tmp_path, monkeypatch):
    from harness.run import runner
    from harness.run.request import RunConfig
    from harness.run.stages import localize
    from harness.run.stages.context import RunContext
    from harness.run.timings import Stopwatch

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(localize, "localize", broken)
    tp2 = vllm_llama("vllm-llama/tp2-pp1")
    verdict = failed("logprobs")
    runner._localize(tp2, verdict, tmp_path, RunContext(RunConfig(no_localize=True)), None, Stopwatch())
    assert verdict.localization is None and verdict.reason == "x"
    runner._localize(tp2, verdict, tmp_path, RunContext(), None, Stopwatch())
    assert verdict.verdict == "fail" and verdict.reason == "not localized: the harness failed (OSError: disk full); x"


class Batched(nn.Module):
    """The shape of vLLM's Transformers backend (GPTBigCode): modules see [1, tokens, hidden], the
    position embedding and the dropout run on every PP stage, the layers on their own stage's."""

    def __init__(self, held: range = range(2), twice: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wpe = nn.Embedding(32, H)
        self.drop = nn.Dropout(0.0)
        self.layers = nn.ModuleList(nn.Linear(H, H) if i in held else PPMissingLayer() for i in range(2))
        self.held, self.twice = held, twice

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        first = 0 in self.held
        if first or self.twice:  # the bug: a later stage adds the positions again
            hidden = hidden + self.wpe(torch.arange(hidden.shape[1]))[None]
        h = self.drop(hidden)
        for i in self.held:
            h = self.layers[i](h)
        return h


def batched(model: Batched, directory, ranks: dict, hidden: torch.Tensor) -> torch.Tensor:
    record.start(model)
    out = model(hidden)
    record.stop(str(directory), {"tp_size": 1, "pp_size": 1, **ranks})
    return out


def test_a_place_every_pp_stage_runs_is_named_on_the_stage_whose_copy_left(tmp_path):
    """GPTBigCode under PP on 0.32: both stages run `drop`; only stage 1's input leaves (the position
    embedding added twice). Comparing by TP rank alone, stage 0's agreeing copy raised an IndexError
    and the verdict said 'not localized: the harness failed'; [1, tokens, hidden] is read per token."""
    start = torch.randn(1, 6, H)
    batched(Batched(), tmp_path / "golden", {"tp_rank": 0, "pp_rank": 0}, start)
    sent = batched(Batched(held=range(0, 1)), tmp_path / "pp2", {"tp_rank": 0, "pp_rank": 0}, start)
    batched(Batched(held=range(1, 2), twice=True), tmp_path / "pp2", {"tp_rank": 0, "pp_rank": 1}, sent)
    (gold,) = modules.load_recording(tmp_path / "golden")
    assert gold.tensors["drop:in0"].shape == (6, H)  # the batch of one dropped: a row per token
    found = modules.locate(tmp_path / "golden", tmp_path / "pp2", "float32", label="pp2")
    assert (found["module"], found["side"], found["pp_stage"]) == ("drop", "input", 1), found["text"]


def test_a_suites_capture_hidden_workload_records_nothing_in_vllms_workers(tmp_path):
    """`harness init` writes `capture_hidden: true` (the reference engine's per-layer states). On
    vLLM that must not arm the recorder: a recording run also allocates a later PP stage's receive
    buffer, and a suite's eager tp1-pp2 then passed where vLLM 0.32's known bug crashes it (the
    wheel's README test caught it: 'known bug eager-pp-intermediate-tensors did not show')."""
    from harness.engines.vllm.driver import recording
    from harness.inputs import zoo
    from harness.inputs.scenarios.schema import WorkloadDef
    from harness.inputs.workloads import tokenize

    asked = []

    class LLM:
        def collective_rpc(self, method, args=()):
            asked.append(method)
            return []

    suite_workload = WorkloadDef(name="logits", kind="logprobs", num_prompts=1, capture_hidden=True)
    model = zoo.model_dir("tiny-llama")
    (item,) = tokenize([suite_workload], model, zoo.load_tokenizer(model))
    assert item["capture_hidden"] and "record_modules" not in item
    with recording(LLM(), item, str(tmp_path)):
        pass
    assert asked == []
    with recording(LLM(), {**item, "record_modules": True}, str(tmp_path)):
        pass
    assert asked == ["harness_record_start", "harness_record_stop"]
