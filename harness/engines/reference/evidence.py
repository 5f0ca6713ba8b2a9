"""What this engine really applied, per axis, with the evidence (harness/compare/applied.py).

Each rank measures its own part (rank_evidence): which layers it holds, how many
attention heads, the TP collectives it ran, the graphs Dynamo compiled. The driver rank
gathers them and says, per axis, whether the setting took effect (summarize):

  tp       every stage's ranks hold 1/tp of the heads and ran all-reduces (or SP's
           reduce-scatters) in their TP group
  pp       the layers are split over pp stages, each holding a disjoint, non-empty range
  sp       token reduce-scatters ran (SP's replacement for the all-reduce)
  compile  Dynamo compiled (or loaded) graphs of the model's forward
"""

from __future__ import annotations

from harness.contract.applied import pp_layout, stage_layers


def rank_evidence(ctx, stage, compile_stats: dict, collectives: dict) -> dict:
    heads = stage.layers[0].self_attn.num_heads if len(stage.layers) else 0
    return {"rank": ctx.rank, "tp_rank": ctx.tp_rank, "pp_rank": ctx.pp_rank,
            "layers": list(stage.layer_ids), "heads": heads, "total_heads": stage.cfg.num_attention_heads,
            "collectives": dict(collectives), "graphs": compile_stats["unique_graphs"],
            "cache_hits": compile_stats["fxgraph_cache_hit"]}


def summarize(settings: dict, ranks: list[dict]) -> dict:
    out = {}
    if "tp" in settings:
        out["tp"] = _tp(int(settings["tp"]), ranks)
    if "pp" in settings:
        out["pp"] = pp_layout(int(settings["pp"]), stage_layers(ranks))
    if "sp" in settings:
        out["sp"] = _sp(ranks)
    if "compile" in settings:
        out["compile"] = _compile(ranks)
    return out


def _total(ranks: list[dict], kind: str) -> int:
    return sum(r["collectives"].get(kind, 0) for r in ranks)


def _tp(tp: int, ranks: list[dict]) -> dict:
    heads = sorted({(r["heads"], r["total_heads"]) for r in ranks})
    layout = ", ".join(f"{h} of {t} heads" for h, t in heads)
    reductions = _total(ranks, "all_reduce") + _total(ranks, "reduce_scatter_tokens")
    split = all(h * tp == t for h, t in heads)
    applied = split and (tp == 1 or reductions > 0)
    return {"applied": applied, "evidence": f"each rank holds {layout}; {reductions} TP reductions ran over {len(ranks)} ranks"}


def _sp(ranks: list[dict]) -> dict:
    scatters, reduces = _total(ranks, "reduce_scatter_tokens"), _total(ranks, "all_reduce")
    return {"applied": scatters > 0,
            "evidence": f"{scatters} token reduce-scatters and {reduces} all-reduces ran in the TP groups"}


def _compile(ranks: list[dict]) -> dict:
    graphs, hits = min(r["graphs"] for r in ranks), min(r["cache_hits"] for r in ranks)
    return {"applied": graphs > 0,
            "evidence": f"Dynamo compiled {graphs} graph(s) per rank (at least; {hits} from the inductor cache)"}
