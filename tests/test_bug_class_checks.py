"""The harness-side checks behind the bug classes, on synthetic inputs: the PP boundary
contract, failure localisation, the setting that explains a run's failures, and image
workloads."""

from __future__ import annotations

import copy

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.verdict import Verdict
from harness.run.compare.contracts import check_pp_contract
from harness.run.compare.localize import describe, first_divergence
from harness.run.report.axes import explaining_settings
from tests.kit.present import present

HIDDEN = {"shape": [8, 64], "dtype": "float32"}


def stage_io(pp: int = 2, tp: int = 1, keys=("hidden_states", "residual")) -> list[dict]:
    io = []
    for stage in range(pp):
        for r in range(tp):
            declared = {k: dict(HIDDEN) for k in keys}
            io.append(
                {
                    "rank": stage * tp + r,
                    "pp_rank": stage,
                    "tp_rank": r,
                    "layers": [2 * stage, 2 * stage + 2],
                    "expects": declared if stage else {},
                    "received": copy.deepcopy(declared) if stage else {},
                    "sent": copy.deepcopy(declared) if stage < pp - 1 else {},
                }
            )
    return io


def test_contract_holds_for_matching_stages_and_is_silent_without_pp():
    assert present(check_pp_contract(stage_io())).passed
    assert check_pp_contract(stage_io(pp=1)) is None
    assert check_pp_contract(None) is None


def test_contract_names_a_key_missing_from_the_receive_buffer():
    io = stage_io(tp=2)
    del io[3]["received"]["residual"]  # stage 1, tp rank 1 allocated no residual
    result = present(check_pp_contract(io))
    assert not result.passed
    assert result.summary == "stage 0 -> 1 (tp rank 1): 'residual' sent but not in the receive buffer"


def test_contract_names_a_side_channel_the_sender_dropped_and_a_shape_mismatch():
    io = stage_io()
    io[1]["expects"]["kv_connector_output"] = io[1]["received"]["kv_connector_output"] = {"kind": "object"}
    io[0]["sent"]["residual"] = {"shape": [4, 64], "dtype": "float32"}
    problems = present(check_pp_contract(io)).metrics["problems"]
    assert "stage 0 -> 1 (tp rank 0): 'kv_connector_output' expected by the receiver but not sent" in problems
    assert any("'residual' sent as {'shape': [4, 64]" in p for p in problems)


def captured(states: torch.Tensor, owner: torch.Tensor, sp: bool, io: list) -> EngineOutputs:
    out = EngineOutputs(meta={"settings": {"sp": sp}, "stage_io": io})
    out.put("logits", hidden_states=states, hidden_owner=owner)
    return out


def test_localisation_names_layer_stage_and_sp_shard():
    torch.manual_seed(0)
    states = torch.randn(4, 8, 64)
    owner = torch.tensor([0] * 4 + [1] * 4)
    golden = captured(states, torch.zeros(8, dtype=torch.int64), False, stage_io(pp=1))
    broken = states.clone()
    broken[2, 5:] += 0.5  # layer 2, rows of tp rank 1's shard
    broken[3] += 0.5  # everything after it differs too
    found = present(first_divergence(golden, captured(broken, owner, True, stage_io(pp=2, tp=2)), [{"name": "logits"}]))
    assert (found["layer"], found["pp_stage"], found["tp_rank"], found["token_row"]) == (2, 1, 1, 5)
    assert describe(found).startswith("first diverging layer 2 (pp stage 1), SP shard of tp rank 1")


def test_localisation_ignores_float_noise_and_says_when_layers_agree():
    states = torch.randn(4, 8, 64)
    golden = captured(states, torch.zeros(8, dtype=torch.int64), False, stage_io(pp=1))
    found = present(
        first_divergence(
            golden, captured(states + 1e-6, torch.zeros(8, dtype=torch.int64), False, stage_io(pp=1)), [{"name": "logits"}]
        )
    )
    assert found["layer"] is None and "after the last layer" in found["note"]
    assert first_divergence(golden, EngineOutputs(), [{"name": "logits"}]) is None


def verdict(sid: str, outcome: str, **settings) -> Verdict:
    return Verdict(sid, outcome, "", settings=settings)


