"""The reference engine against HF transformers, and every parallel setting against TP1 eager.

Multi-rank runs are real processes started by the harness's own launcher
(harness.engines.launch.run_ranks), under a budget scaled by HARNESS_TEST_TIME_SCALE
(tests/kit/timing.py): a run that outlives it fails as a timeout, with every rank's stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.runbrief import RunBrief
from harness.engines.reference import ReferenceEngine
from tests.kit import TIME_SCALE_ENV, scaled, time_scale
from tests.kit.present import present
from tests.kit.ranks import RUN_BUDGET_S, explain, launch_ranks, run_in_process

VOCAB = 512
PROMPT_LENS = (5, 9, 3, 12)
MAX_NEW = 6


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path, safe_serialization=True)
    return path


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENS]


def make_brief(model_dir: Path, out: Path, dtype="float32", faults=(), **settings) -> RunBrief:
    settings = {"tp": 1, "pp": 1, "sp": False, "compile": False, **settings}
    workloads = [
        {"name": "logits", "kind": "logprobs", "prompts": prompts(), "top_k": 8},
        {"name": "greedy", "kind": "greedy", "prompts": prompts(), "max_new_tokens": MAX_NEW, "top_k": 5},
    ]
    return RunBrief("test/ref", "reference", str(model_dir), dtype, settings, workloads, str(out), list(faults))


def run_setting(model_dir: Path, tmp_path: Path, budget_s: float = RUN_BUDGET_S, **settings) -> EngineOutputs:
    brief = make_brief(model_dir, tmp_path / "out", **settings)
    outcome = launch_ranks(brief, tmp_path, budget_s)
    if outcome.status != "ok":
        pytest.fail(explain(outcome))
    return EngineOutputs.load(tmp_path / "out")


@pytest.fixture(scope="module")
def eager_tp1(tiny_model, tmp_path_factory) -> EngineOutputs:
    return run_in_process(make_brief(tiny_model, tmp_path_factory.mktemp("tp1") / "out"))


def max_logprob_delta(a: EngineOutputs, b: EngineOutputs) -> float:
    """max |delta| over a's top-k ids, looked up in b's top-k (ids must match as sets)."""
    wa, wb = a.workload("logits"), b.workload("logits")
    assert torch.equal(wa["offsets"], wb["offsets"])
    ids_a, ids_b = wa["topk_ids"], wb["topk_ids"]
    # Sort each row by id so near-tied orderings do not count as differences.
    sa, ia = ids_a.sort(dim=-1)
    sb, ib = ids_b.sort(dim=-1)
    assert torch.equal(sa, sb), "top-k id sets differ"
    return (wa["topk_logprobs"].gather(1, ia) - wb["topk_logprobs"].gather(1, ib)).abs().max().item()


@pytest.mark.slow  # builds a transformers Llama (and runs it)
def test_tp1_matches_transformers(tiny_model, eager_tp1):
    transformers = pytest.importorskip("transformers")
    hf = transformers.LlamaForCausalLM.from_pretrained(tiny_model, dtype=torch.float32, attn_implementation="eager").eval()
    w = eager_tp1.workload("logits")
    offsets, worst = w["offsets"], 0.0
    for i, prompt in enumerate(prompts()):
        with torch.no_grad():
            ref = torch.log_softmax(hf(torch.tensor([prompt])).logits[0].float(), dim=-1)
        rows = slice(offsets[i], offsets[i + 1])
        ids = w["topk_ids"][rows]
        assert torch.equal(ids[:, 0], ref.argmax(-1))
        worst = max(worst, (ref.gather(1, ids) - w["topk_logprobs"][rows]).abs().max().item())
        # greedy: HF's own generate, no EOS stop
        with torch.no_grad():
            gen = hf.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW, do_sample=False)
        assert gen[0, len(prompt) :].tolist() == eager_tp1.workload("greedy")["tokens"][i].tolist()
    print(f"max |delta logprob| vs HF: {worst:.3g}")
    assert worst <= 1e-5


@pytest.mark.slow  # builds a transformers Llama (and runs it)
def test_output_format(eager_tp1):
    n, p, k = sum(PROMPT_LENS), len(PROMPT_LENS), 8
    w, g = eager_tp1.workload("logits"), eager_tp1.workload("greedy")
    assert w["topk_ids"].shape == (n, k) and w["topk_ids"].dtype == torch.int64
    assert w["topk_logprobs"].shape == (n, k) and w["topk_logprobs"].dtype == torch.float32
    assert w["offsets"].tolist() == [0, 5, 14, 17, 29]
    assert g["tokens"].shape == (p, MAX_NEW) and g["topk_ids"].shape == (p, MAX_NEW, 5)
    assert torch.equal(g["tokens"], g["topk_ids"][..., 0])
    meta = eager_tp1.meta
    assert meta["engine"] == "reference" and set(meta["timings"]) == {"load_s", "warmup_s", "run_s"}
    assert meta["stage_io"][0]["sent"] == {} and meta["stage_io"][0]["received"] == {}


SETTINGS: dict[str, dict[str, Any]] = {
    "tp2": dict(tp=2),
    "pp2": dict(pp=2),
    "tp2-pp2": dict(tp=2, pp=2),
    "tp2-sp": dict(tp=2, sp=True),
    "tp2-pp2-sp": dict(tp=2, pp=2, sp=True),
    "compile": dict(compile=True),
    "tp2-compile": dict(tp=2, compile=True),
    "dp2-tp2": dict(dp=2, tp=2),  # two replicas of two ranks, outputs merged in prompt order
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(SETTINGS))
def test_setting_matches_tp1_eager(name, tiny_model, eager_tp1, tmp_path):
    settings = SETTINGS[name]
    out = run_setting(tiny_model, tmp_path, **settings)
    delta = max_logprob_delta(eager_tp1, out)
    print(f"{name}: max |delta logprob| vs tp1 eager: {delta:.3g}")
    assert delta <= 1e-4
    assert torch.equal(out.workload("greedy")["tokens"], eager_tp1.workload("greedy")["tokens"])
    meta = out.meta
    assert meta["settings"]["tp"] == settings.get("tp", 1)
    if settings.get("pp", 1) > 1:
        io = meta["stage_io"]
        tp = settings.get("tp", 1)
        for rank in range(tp):  # stage 0 TP rank r sends exactly what stage 1 TP rank r allocates
            assert io[rank]["sent"] == io[tp + rank]["received"]
            assert set(io[rank]["sent"]) == {"hidden_states", "residual"}
    if settings.get("compile"):
        # graphs were captured at warm-up, and real requests reused them
        assert meta["compile"]["after_warmup"]["unique_graphs"] > 0, meta["compile"]
        assert meta["compile"]["graphs_compiled_during_run"] == 0, meta["compile"]


@pytest.mark.slow  # builds a transformers Llama (and runs it)
def test_unsupported_reasons(tiny_model):
    eng = ReferenceEngine()
    assert eng.unsupported_reason({"tp": 1, "sp": True}) is not None
    assert eng.unsupported_reason({"tp": 2, "pp": 2, "sp": True}) is None
    assert "num_attention_heads" in present(eng.unsupported_reason({"tp": 3}, model_dir=tiny_model))
    assert "pp=5" in present(eng.unsupported_reason({"pp": 5}, model_dir=tiny_model))
    assert eng.unsupported_reason({"tp": 2, "pp": 4}, model_dir=tiny_model) is None
    assert "no axis" in present(eng.unsupported_reason({"batch_invariant": True}))


def test_faults_registry():
    from harness.engines.reference import faults

    assert faults.active(["rank-raise@1"], "rank-raise") == "1"
    assert faults.active([], "rank-raise") is False
    assert faults.active(make_brief(Path("m"), Path("o"), faults=["rank-hang@0"]), "rank-hang") == "0"
    with pytest.raises(ValueError, match="knows: rank-raise@N"):
        faults.parse(["rank-explode@1"])


def test_the_all_reduce_perturbation_takes_a_positive_size():
    from harness.engines.reference import faults

    assert faults.active(["tp-allreduce-perturb@1e-4"], "tp-allreduce-perturb") == "1e-4"
    with pytest.raises(ValueError, match="needs a positive number: tp-allreduce-perturb@EPS, got 'tp-allreduce-perturb@abc'"):
        faults.parse(["tp-allreduce-perturb@abc"])
    with pytest.raises(ValueError, match="needs a positive number: tp-allreduce-perturb@EPS"):
        faults.parse(["tp-allreduce-perturb"])
    with pytest.raises(ValueError, match="tp-allreduce-perturb@EPS"):
        faults.parse(["no-such-fault"])  # the listing names the parameter


@pytest.mark.e2e
def test_rank_raise_fault_fails_only_that_rank(tiny_model, tmp_path):
    brief = make_brief(tiny_model, tmp_path / "out", faults=["rank-raise@1"], pp=2)
    outcome = launch_ranks(brief, tmp_path)
    assert outcome.status == "crash" and outcome.failure is not None and outcome.failure.rank == 1, explain(outcome)
    assert "fault rank-raise" in present(outcome.failure.exception)
    assert "fault rank-raise" in Path(outcome.logs[1]).read_text()
    assert not EngineOutputs.exists(tmp_path / "out")


@pytest.mark.e2e
def test_a_run_past_its_budget_fails_as_a_timeout(tiny_model, tmp_path, monkeypatch):
    """A run that outlives its (scaled) budget says it timed out, and where each rank
    was; it is not an anonymous "ranks exited [-9, -9]"."""
    monkeypatch.setenv("HARNESS_STALL_WINDOW_S", "0")  # this is about the budget, not the stall detector
    # 600 s -> 10 s first, 30 s where the ranks had not reached the hang by then (a loaded
    # machine); a whole factor, so the budget is whole seconds where the launcher and this
    # assertion read it
    for divisor in (60, 20):
        monkeypatch.setenv(TIME_SCALE_ENV, f"{max(1, round(time_scale())) / divisor:g}")
        work = tmp_path / f"budget-{divisor}"
        work.mkdir()
        with pytest.raises(pytest.fail.Exception) as failed:
            run_setting(tiny_model, work, faults=["rank-hang@1"], tp=2)
        message = str(failed.value)
        if "faults.py" in message:
            break
    assert f"timed out after {scaled(RUN_BUDGET_S):.0f}s waiting for the ranks to finish" in message, message
    assert f"{TIME_SCALE_ENV}={time_scale():g}" in message, message
    assert "rank 1 at" in message and "faults.py" in message, message  # the hung rank, at the injected sleep


def test_layer_split_and_batch_groups():
    from harness.engines.reference.model import pp_layer_split
    from harness.engines.reference.pipeline import MAX_SEQS_PER_BATCH, batch_groups

    assert pp_layer_split(5, 3) == [range(0, 2), range(2, 4), range(4, 5)]
    assert pp_layer_split(4, 2) == [range(0, 2), range(2, 4)]
    groups = batch_groups([[1, 2]] * (MAX_SEQS_PER_BATCH + 3))
    assert [len(g) for g in groups] == [MAX_SEQS_PER_BATCH, 3]
    assert batch_groups([]) == []


def test_data_parallel_replicas_share_the_prompts_round_robin():
    from harness.contract.replicas import replica_workloads
    from harness.contract.replicas import share as replica_share

    assert [replica_share(5, 2, r) for r in range(2)] == [[0, 2, 4], [1, 3]]
    assert [replica_share(2, 3, r) for r in range(3)] == [[0], [1], []]  # a replica may get none
    w = {"name": "x", "kind": "greedy", "prompts": [[0, 1], [0, 2], [0, 3]], "images": ["a", None, "c"], "capture_hidden": True}
    (cut,) = replica_workloads([w], 2, 1)
    assert cut["prompts"] == [[0, 2]] and cut["images"] == [None] and cut["capture_hidden"] is False
    assert replica_workloads([w], 1, 0) == [w]  # one replica: the workloads as they are
