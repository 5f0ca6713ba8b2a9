"""Llama variants that add what real models add at the pipeline-parallel boundary.

  tiny-llama-pli  per-layer inputs, as Gemma 3n / Gemma4: a second embedding of the
                  token ids ([vocab, layers * width]) computed on the first stage; layer
                  i adds a projection of its own slice, so every stage needs them.
  tiny-llama-vl   images, as Qwen3-VL: an 8x8 RGB image becomes four 4x4 patches whose
                  embeddings replace four placeholder tokens (id 511), and whose
                  "deepstack" projections are added after decoder layers 0 and 1.

  tiny-llama-moe  a mixture of experts, as Mixtral / Qwen3-MoE: each layer's MLP is four
                  SwiGLU experts behind a router, two per token; expert parallelism
                  splits them over the TP ranks.

All are the tiny-llama architecture plus (or, for the experts, instead of) those weights
(harness/inputs/zoo/llama.py), built the same way: seeded numpy weights, recorded checksums.
"""

from __future__ import annotations

from pathlib import Path

from harness.inputs.zoo.llama import _llama_config, _llama_weight_shapes
from harness.inputs.zoo.recipe import ModelRecipe

# the last BPE merge: verified absent from the prompt sets (inputs/workloads.py)
IMAGE_TOKEN_ID = 511


def _extra_weight_shapes(config: dict):
    """(name, shape, std) of the variant's own weights, after the Llama ones."""
    hidden = config["hidden_size"]
    width = config.get("per_layer_input_size", 0)
    if width:
        yield "model.embed_per_layer.weight", (config["vocab_size"], config["num_hidden_layers"] * width), 1.0
        for i in range(config["num_hidden_layers"]):
            yield f"model.layers.{i}.per_layer_proj.weight", (hidden, width), width**-0.5
    if config["model_type"] == "llama-vl":
        patch_dim = 3 * config["vision_patch_size"] ** 2
        yield "visual.patch_embed.weight", (hidden, patch_dim), patch_dim**-0.5
        for j in range(config["deepstack_layers"]):
            yield f"visual.deepstack.{j}.weight", (hidden, hidden), hidden**-0.5


def _moe_weight_shapes(config: dict, head_scale: float):
    """tiny-llama's (name, shape, std) with each layer's MLP replaced by a router and
    `num_local_experts` expert MLPs, in a fixed order."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    for name, shape, std in _llama_weight_shapes(config, head_scale):
        if not name.endswith(".mlp.gate_proj.weight"):
            if ".mlp." not in name:
                yield name, shape, std
            continue
        p = name.removesuffix("gate_proj.weight")
        yield f"{p}gate.weight", (config["num_local_experts"], hidden), hidden**-0.5
        for e in range(config["num_local_experts"]):
            yield f"{p}experts.{e}.gate_proj.weight", (inter, hidden), hidden**-0.5
            yield f"{p}experts.{e}.up_proj.weight", (inter, hidden), hidden**-0.5
            yield f"{p}experts.{e}.down_proj.weight", (hidden, inter), inter**-0.5


def write_variant_weights(recipe: ModelRecipe, path: Path) -> None:
    import numpy as np
    import torch
    from safetensors.torch import save_file

    rng = np.random.default_rng(recipe.seed)
    tensors = {}
    if recipe.config["model_type"] == "llama-moe":
        shapes = list(_moe_weight_shapes(recipe.config, recipe.head_scale))
    else:
        shapes = list(_llama_weight_shapes(recipe.config, recipe.head_scale)) + list(_extra_weight_shapes(recipe.config))
    for name, shape, std in shapes:
        values = 1.0 + 0.1 * rng.standard_normal(shape) if std is None else std * rng.standard_normal(shape)
        tensors[name] = torch.from_numpy(values.astype(np.float32))
    save_file(tensors, str(path), metadata={"format": "pt"})


TINY_LLAMA_PLI = ModelRecipe(
    name="tiny-llama-pli",
    config=_llama_config(architectures=["LlamaPerLayerInputsForCausalLM"], model_type="llama-pli", per_layer_input_size=8),
    seed=1,
    sha256="5c5826d312764f650d1cf008f9ba840eb3b6ce141b485691f862a2fcaab9b40e",
    write_weights=write_variant_weights,
    notes="tiny-llama + per-layer inputs (width 8 per layer); no residual key at a PP boundary",
)

TINY_LLAMA_VL = ModelRecipe(
    name="tiny-llama-vl",
    config=_llama_config(
        architectures=["LlamaVisionForCausalLM"],
        model_type="llama-vl",
        image_token_id=IMAGE_TOKEN_ID,
        vision_image_size=8,
        vision_patch_size=4,
        deepstack_layers=2,
    ),
    seed=2,
    sha256="48d54e2692fd324fb3f8f72d3ec0c01b009e5ff3943acc65ddbaef80834bd95e",
    write_weights=write_variant_weights,
    notes="tiny-llama + 8x8 images as 4 patch tokens (id 511), deepstack into layers 0 and 1",
)

TINY_LLAMA_MOE = ModelRecipe(
    name="tiny-llama-moe",
    config=_llama_config(
        architectures=["LlamaMoeForCausalLM"],
        model_type="llama-moe",
        intermediate_size=64,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    seed=3,
    sha256="df051e197836d2c24710f0a1461d4e943491cf05b3a41d8018a3b57f474712c1",
    write_weights=write_variant_weights,
    notes="tiny-llama with 4 SwiGLU experts (intermediate 64) per layer, top-2 routing; EP splits them over TP ranks",
)
