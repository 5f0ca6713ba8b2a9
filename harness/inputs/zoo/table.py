"""Every model of the zoo, in one table.

A model's spec (config, seed, recorded checksum, weight writer) is written in its
family's module, beside the code that builds its weights, so a scenario file's change
rule for that module still covers it; this table is the one place that says which
specs the zoo has. Nothing registers itself on import: a model missing here is not in
the zoo. Adding one: write its spec in its family module (or a new one) and list it.
"""

from __future__ import annotations

from harness.inputs.zoo import hf_families, llama, trained, variants
from harness.inputs.zoo.spec import ModelSpec

SPECS: tuple[ModelSpec, ...] = (
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


def by_name(specs: tuple[ModelSpec, ...]) -> dict[str, ModelSpec]:
    table: dict[str, ModelSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise ValueError(f"model '{spec.name}' is listed twice in harness/inputs/zoo/table.py")
        table[spec.name] = spec
    return table


ZOO: dict[str, ModelSpec] = by_name(SPECS)
