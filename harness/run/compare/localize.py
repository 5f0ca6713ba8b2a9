"""Where a numeric failure starts: the first place whose hidden states leave the golden's.

Engines that capture per-layer hidden states on request (workload `capture_hidden`) let
a failing verdict name the first diverging place: the embedding's output (before layer
0) or the stream after a layer, the pipeline stage that runs it (from the engine's
`stage_io`), and the TP rank whose copy diverged first. Captured fields, of sampled
token rows of one batch:
  embed_states    [rows, H]           the embedding's output (optional: older goldens lack it)
  hidden_states   [layers, rows, H]   the stream after each layer
  hidden_rows     [rows]              each row's index in the batch
  hidden_owner    [rows]              the TP rank whose SP shard held each row
  replica_states  [tp, 1 + layers, rows, H]   without SP: every TP rank's own copy of the
                                      stream (a fault may touch one replica only)

The bound: a row diverges at a place when |delta| / |golden| of that row (L2 over the
hidden channels, so it is relative to each token's own magnitude at that layer) exceeds
the dtype's `hidden_rtol` (tolerances.py, the one table). The bound sits as far above the float32 noise of clean
tp/pp/sp/compile runs as the logit check's bound sits above its floor (docs/TOLERANCES.md
has both floors), so a failure the logit check finds is located at the first place that
really moved.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from harness.contract.axes import RunAxes
from harness.contract.jsonfile import JSONObject
from harness.contract.outputs import EngineOutputs
from harness.run.compare.tolerances import hidden_rtol

EMBEDDING = "the embedding (before layer 0)"


def _stage_of(layer: int, stage_io: list[JSONObject] | None) -> int | None:
    layer = max(layer, 0)  # the embedding runs on the stage of layer 0
    for s in stage_io or []:
        if s and s["layers"][0] <= layer < s["layers"][1]:
            stage: int = s["pp_rank"]
            return stage
    return None


def _places(fields: Mapping[str, torch.Tensor], with_embedding: bool) -> torch.Tensor:
    """[places, rows, H]: the embedding first (when compared), then every layer."""
    layers = fields["hidden_states"].float()
    return torch.cat([fields["embed_states"].float()[None], layers]) if with_embedding else layers


def _views(fields: Mapping[str, torch.Tensor], with_embedding: bool) -> tuple[torch.Tensor, list[int] | None]:
    """([views, places, rows, H], the TP rank of each view, or None when the one view
    holds each row as its SP owner saw it)."""
    if "replica_states" in fields:
        replicas = fields["replica_states"].float()
        return (replicas if with_embedding else replicas[:, 1:]), list(range(replicas.shape[0]))
    return _places(fields, with_embedding)[None], None


def relative_deltas(golden: torch.Tensor, views: torch.Tensor) -> torch.Tensor:
    """|view - golden| / |golden| per row, L2 over the hidden channels: [views, places, rows].
    The floor keeps an all-zero golden row (padding) from dividing by zero."""
    norms = golden.norm(dim=-1)
    floor = norms.mean(dim=-1, keepdim=True).clamp(min=1e-30) * 1e-6
    rel: torch.Tensor = (views - golden).norm(dim=-1) / torch.maximum(norms, floor)
    return rel


def first_divergence(
    golden: EngineOutputs, candidate: EngineOutputs, workloads: list[JSONObject], rtol: float | None = None
) -> JSONObject | None:
    """The first diverging place of the first captured workload, or None if nothing was
    captured. `rtol`: the bound (default: the hidden_rtol of the candidate run's dtype)."""
    rtol = rtol if rtol is not None else hidden_rtol(candidate.meta.get("dtype", ""))
    for w in workloads:
        # eval generations capture nothing; the evals judge them
        if w.get("kind") == "generate":
            continue
        g, s = golden.workload(w["name"]), candidate.workload(w["name"])
        if "hidden_states" not in g or "hidden_states" not in s:
            continue
        return _locate(g, s, w["name"], candidate.meta, rtol)
    return None


def _locate(
    g: Mapping[str, torch.Tensor], s: Mapping[str, torch.Tensor], workload: str, meta: JSONObject, rtol: float
) -> JSONObject:
    with_embedding = "embed_states" in g and "embed_states" in s
    gold = _places(g, with_embedding)
    views, view_ranks = _views(s, with_embedding)
    if gold.shape != views.shape[1:]:
        return {"workload": workload, "note": f"captured hidden states {tuple(views.shape[1:])} != golden {tuple(gold.shape)}"}
    rel = relative_deltas(gold, views)
    bad = rel > rtol
    if not bad.any():
        return {
            "workload": workload,
            "layer": None,
            "max_rel_delta": rel.max().item(),
            "rtol": rtol,
            "note": f"every captured layer's hidden states agree (|delta|/|h| <= {rtol:g}): the divergence "
            "starts after the last layer (final norm / lm_head) or outside the captured batch",
        }
    place = int(bad.any(dim=(0, 2)).nonzero()[0, 0])
    layer = place - 1 if with_embedding else place  # -1: the embedding
    diverged_views = bad[:, place].any(dim=1).nonzero().flatten().tolist()
    view = diverged_views[0]
    row = int(bad[view, place].nonzero()[0, 0])
    found = {
        "workload": workload,
        "layer": layer,
        "place": EMBEDDING if layer < 0 else f"layer {layer}",
        "pp_stage": _stage_of(layer, meta.get("stage_io")),
        "token_row": int(s["hidden_rows"][row]) if "hidden_rows" in s else row,
        "max_abs_delta": (views[view, place] - gold[place]).abs().max().item(),
        "max_rel_delta": rel[:, place].max().item(),
        "rtol": rtol,
    }
    if view_ranks is not None and len(view_ranks) > 1:
        found["tp_rank"], found["tp_copy"] = view_ranks[view], "replica"
        found["diverging_tp_ranks"] = [view_ranks[v] for v in diverged_views]
    elif RunAxes.of(meta.get("settings", {})).sp and "hidden_owner" in s:
        found["tp_rank"], found["tp_copy"] = int(s["hidden_owner"][row]), "SP shard"
        owners = s["hidden_owner"][bad[0, place].nonzero().flatten()]
        found["diverging_tp_ranks"] = owners.unique().tolist()  # type: ignore[no-untyped-call]  # torch: Tensor.unique is unannotated
    return found


def describe(found: JSONObject) -> str:
    """One phrase for a verdict's reason (an engine's module localization,
    harness/run/compare/modules.py, brings its own)."""
    if "text" in found:
        text: str = found["text"]
        return text
    if found.get("layer") is None:
        note: str = found.get("note", "")
        return note
    where = f"layer {found['layer']}" if found["layer"] >= 0 else f"place: {EMBEDDING}"
    text = f"first diverging {where}"
    if found.get("pp_stage") is not None:
        text += f" (pp stage {found['pp_stage']})"
    if "tp_rank" in found:
        text += f", {found['tp_copy']} of tp rank {found['tp_rank']}"
    return (
        text + f" [{found['workload']}: token row {found['token_row']}, |delta| {found['max_abs_delta']:.3g}, "
        f"|delta|/|h| {found['max_rel_delta']:.2g} > {found['rtol']:g}]"
    )
