"""What a rank reports as applied (EngineOutputs meta `applied`, judged by
harness/run/compare/applied.py): the pieces every engine's evidence shares. Stdlib only."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from harness.contract.axes import AXES, RunAxes, named
from harness.contract.jsonfile import JSONObject

# One axis's summary: (the run's axes, the engine's own report: its ranks' records, vLLM's
# workers) -> {"applied", "evidence", ...} or None
Summary = Callable[[RunAxes, Any], "JSONObject | None"]
S = TypeVar("S", bound=Summary)


def pp_layout(pp: int, stage_layers: dict[int, list[int]]) -> dict[str, object]:
    """PP took effect when the layers are split over `pp` stages, each holding a
    disjoint, non-empty range ({stage: layer indices it holds})."""
    held = [layer for layers in stage_layers.values() for layer in layers]
    applied = len(stage_layers) == pp and all(stage_layers.values()) and len(held) == len(set(held))
    ranges = [f"stage {s}: layers {ls[0]}-{ls[-1]}" if ls else f"stage {s}: no layers" for s, ls in sorted(stage_layers.items())]
    return {"applied": applied, "evidence": "; ".join(ranges)}


def stage_layers(ranks: Iterable[Mapping[str, Any]]) -> dict[int, list[int]]:
    """{pp stage: the layers its ranks hold} from per-rank reports with `pp_rank`."""
    stages: dict[int, list[int]] = {}
    for r in ranks:
        stages.setdefault(r["pp_rank"], r["layers"])
    return stages


class AxisEvidence:
    """An engine's evidence summaries, one per axis it reports on, each registered by its own
    function named as its axis (`@EVIDENCE.of` over `def sp(axes, report)`): no if-chain over
    the axes and no axis spelt as a string. A summary returns None where it has nothing to say
    (its axis off); a function named for no declared axis is refused at import."""

    def __init__(self) -> None:
        self.summaries: dict[str, Summary] = {}

    def of(self, summary: S) -> S:
        if summary.__name__ not in AXES:
            raise ValueError(f"evidence summary {summary.__name__!r} is named for no declared axis (harness/contract/axes.py)")
        self.summaries[summary.__name__] = summary
        return summary

    def summarize(self, settings: Mapping[str, Any], report: Any) -> dict[str, JSONObject]:
        """{axis: {"applied", "evidence"}} for each axis `settings` names that a summary
        reports on, from the engine's `report` (its ranks' or workers' records)."""
        axes = RunAxes.of(settings)
        out: dict[str, JSONObject] = {}
        for name in named(settings):
            summary = self.summaries.get(name)
            entry = summary(axes, report) if summary else None
            if entry is not None:
                out[name] = entry
        return out
