"""What this engine really applied, per axis, with the evidence (harness/run/compare/applied.py).

Each rank measures its own part (rank_evidence): which layers it holds, how many
attention heads, the TP collectives it ran, the graphs Dynamo compiled. The driver rank
gathers them and says, per axis, whether the setting took effect (summarize):

  tp       every stage's ranks hold 1/tp of the heads and ran all-reduces (or SP's
           reduce-scatters) in their TP group
  pp       the layers are split over pp stages, each holding a disjoint, non-empty range
  sp       token reduce-scatters ran (SP's replacement for the all-reduce)
  compile  Dynamo compiled (or loaded) graphs of the model's forward
  ep       each TP rank of a stage holds its own whole experts, together all of them
  chunked_prefill  a prefill longer than the budget ran as several steps, none over it
  prefix_cache     prompts were served with leading tokens from the cache (hit tokens > 0)
  block_size       the prefix cache kept blocks of that many tokens, and hit in whole blocks
  batch    the prompts went in as the mode composes them: one a batch, or with fillers
  spec     drafted tokens were verified (proposed > 0), and how many were kept
  dp       dp replicas formed, each of which served prompts
"""

from __future__ import annotations

from harness.contract.applied import AxisEvidence, pp_layout, stage_layers
from harness.contract.axes import RunAxes


def rank_evidence(ctx, stage, compile_stats: dict, collectives: dict, runner) -> dict:
    layer = stage.layers[0] if len(stage.layers) else None
    heads = layer.self_attn.num_heads if layer is not None else 0
    experts = list(getattr(layer.mlp, "expert_ids", [])) if layer is not None else []
    cache = runner.prefix_cache.counts if runner.prefix_cache is not None else None
    return {
        "rank": ctx.rank,
        "tp_rank": ctx.tp_rank,
        "pp_rank": ctx.pp_rank,
        "dp_rank": ctx.dp_rank,
        "prompts_served": runner.prompts_served,
        "layers": list(stage.layer_ids),
        "heads": heads,
        "total_heads": stage.cfg.num_attention_heads,
        "experts": experts,
        "total_experts": stage.cfg.num_experts,
        "expert_width": layer.mlp.intermediate_size if layer is not None and experts else 0,
        "collectives": dict(collectives),
        "graphs": compile_stats["unique_graphs"],
        "cache_hits": compile_stats["fxgraph_cache_hit"],
        "prefill": dict(runner.prefill_stats),
        "chunk_budget": runner.chunk_budget,
        "cache_counts": cache,
        "batch_stats": dict(runner.batch_stats),
        "spec_stats": dict(runner.spec_stats),
    }


EVIDENCE = AxisEvidence()


def summarize(settings: dict, ranks: list[dict]) -> dict:
    """Per axis `settings` names: applied and the evidence, from every rank's record."""
    return EVIDENCE.summarize(settings, ranks)


def _total(ranks: list[dict], kind: str) -> int:
    return sum(r["collectives"].get(kind, 0) for r in ranks)


@EVIDENCE.of
def tp(axes: RunAxes, ranks: list[dict]) -> dict:
    tp = axes.tp
    heads = sorted({(r["heads"], r["total_heads"]) for r in ranks})
    layout = ", ".join(f"{h} of {t} heads" for h, t in heads)
    reductions = _total(ranks, "all_reduce") + _total(ranks, "reduce_scatter_tokens")
    split = all(h * tp == t for h, t in heads)
    applied = split and (tp == 1 or reductions > 0)
    return {"applied": applied, "evidence": f"each rank holds {layout}; {reductions} TP reductions ran over {len(ranks)} ranks"}


@EVIDENCE.of
def pp(axes: RunAxes, ranks: list[dict]) -> dict:
    return pp_layout(axes.pp, stage_layers(ranks))


@EVIDENCE.of
def sp(axes: RunAxes, ranks: list[dict]) -> dict:
    scatters, reduces = _total(ranks, "reduce_scatter_tokens"), _total(ranks, "all_reduce")
    return {
        "applied": scatters > 0,
        "evidence": f"{scatters} token reduce-scatters and {reduces} all-reduces ran in the TP groups",
    }


@EVIDENCE.of
def compile(axes: RunAxes, ranks: list[dict]) -> dict:
    graphs, hits = min(r["graphs"] for r in ranks), min(r["cache_hits"] for r in ranks)
    return {
        "applied": graphs > 0,
        "evidence": f"Dynamo compiled {graphs} graph(s) per rank (at least; {hits} from the inductor cache)",
    }


