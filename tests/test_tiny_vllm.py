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


# ---------------------------------------------------------------------------------
# the generic route's pure rules: vLLM's names and shapes back to a checkpoint's


def test_the_model_type_is_the_archs_own_name_first_then_the_config_classes_its_vllm_source_names():
    vllm_types = {"Step3TextConfig": "step3_text"}
    transformers_types = {"PhimoeConfig": "phimoe", "LlamaConfig": "llama", "MistralConfig": "mistral"}
    # PhiMoEForCausalLM is transformers' PhimoeForCausalLM spelt otherwise: its own name wins
    assert tiny_vllm.config_candidates("PhiMoEForCausalLM", vllm_types, transformers_types, ["LlamaConfig"])[0] == "phimoe"
    # InternLM3 is vLLM's llama.py: the config class that source names
    assert tiny_vllm.config_candidates("InternLM3ForCausalLM", vllm_types, transformers_types, ["config: LlamaConfig"]) == [
        "llama"
    ]
    # of several, the one whose name starts as the arch's does first; unknown classes left out
    source = "from x import LlamaConfig, MistralConfig, VllmConfig, CacheConfig"
    assert tiny_vllm.config_candidates("MistralLikeForCausalLM", vllm_types, transformers_types, [source]) == ["mistral", "llama"]
    assert tiny_vllm.config_candidates("NothingForCausalLM", vllm_types, transformers_types, ["VllmConfig"]) == []


def test_stacked_mappings_give_each_fused_layer_its_parts_in_shard_order():
    stacked = {
        ".v_proj": (".qkv_proj", "v"),
        ".q_proj": (".qkv_proj", "q"),
        ".k_proj": (".qkv_proj", "k"),
        ".up_proj": (".gate_up_proj", 1),
        ".gate_proj": (".gate_up_proj", 0),
    }
    parts = tiny_vllm.stacked_parts(stacked, {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "wqkv": ["wqkv"], "w13": ["w1", "w3"]})
    assert parts[".qkv_proj"] == [(".q_proj", (0,)), (".k_proj", (1,)), (".v_proj", (2,))]
    assert parts[".gate_up_proj"] == [(".gate_proj", (0,)), (".up_proj", (1,))]
    # packed_modules_mapping adds what no mapper names; a layer packed with itself is no split
    assert parts[".w13"] == [(".w1", (0,)), (".w3", (1,))] and ".wqkv" not in parts
    # one checkpoint tensor that fills several shards (Qwen3.5's in_proj_qkv: q, k and v of in_proj_qkvz)
    gdn = tiny_vllm.stacked_parts({".in_proj_qkv": (".in_proj_qkvz", (0, 1, 2)), ".in_proj_z": (".in_proj_qkvz", 3)}, {})
    assert gdn[".in_proj_qkvz"] == [(".in_proj_qkv", (0, 1, 2)), (".in_proj_z", (3,))]


def test_a_load_weights_written_out_stacked_mapping_is_read_from_its_source():
    source = """
        stacked_params_mapping = [
            # (param_name, shard_name, shard_id)
            ("qkv_proj", "q_proj", "q"),
            (".gate_up_proj", ".gate_proj", 0),
        ]
        expert_params_mapping = [("experts.w13_", "experts.0.w1.", 0, "w1")]
        other = ("a", "b", "w1")
    """
    assert tiny_vllm.stacked_from_source(source) == {".q_proj": (".qkv_proj", "q"), ".gate_proj": (".gate_up_proj", 0)}