def test_the_setting_behind_the_failures_is_named():
    runs = [
        verdict("a/tp2-sp", "fail", tp=2, sp=True),
        verdict("a/tp2-pp2-sp", "crash", tp=2, pp=2, sp=True),
        verdict("a/tp2", "pass", tp=2, sp=False),
        verdict("a/tp1", "pass", tp=1, sp=False),
        verdict("a/tp3", "unsupported", tp=3, sp=True),
    ]
    assert present(explaining_settings(runs)).startswith("Failures explained by `sp=true`: every scenario with it failed (2)")
    pair = [
        verdict("vl/c", "fail", compile=True),
        verdict("vl/e", "pass", compile=False),
        verdict("tiny/c", "pass", compile=True),
    ]
    assert "`compile=true, suite=vl`" in present(explaining_settings(pair))
    assert explaining_settings(runs[2:4]) is None  # nothing failed
    # a feature left off separates them too, but the switched-on pair is the cause named
    cache = [
        verdict("f/pp2-pc", "fail", pp=2, prefix_cache=True, chunked_prefill=0),
        verdict("f/pp1-pc-cp", "pass", pp=1, prefix_cache=True, chunked_prefill=32),
        verdict("f/pp2-cp", "pass", pp=2, prefix_cache=False, chunked_prefill=32),
    ]
    assert present(explaining_settings(cache)).startswith("Failures explained by `pp=2, prefix_cache=true`")
    off_only = [verdict("g/a", "fail", sp=False), verdict("g/b", "pass", sp=True)]
    assert present(explaining_settings(off_only)).startswith(
        "Failures explained by `sp=false`"
    )  # still said when it is all there is
    mixed = [
        verdict("a/x", "fail", tp=2, pp=2),
        verdict("a/w", "fail", tp=1, pp=1),
        verdict("a/y", "pass", tp=2, pp=1),
        verdict("a/z", "pass", tp=1, pp=2),
    ]
    assert explaining_settings(mixed) == (
        "No single setting or pair separates the failures: all 2 have `suite=a`, but so do 2 that pass: a/y, a/z."
    )


def test_image_workloads_put_placeholders_after_bos_and_hash_pixels_not_paths(tmp_path, monkeypatch):
    from harness.inputs import workloads as wl
    from harness.inputs import zoo
    from harness.inputs.scenarios.schema import WorkloadDef
    from harness.run import golden as goldens

    model = zoo.model_dir("tiny-llama-vl")
    w = [
        WorkloadDef(
            name="images", kind="logprobs", num_prompts=3, images=["noise-8x8", "gradient-8x8", None], max_prompt_tokens=20
        )
    ]
    first = wl.tokenize(w, model, zoo.load_tokenizer(model))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "elsewhere"))  # images written anew, other paths
    second = wl.tokenize(w, model, zoo.load_tokenizer(model))
    assert first[0]["images"][0] != second[0]["images"][0] and second[0]["images"][2] is None
    assert goldens.workload_checksum(first) == goldens.workload_checksum(second)
    prompt = second[0]["prompts"][0]
    assert prompt[:5] == [wl.BOS_ID] + [511] * 4 and 511 not in second[0]["prompts"][2]
    with pytest.raises(ValueError, match="has no vision encoder"):
        text_only = zoo.model_dir("tiny-llama")
        wl.tokenize(w, text_only, zoo.load_tokenizer(text_only))


def test_a_shared_prefix_under_a_chat_template_leads_every_prompts_text(tmp_path):
    """A chat template writes the start of every prompt: the shared passage then leads each
    prompt's text, after the template's own start, so the prompts share both (a prefix
    cache needs more than one KV block of it: 128 tokens on vLLM's CPU)."""
    import shutil

    from harness.inputs import chat, zoo
    from harness.inputs import workloads as wl
    from harness.inputs.scenarios.schema import WorkloadDef

    text_model = zoo.model_dir("tiny-llama")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(text_model / name, tmp_path / name)
    (tmp_path / chat.TEMPLATE_FILE).write_text(
        "{{ bos_token }}USER: {% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %} ASSISTANT:"
    )
    w = WorkloadDef(name="w", kind="logprobs", num_prompts=3, shared_prefix=150, max_prompt_tokens=220)
    prompts = wl.tokenize([w], tmp_path, zoo.load_tokenizer(tmp_path))[0]["prompts"]
    shared = next(i for i, column in enumerate(zip(*prompts)) if len(set(column)) > 1)
    assert shared >= 150 and len({tuple(p) for p in prompts}) == 3
    plain = wl.tokenize([w], text_model, zoo.load_tokenizer(text_model))[0]["prompts"]  # BOS + the passage's ids
    assert prompts[0][:3] != plain[0][:3] and all(p[1:151] == plain[0][1:151] for p in plain)


def test_every_bug_class_has_a_fault_switch():
    from harness.engines.reference import faults

    for name in (
        "pp-buffer-missing-key",
        "pp-drop-kv-connector-output",
        "pp-drop-per-layer-inputs",
        "sp-residual-first-shard",
        "compile-warmup-without-images",
    ):
        assert "vLLM PR" in faults.FAULTS[name].description
        assert faults.active([name], name) is True and faults.active([], name) is False
