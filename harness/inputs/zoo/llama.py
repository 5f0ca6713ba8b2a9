"""The Llama family: tiny Llama checkpoints in Hugging Face format."""

from __future__ import annotations

from pathlib import Path

from harness.inputs.zoo.recipe import ModelRecipe


def _llama_config(**overrides) -> dict:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 512,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
    }
    config.update(overrides)
    return config


def write_llama_weights(recipe: ModelRecipe, path: Path) -> None:
    import numpy as np
    import torch
    from safetensors.torch import save_file

    rng = np.random.default_rng(recipe.seed)
    tensors = {}
    for name, shape, std in _llama_weight_shapes(recipe.config, recipe.head_scale):
        # norm weights: near 1, not exactly, so a missed norm shows
        if std is None:
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            values = std * rng.standard_normal(shape)
        tensors[name] = torch.from_numpy(values.astype(np.float32))
    save_file(tensors, str(path), metadata={"format": "pt"})


def _llama_weight_shapes(config: dict, head_scale: float):
    """(name, shape, std) of every weight, in a fixed order (the RNG stream depends on it).
    std is 1/sqrt(fan_in) for linears, so activations keep their scale through the layers."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    vocab = config["vocab_size"]
    yield "model.embed_tokens.weight", (vocab, hidden), 1.0
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        yield f"{p}.input_layernorm.weight", (hidden,), None
        yield f"{p}.self_attn.q_proj.weight", (heads * head_dim, hidden), hidden**-0.5
        yield f"{p}.self_attn.k_proj.weight", (kv_heads * head_dim, hidden), hidden**-0.5
        yield f"{p}.self_attn.v_proj.weight", (kv_heads * head_dim, hidden), hidden**-0.5
        yield f"{p}.self_attn.o_proj.weight", (hidden, heads * head_dim), (heads * head_dim) ** -0.5
        yield f"{p}.post_attention_layernorm.weight", (hidden,), None
        yield f"{p}.mlp.gate_proj.weight", (inter, hidden), hidden**-0.5
        yield f"{p}.mlp.up_proj.weight", (inter, hidden), hidden**-0.5
        yield f"{p}.mlp.down_proj.weight", (hidden, inter), inter**-0.5
    yield "model.norm.weight", (hidden,), None
    if not config.get("tie_word_embeddings", False):
        yield "lm_head.weight", (vocab, hidden), head_scale * hidden**-0.5


TINY_LLAMA = ModelRecipe(
    name="tiny-llama",
    config=_llama_config(),
    seed=0,
    sha256="beb3997011e4405844ca34ad56c1106da0284638a541365029d60f5324fdb30f",
    write_weights=write_llama_weights,
    notes="float32, hidden 64, 4 layers, 4 query / 2 KV heads (GQA), vocab 512",
)
