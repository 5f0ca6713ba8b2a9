"""Every model of the zoo, in one table.

A model's recipe (config, seed, recorded checksum, weight writer) is written in its
family's module, beside the code that builds its weights, so a scenario file's change
rule for that module still covers it; this table is the one place that says which
recipes the zoo has. Nothing registers itself on import: a model missing here is not in
the zoo. Adding one: write its recipe in its family module (or a new one) and list it.
"""

from __future__ import annotations

from harness.inputs.zoo import hf_families, llama, trained, variants
from harness.inputs.zoo.recipe import ModelRecipe

RECIPES: tuple[ModelRecipe, ...] = (
    # random tiny Llamas for the reference engine (harness/inputs/zoo/llama.py, variants.py)
    llama.TINY_LLAMA,
    variants.TINY_LLAMA_PLI,
    variants.TINY_LLAMA_VL,
    variants.TINY_LLAMA_MOE,
    # trained on the eval tasks, weights shipped in harness/inputs/zoo/weights/ (trained.py)
    trained.TINY_LLAMA_GEO,
    trained.TINY_LLAMA_ARITH,
    # built through transformers, for the real-engine suites (hf_families.py)
    hf_families.TINY_LLAMA_HF,
    hf_families.TINY_QWEN3,
    hf_families.TINY_GEMMA4,
    hf_families.TINY_QWEN25VL,
)


def by_name(recipes: tuple[ModelRecipe, ...]) -> dict[str, ModelRecipe]:
    table: dict[str, ModelRecipe] = {}
    for recipe in recipes:
        if recipe.name in table:
            raise ValueError(f"model '{recipe.name}' is listed twice in harness/inputs/zoo/table.py")
        table[recipe.name] = recipe
    return table


ZOO: dict[str, ModelRecipe] = by_name(RECIPES)