@EVIDENCE.of
def ep(axes: RunAxes, ranks: list[dict]) -> dict:
    """Applied when, on every stage, the TP ranks hold disjoint whole experts that
    together are all of the layer's experts."""
    if not any(r["total_experts"] for r in ranks):
        return {"applied": False, "evidence": "the model has no experts"}
    held = {r["rank"]: r["experts"] for r in ranks}
    by_stage: dict[int, list[int]] = {}
    for r in ranks:
        by_stage.setdefault(r["pp_rank"], []).extend(r["experts"])
    total = ranks[0]["total_experts"]
    split = all(sorted(ids) == list(range(total)) for ids in by_stage.values())
    split = split and all(len(ids) < total for ids in held.values())
    layout = "; ".join(f"rank {rank}: experts {_span(ids)}" for rank, ids in sorted(held.items()))
    return {"applied": split, "evidence": f"{layout} (of {total}, width {ranks[0]['expert_width']} each)"}


def _span(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}" if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)) else ",".join(map(str, ids))


@EVIDENCE.of
def chunked_prefill(axes: RunAxes, ranks: list[dict]) -> dict:
    stats, budget = ranks[0]["prefill"], ranks[0]["chunk_budget"]
    applied = stats["split_prefills"] > 0 and stats["largest_step_tokens"] <= budget
    return {
        "applied": applied,
        "evidence": f"{stats['split_prefills']} of {stats['prefills']} prefills ran in chunks ({stats['chunks']} "
        f"chunks, at most {stats['largest_step_tokens']} tokens a step, budget {budget})",
    }


@EVIDENCE.of
def prefix_cache(axes: RunAxes, ranks: list[dict]) -> dict:
    counts = [r["cache_counts"] for r in ranks if r["cache_counts"] is not None]
    if not counts:
        return {"applied": False, "evidence": "no rank kept a prefix cache"}
    hits = min(c["hit_tokens"] for c in counts)
    return {
        "applied": hits > 0,
        "evidence": f"{hits} of {counts[0]['queried_tokens']} prompt tokens came from the cache "
        f"({counts[0]['stored_blocks']} blocks stored per rank)",
    }


@EVIDENCE.of
def block_size(axes: RunAxes, ranks: list[dict]) -> dict | None:
    """The prefix cache kept blocks of `block` tokens, and every hit was whole blocks of them
    (nothing to say at 0: the engine's own block size)."""
    block = axes.block_size
    if not block:
        return None
    counts = [r["cache_counts"] for r in ranks if r["cache_counts"] is not None]
    sizes = sorted({c["block"] for c in counts})
    whole = all(c["hit_tokens"] % block == 0 for c in counts)
    return {
        "applied": sizes == [block] and whole and any(c["hit_tokens"] for c in counts),
        "evidence": f"prefix-cache blocks of {', '.join(map(str, sizes)) or 'no'} tokens; hits "
        f"{'in' if whole else 'NOT in'} whole blocks ({counts[0]['hit_tokens'] if counts else 0} tokens)",
    }


@EVIDENCE.of
def batch(axes: RunAxes, ranks: list[dict]) -> dict:
    mode, stats = axes.batch, ranks[0]["batch_stats"]
    sizes = f"prefill batches of {stats['smallest_batch']}-{stats['largest_batch']} sequences"
    if mode == "one":
        return {
            "applied": stats["largest_batch"] == 1 and stats["submissions"] > 0,
            "evidence": f"{stats['submissions']} submissions of one prompt; {sizes}",
        }
    if mode == "mixed":
        return {"applied": stats["fillers"] > 0, "evidence": f"prompts shuffled among {stats['fillers']} filler prompts; {sizes}"}
    return {"applied": True, "evidence": f"each workload in one submission; {sizes}"}


@EVIDENCE.of
def spec(axes: RunAxes, ranks: list[dict]) -> dict:
    stats = ranks[0]["spec_stats"]
    return {
        "applied": stats["proposed"] > 0,
        "evidence": f"{stats['proposed']} draft tokens proposed, {stats['accepted']} accepted, "
        f"in {stats['steps']} verification steps",
    }


@EVIDENCE.of
def dp(axes: RunAxes, ranks: list[dict]) -> dict:
    served: dict[int, int] = {}
    for r in ranks:
        served.setdefault(r["dp_rank"], r["prompts_served"])
    applied = len(served) == axes.dp and all(served.values())
    layout = "; ".join(f"replica {d}: {n} prompts" for d, n in sorted(served.items()))
    return {"applied": applied, "evidence": f"{len(served)} replicas of {len(ranks) // max(len(served), 1)} ranks; {layout}"}