def test_a_fused_parameter_splits_by_its_layers_output_sizes():
    parts = tiny_vllm.stacked_parts(
        {
            ".q_proj": (".qkv_proj", "q"),
            ".k_proj": (".qkv_proj", "k"),
            ".v_proj": (".qkv_proj", "v"),
            ".mlp.gate_proj": (".mlp.gate_up_proj", 0),
            ".mlp.up_proj": (".mlp.gate_up_proj", 1),
            ".in_proj_qkv": (".in_proj_qkvz", (0, 1, 2)),
            ".in_proj_z": (".in_proj_qkvz", 3),
        },
        {},
    )
    qkv = tiny_vllm.split_fused("model.layers.0.self_attn.qkv_proj", "weight", (256, 128), [128, 64, 64], parts)
    assert [(p.name, p.shape) for p in qkv] == [
        ("model.layers.0.self_attn.q_proj.weight", (128, 128)),
        ("model.layers.0.self_attn.k_proj.weight", (64, 128)),
        ("model.layers.0.self_attn.v_proj.weight", (64, 128)),
    ]
    bias = tiny_vllm.split_fused("model.layers.0.self_attn.qkv_proj", "bias", (256,), [128, 64, 64], parts)
    assert [p.shape for p in bias] == [(128,), (64,), (64,)]
    mlp = tiny_vllm.split_fused("model.layers.1.mlp.gate_up_proj", "weight", (512, 128), [256, 256], parts)
    assert [p.name for p in mlp] == ["model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight"]
    gdn = tiny_vllm.split_fused("model.layers.0.linear_attn.in_proj_qkvz", "weight", (320, 128), [64, 64, 128, 64], parts)
    assert [(p.name, p.shape) for p in gdn] == [
        ("model.layers.0.linear_attn.in_proj_qkv.weight", (256, 128)),
        ("model.layers.0.linear_attn.in_proj_z.weight", (64, 128)),
    ]
    # a shared expert's gate_up_proj is not the dense MLP's: the mapper names only ".mlp."
    shared = tiny_vllm.split_fused("model.layers.1.shared_experts.gate_up_proj", "weight", (128, 128), [64, 64], parts)
    assert [p.name for p in shared] == ["model.layers.1.shared_experts.gate_up_proj.weight"]
    # no output sizes, or no mapping: the checkpoint holds the parameter as it is
    assert tiny_vllm.split_fused("lm_head", "weight", (512, 128), None, parts) == [tiny_vllm.Piece("lm_head.weight", (512, 128))]
    assert tiny_vllm.split_fused("", "image_newline", (128,), None, parts) == [tiny_vllm.Piece("image_newline", (128,))]


def test_routed_experts_split_per_expert_as_the_layers_expert_mapping_names_them():
    mapping = [
        ("experts.w13_", f"experts.{e}.{w}.", e, s) for e in range(2) for w, s in (("w1", "w1"), ("w2", "w2"), ("w3", "w3"))
    ]
    path = "model.layers.0.block_sparse_moe.experts.routed_experts"
    w13 = tiny_vllm.split_experts(path, "w13_weight", (2, 512, 128), [m for m in mapping if m[3] != "w2"])
    assert [(p.name, p.shape) for p in w13] == [
        ("model.layers.0.block_sparse_moe.experts.0.w1.weight", (256, 128)),
        ("model.layers.0.block_sparse_moe.experts.0.w3.weight", (256, 128)),
        ("model.layers.0.block_sparse_moe.experts.1.w1.weight", (256, 128)),
        ("model.layers.0.block_sparse_moe.experts.1.w3.weight", (256, 128)),
    ]
    down = [("experts.w2_", f"experts.{e}.down_proj.", e, "w2") for e in range(2)]
    w2 = tiny_vllm.split_experts("model.layers.0.mlp.experts", "w2_weight", (2, 128, 256), down)
    assert [(p.name, p.shape) for p in w2] == [
        ("model.layers.0.mlp.experts.0.down_proj.weight", (128, 256)),
        ("model.layers.0.mlp.experts.1.down_proj.weight", (128, 256)),
    ]


def test_a_mappers_renames_are_undone_and_a_dropped_weight_is_no_way_back():
    prefix = {"model.": "language_model.model.", "lm_head.": "language_model.lm_head.", "vision.": None}
    assert tiny_vllm.unmapped("language_model.model.norm.weight", prefix, {}, {}) == "model.norm.weight"
    assert tiny_vllm.unmapped("language_model.lm_head.weight", prefix, {}, {}) == "lm_head.weight"
    assert tiny_vllm.unmapped("visual.blocks.0.weight", prefix, {".attn.": ".self_attn."}, {}) == "visual.blocks.0.weight"
    assert (
        tiny_vllm.unmapped("model.layers.0.self_attn.o.weight", {}, {".attn.": ".self_attn."}, {})
        == "model.layers.0.attn.o.weight"
    )
    assert tiny_vllm.unmapped("model.norm.gamma", {}, {}, {".weight": ".gamma"}) == "model.norm.weight"


