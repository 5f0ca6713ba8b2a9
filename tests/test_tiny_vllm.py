"""The vLLM-only route of the tiny builder (harness/inputs/models/tiny_vllm.py): the weight
table of an architecture transformers cannot build. Loading such a checkpoint in vLLM
(whose loader refuses a checkpoint that leaves a parameter unset) is the golden run of
scenarios/vllm-native-archs.yaml; these are the table's own rules."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.inputs.models import tiny_vllm


def step3_config(**fields) -> SimpleNamespace:
    base = dict(
        hidden_size=128,
        vocab_size=512,
        share_q_dim=64,
        head_dim=32,
        num_attention_heads=4,
        moe_num_experts=4,
        moe_intermediate_size=64,
        share_expert_dim=64,
        intermediate_size=256,
        num_hidden_layers=2,
        moe_layers_enum="1",
    )
    return SimpleNamespace(**(base | fields))


def test_step3_layers_are_dense_or_moe_as_moe_layers_enum_says_in_either_form():
    for enum in ("1", (1,), " 1 "):
        shapes = tiny_vllm.step3_text(step3_config(moe_layers_enum=enum))
        assert "model.layers.0.mlp.gate_proj.weight" in shapes and "model.layers.0.moe.gate.weight" not in shapes
        assert "model.layers.1.moe.gate.weight" in shapes and "model.layers.1.mlp.gate_proj.weight" not in shapes


def test_step3_shapes_follow_the_config_as_its_vllm_loader_reads_them():
    shapes = tiny_vllm.step3_text(step3_config())
    # q/k/v are sliced into vLLM's fused qkv_proj by share_q_dim : head_dim : head_dim
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (64, 128)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == shapes["model.layers.0.self_attn.v_proj.weight"] == (32, 128)
    assert shapes["model.layers.0.self_attn.wq.weight"] == (4 * 32, 64)
    # routed experts stacked per projection: [experts, intermediate, hidden] (expert_params_mapping)
    assert shapes["model.layers.1.moe.gate_proj.weight"] == (4, 64, 128)
    assert shapes["model.layers.1.moe.down_proj.weight"] == (4, 128, 64)
    assert shapes["lm_head.weight"] == shapes["model.embed_tokens.weight"] == (512, 128)


def test_weights_are_seeded_and_norms_are_ones():
    pytest.importorskip("torch")
    shapes = tiny_vllm.step3_text(step3_config())
    a, b, c = (tiny_vllm.weights(shapes, seed) for seed in (0, 0, 1))
    assert all((a[k] == b[k]).all() for k in a) and not (a["lm_head.weight"] == c["lm_head.weight"]).all()
    assert (a["model.norm.weight"] == 1).all() and (a["model.layers.0.self_attn.inter_norm.weight"] == 1).all()
    assert 0.01 < float(a["model.embed_tokens.weight"].std()) < 0.03
