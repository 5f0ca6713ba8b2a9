"""Tiny Qwen3, Gemma4 (text, with per-layer inputs) and Qwen2.5-VL checkpoints, built
through transformers itself: `from_config` under a fixed torch seed, then `save_pretrained`.

These are the models the real-engine suites (vLLM, HF) run. Building them with the
library that defines the architecture means every weight name and shape is what the
engines expect, without a hand-written list per family.

Two adjustments after transformers' own init, both under the same seed, because a
random model with HF's defaults is a weak test subject:
  * norm weights get +-10% noise: HF initialises them to exactly 1 (or 0 for
    Gemma's 1+w form), which would hide a norm an engine forgets to apply;
  * initializer_range is raised to ~1/sqrt(hidden) and an untied output head is
    scaled by head_scale, so logits spread out: with the default 0.02 every
    next-token distribution is near uniform, near-ties everywhere and a wrong
    number can hide under the float32 bound.

Reproducibility: transformers' init draws from torch's global CPU generator in
module-construction order, so the bytes depend on the torch and transformers
versions of the *harness* process (the engines only read the files). The zoo's
checksum check turns any drift into a clear error instead of silent golden drift;
tests/test_zoo_hf.py builds each model twice in separate processes to show the
build is reproducible on one installation.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from harness.inputs.zoo.recipe import ModelRecipe

# Qwen-VL's vision placeholders, as its processor names them.
VISION_START, IMAGE_PAD, VISION_END, VIDEO_PAD = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"
VL_SPECIAL = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
# ids after zoo.SPECIAL_TOKENS (<s>, </s>, <pad>)
VL_IDS = {tok: 3 + i for i, tok in enumerate(VL_SPECIAL)}
NORM_NOISE = 0.1
# Qwen-VL's image processor works in 28-pixel units (patch 14 x merge 2).
VL_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "rescale_factor": 0.00392156862745098,
    "min_pixels": 3136,
    "max_pixels": 12544,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


def write_hf_weights(recipe: ModelRecipe, path: Path) -> None:
    """model.safetensors of `recipe` via transformers; extra files (image processor) beside it."""
    import torch
    import transformers

    config = _hf_config(recipe.config)
    torch.manual_seed(recipe.seed)
    model_cls = getattr(transformers, recipe.config["architectures"][0])
    model = model_cls(config).to(torch.float32).eval()
    _perturb_norms(model, recipe.seed)
    _scale_head(model, recipe)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.move(str(Path(tmp) / "model.safetensors"), str(path))
    if recipe.config["model_type"] == "qwen2_5_vl":
        path.with_name("preprocessor_config.json").write_text(json.dumps(VL_PREPROCESSOR, indent=1, sort_keys=True))


def _hf_config(config: dict):
    from transformers import AutoConfig

    fields = {k: v for k, v in config.items() if k != "model_type"}
    return AutoConfig.for_model(config["model_type"], **fields)


def _perturb_norms(model, seed: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if "norm" in name.split(".")[-2] and name.endswith("weight"):
                param.add_(NORM_NOISE * torch.randn(param.shape, generator=gen))


def _scale_head(model, recipe: ModelRecipe) -> None:
    """Widen the logit spread (see ModelRecipe.head_scale); a tied head is left alone
    because scaling it would scale the input embeddings too."""
    import torch

    head = model.get_output_embeddings()
    if head is None or head.weight is model.get_input_embeddings().weight:
        return
    with torch.no_grad():
        head.weight.mul_(recipe.head_scale)


_COMMON_TEXT = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    # vLLM's CPU attention kernel supports head sizes 32, 64, 80, ... (not 16)
    "head_dim": 32,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    # ~1/sqrt(hidden): activations keep their scale
    "initializer_range": 0.09,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
    "torch_dtype": "float32",
}

LLAMA = {
    **_COMMON_TEXT,
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
}

QWEN3 = {
    **_COMMON_TEXT,
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "attention_bias": False,
    "tie_word_embeddings": False,
}

# Gemma4's text model: per-layer inputs (hidden_size_per_layer_input), sliding and
# full attention layers, tied embeddings, logit soft-capping.
GEMMA4 = {
    **_COMMON_TEXT,
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "hidden_activation": "gelu_pytorch_tanh",
    "global_head_dim": 32,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "sliding_window": 32,
    "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": 512,
    "num_kv_shared_layers": 0,
    "final_logit_softcapping": 30.0,
    "tie_word_embeddings": True,
}

QWEN25_VL = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "image_token_id": VL_IDS[IMAGE_PAD],
    "video_token_id": VL_IDS[VIDEO_PAD],
    "vision_start_token_id": VL_IDS[VISION_START],
    "vision_end_token_id": VL_IDS[VISION_END],
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "text_config": {
        **{k: v for k, v in _COMMON_TEXT.items() if k != "head_dim"},
        "model_type": "qwen2_5_vl_text",
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},
        "tie_word_embeddings": False,
    },
    "vision_config": {
        "model_type": "qwen2_5_vl",
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
        "initializer_range": 0.125,
        "torch_dtype": "float32",
    },
}


TINY_LLAMA_HF = ModelRecipe(
    name="tiny-llama-hf",
    config=LLAMA,
    seed=0,
    write_weights=write_hf_weights,
    sha256="9327baf72f4f7e5600e78e0f6bb03f07265e13827827add1906f41c672a0a2da",
    notes="float32 Llama, hidden 128, head_dim 32 (what vLLM's CPU attention supports), GQA 4/2",
)
TINY_QWEN3 = ModelRecipe(
    name="tiny-qwen3",
    config=QWEN3,
    seed=0,
    write_weights=write_hf_weights,
    sha256="59caed5f45b95dbe61063dd90a218150340e39cf048f3cb0bd9a09801f13c076",
    notes="float32 Qwen3, hidden 128, 4 layers, GQA 4/2, q/k norms",
)
TINY_GEMMA4 = ModelRecipe(
    name="tiny-gemma4",
    config=GEMMA4,
    seed=0,
    write_weights=write_hf_weights,
    sha256="50447f76bfb49f7457a7677620178bfeff52e14f44dad54623f6cef71597dad4",
    notes="float32 Gemma4 text model: per-layer inputs, 3 sliding + 1 full attention layer, tied embeddings",
)
TINY_QWEN25VL = ModelRecipe(
    name="tiny-qwen25vl",
    config=QWEN25_VL,
    seed=0,
    write_weights=write_hf_weights,
    sha256="1568b2d999defe4d632f90ad916ccbd57bd740bb08b00d1ad2b219a3dbc32588",
    extra_special_tokens=VL_SPECIAL,
    notes="float32 Qwen2.5-VL: 2-block vision tower (14px patches, 2x2 merge) + 4-layer text model, mrope",
)
