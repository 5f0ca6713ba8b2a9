"""A vLLM model's decoder layer list, found by shape rather than by name: the evidence a worker
reports (evidence.py) and the localizer's forward hooks (record.py) both start from it."""

from __future__ import annotations

# a multimodal model's encoders: every PP rank holds them whole
TOWERS = ("vision", "visual", "audio", "encoder", "tower")


def decoder_layers(model) -> list:
    """The decoder stack: a ModuleList named `layers` or `h` (GPT-2's), the one that PP
    split (it holds PPMissingLayer placeholders) first, then one outside the multimodal
    encoders (a vision tower has `layers` too, as long as a tiny decoder's), then the longest."""
    import torch

    lists = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h")
    ]
    if not lists:
        return []

    def rank(item) -> tuple:
        name, layers = item
        split = any(type(layer).__name__ == "PPMissingLayer" for layer in layers)
        in_tower = any(part in name.lower() for part in TOWERS)
        return (split, not in_tower, len(layers))

    return list(max(lists, key=rank)[1])
