"""Trained models: tiny checkpoints that score well above chance on the harness's evals.

Random-weight models score zero on any task, so a task-accuracy comparison against the
golden would pass vacuously. These two share one set of weights, trained on CPU by
`python -m tools.train_models` and shipped in harness/inputs/zoo/weights/ (float32, committed):

  tiny-llama-geo    llama-vl (the reference engine's vision variant): 32x32 images as
                    16 patch tokens (id 511), deepstack into layers 0 and 1; trained on
                    GSM8K-format arithmetic and Geo3K-format diagram problems
                    (harness/run/evals/synth). Its diagram score depends on deepstack.
  tiny-llama-arith  the same text weights as a plain LlamaForCausalLM (vision keys and
                    visual.* tensors dropped), for engines without llama-vl (vLLM, HF).
                    On text-only prompts it is the same model: text batches have zero
                    deepstack and no image embeddings.

Their checksums are recorded like every zoo model's; the weights are copied (or
filtered) from the shipped file, not regenerated, so they do not depend on training.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.inputs.zoo.llama import _llama_config
from harness.inputs.zoo.recipe import ModelRecipe

WEIGHTS = Path(__file__).resolve().parent / "weights" / "tiny-llama-geo.safetensors"
VISION_KEYS = ("image_token_id", "vision_image_size", "vision_patch_size", "deepstack_layers")


def geo_config() -> dict:
    return _llama_config(
        architectures=["LlamaVisionForCausalLM"],
        model_type="llama-vl",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        image_token_id=511,
        vision_image_size=32,
        vision_patch_size=8,
        deepstack_layers=2,
    )


def arith_config() -> dict:
    config = {k: v for k, v in geo_config().items() if k not in VISION_KEYS}
    config.update(architectures=["LlamaForCausalLM"], model_type="llama")
    return config


def _missing() -> FileNotFoundError:
    return FileNotFoundError(
        f"{WEIGHTS} is missing: it ships with the harness; rebuild it with `python -m tools.train_models` (docs/EVALS.md)"
    )


def copy_trained_weights(recipe: ModelRecipe, path: Path) -> None:
    if not WEIGHTS.exists():
        raise _missing()
    shutil.copyfile(WEIGHTS, path)


def write_text_weights(recipe: ModelRecipe, path: Path) -> None:
    """The shipped tensors without visual.* (the text model's checkpoint)."""
    from safetensors.torch import load_file, save_file

    if not WEIGHTS.exists():
        raise _missing()
    tensors = {k: v for k, v in load_file(str(WEIGHTS)).items() if not k.startswith("visual.")}
    save_file(tensors, str(path), metadata={"format": "pt"})


TINY_LLAMA_GEO = ModelRecipe(
    name="tiny-llama-geo",
    config=geo_config(),
    seed=0,
    sha256="e9a3143686aa08a4066dead90872b17d5edeff3a0e938d18f981f69fbcb0b747",
    write_weights=copy_trained_weights,
    notes="trained (tools/train_models.py): arithmetic + 32x32 diagrams, hidden 128, 4 layers, "
    "head_dim 32, deepstack into layers 0 and 1",
)

TINY_LLAMA_ARITH = ModelRecipe(
    name="tiny-llama-arith",
    config=arith_config(),
    seed=0,
    sha256="5261a485e7806773fb1e2319fab27da8824575f6bf109345fbba12fca91f686e",
    write_weights=write_text_weights,
    notes="tiny-llama-geo's text weights as a plain LlamaForCausalLM",
)