def test_draft_heads_and_the_transformers_backend_are_no_checkpoint_of_their_own():
    assert "draft head" in str(tiny_vllm.not_standalone("EagleLlamaForCausalLM", {"EagleLlamaForCausalLM"}, set()))
    assert "Transformers backend" in str(tiny_vllm.not_standalone("TransformersForCausalLM", set(), {"TransformersForCausalLM"}))
    assert tiny_vllm.not_standalone("PhiMoEForCausalLM", {"EagleLlamaForCausalLM"}, {"TransformersForCausalLM"}) is None


def test_a_field_the_model_reads_is_named_from_its_attribute_error_and_sized_by_its_name():
    assert (
        tiny_vllm.missing_field(AttributeError("'LlamaConfig' object has no attribute 'moe_intermediate_size'"))
        == "moe_intermediate_size"
    )
    assert tiny_vllm.missing_field(AttributeError("'Tensor' object has no attribute 'foo'")) is None
    assert tiny_vllm.missing_field(KeyError("x")) is None
    assert tiny_vllm.guessed_value("num_experts_per_tok") == 2 and tiny_vllm.guessed_value("num_experts") == 4
    assert tiny_vllm.guessed_value("moe_intermediate_size") == 64 and tiny_vllm.guessed_value("use_qkv_bias") is False
    assert tiny_vllm.guessed_value("embedding_dropout") == 0.0 and tiny_vllm.guessed_value("rms_norm_eps") == 1e-6
    assert tiny_vllm.guessed_value("activation_function") == "silu"
    assert tiny_vllm.guessed_value("norm_topk_prob") is False and tiny_vllm.guessed_value("kv_lora_rank") == 32
    # a remote-code name for the layer count is the config's own (TeleChat2's n_layer): 1 would
    # make a one-layer model, and a pp2 stage without a layer
    four_layers = SimpleNamespace(num_hidden_layers=4)
    assert tiny_vllm.guessed_value("n_layer", four_layers) == 4 and tiny_vllm.guessed_value("num_layers") == 2
    assert tiny_vllm.guessed_value("num_dense_layers", four_layers) == 1  # a count of some layers stays small
    assert (
        tiny_vllm.guessed_value("topk_group") == 1
        and tiny_vllm.guessed_value("decoder_sparse_step") == 1
        and tiny_vllm.guessed_value("scoring_func") == "softmax"
    )
    assert tiny_vllm.guessed_value("original_rope") is None and tiny_vllm.guessed_value("n_head") == 4
    assert tiny_vllm.guessed_value("first_k_dense_replace") == 1 and tiny_vllm.guessed_value("dim_model_base") == 64


def test_an_arch_transformers_has_is_not_this_routes_and_one_it_lacks_is():
    pytest.importorskip("transformers")
    assert tiny_vllm.builds("Step3TextForCausalLM") and tiny_vllm.builds("PhiMoEForCausalLM")
    assert not tiny_vllm.builds("Qwen3ForCausalLM") and not tiny_vllm.builds("PhimoeForCausalLM")
    assert not tiny_vllm.builds("NotAGeneratorAtAll")


def test_derived_pieces_are_seeded_in_order_and_norms_are_ones():
    pytest.importorskip("torch")
    pieces = [
        tiny_vllm.Piece("a.weight", (4, 3)),
        tiny_vllm.Piece("n.weight", (3,), norm=True),
        tiny_vllm.Piece("b.weight", (2,)),
    ]
    a, b = tiny_vllm.weights_of(pieces, 0), tiny_vllm.weights_of(pieces, 0)
    assert all((a[k] == b[k]).all() for k in a) and (a["n.weight"] == 1).all()
    assert not (a["b.weight"] == tiny_vllm.weights_of(pieces[2:], 0)["b.weight"]).all()  # drawn after a.weight


def test_the_proof_bench_reports_a_failed_load_by_its_root_cause_not_the_front_ends_wrapper():
    import importlib.util

    from tests.kit import ROOT

    spec = importlib.util.spec_from_file_location("bench_vllm_only_builds", ROOT / "bench" / "vllm_only_builds.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    stderr = """(EngineCore pid=7) ERROR 12-07 09:11:09 [core.py:1] EngineCore failed to start.
(EngineCore pid=7)   File "/x/layer.py", line 3, in forward
(EngineCore pid=7) RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x64 and 128x64)
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""
    assert bench._last_error(stderr) == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x64 and 128x64)"
