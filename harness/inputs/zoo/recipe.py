"""What a zoo model is: a name, a config, a seed, a recorded checksum and a weight writer.

Apart from harness/inputs/zoo/__init__.py so the family modules (llama, variants, trained,
hf_families) can build their recipes without importing the package that lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelRecipe:
    name: str
    config: dict  # HF config.json contents
    seed: int
    # over CHECKPOINT_FILES, see harness.inputs.zoo.checkpoint_sha256
    sha256: str
    # writes the weights file: (recipe, path) -> None; each model family provides one
    write_weights: Callable[[ModelRecipe, Path], None]
    # Scale of the output head: a wider logit spread keeps greedy decoding away
    # from near-ties, which random tiny models are otherwise full of.
    head_scale: float = 4.0
    notes: str = ""
    # Special tokens beyond SPECIAL_TOKENS (e.g. a vision model's image placeholders);
    # they get the ids right after SPECIAL_TOKENS.
    extra_special_tokens: tuple[str, ...] = ()
