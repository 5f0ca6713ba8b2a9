"""What a rank reports as applied (EngineOutputs meta `applied`, judged by
harness/run/compare/applied.py): the pieces every engine's evidence shares. Stdlib only."""

from __future__ import annotations


def pp_layout(pp: int, stage_layers: dict[int, list[int]]) -> dict:
    """PP took effect when the layers are split over `pp` stages, each holding a
    disjoint, non-empty range ({stage: layer indices it holds})."""
    held = [layer for layers in stage_layers.values() for layer in layers]
    applied = len(stage_layers) == pp and all(stage_layers.values()) and len(held) == len(set(held))
    ranges = [f"stage {s}: layers {ls[0]}-{ls[-1]}" if ls else f"stage {s}: no layers" for s, ls in sorted(stage_layers.items())]
    return {"applied": applied, "evidence": "; ".join(ranges)}


def stage_layers(ranks: list[dict]) -> dict[int, list[int]]:
    """{pp stage: the layers its ranks hold} from per-rank reports with `pp_rank`."""
    stages: dict[int, list[int]] = {}
    for r in ranks:
        stages.setdefault(r["pp_rank"], r["layers"])
    return stages
