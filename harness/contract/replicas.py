"""Data parallelism's split and merge (the `dp` axis): which prompts each replica serves,
and the replicas' outputs put back in each workload's prompt order.

A data-parallel engine is dp whole engines (replicas), each serving a share of the
requests. Engines share this module so every engine splits a workload the same way
(round robin, as requests spread over DP engines) and merges by the same rule: the
reference engine gathers its replicas' outputs over torch.distributed, the vLLM driver
through files (engines/vllm/driver.py). Stdlib at import; torch where outputs are
joined (engine processes have it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from harness.contract import batching
from harness.contract.jsonfile import JSONObject

if TYPE_CHECKING:
    import torch

# One workload's output fields ({"tokens": ..., "topk_ids": ...}, harness/contract/outputs.py)
Fields = dict[str, "torch.Tensor"]


def share(count: int, dp: int, dp_rank: int) -> list[int]:
    """The prompts replica `dp_rank` serves: every dp-th, from its own index."""
    return list(range(dp_rank, count, dp))


def replica_workloads(workloads: list[JSONObject], dp: int, dp_rank: int) -> list[JSONObject]:
    """Each workload cut to this replica's share of its prompts (and their media). Without
    the per-layer capture under dp > 1: its rows are those of the golden's first batch,
    which no replica's first batch is."""
    from harness.contract.runbrief import MEDIA

    if dp == 1:
        return workloads
    out = []
    for w in workloads:
        mine = share(len(w["prompts"]), dp, dp_rank)
        cut = {field: [w[field][i] for i in mine] for field in ("prompts", *MEDIA) if w.get(field) is not None}
        out.append({**w, **cut, "capture_hidden": False})
    return out


def merge(
    workloads: list[JSONObject],
    by_replica: Mapping[int, dict[str, Fields]],
    dp: int,
    shares: Callable[[int, int, int], list[int]] = share,
) -> dict[str, Fields]:
    """{workload name: fields} of every replica ({dp_rank: results}) -> one {name: fields}
    in each workload's prompt order. `shares` says which prompts each replica served
    (a fault switch may give another rule)."""
    if dp == 1:
        return by_replica[0]
    merged: dict[str, Fields] = {}
    for w in workloads:
        n = len(w["prompts"])
        if not n:
            merged[w["name"]] = by_replica[0][w["name"]]
            continue
        subs = [batching.Submission([], shares(n, dp, r)) for r in range(dp)]
        pieces = [per_prompt(w["kind"], by_replica[r][w["name"]]) if subs[r].origin else [] for r in range(dp)]
        merged[w["name"]] = joined(w["kind"], batching.restore(pieces, subs, n))
    return merged


def per_prompt(kind: str, fields: Mapping[str, torch.Tensor]) -> list[Fields]:
    """One submission's output fields, split into one dict per prompt."""
    if kind == "logprobs":
        offsets = fields["offsets"].tolist()
        return [{k: fields[k][a:b] for k in ("topk_ids", "topk_logprobs")} for a, b in zip(offsets, offsets[1:])]
    count = len(next(iter(fields.values())))
    return [{k: v[p] for k, v in fields.items()} for p in range(count)]


def joined(kind: str, prompts: Sequence[Mapping[str, torch.Tensor]]) -> Fields:
    """Per-prompt output fields back into a workload's fields (the inverse of per_prompt)."""
    import torch

    if kind == "logprobs":
        rows = torch.tensor([0] + [len(p["topk_ids"]) for p in prompts]).cumsum(0)
        return {
            "topk_ids": torch.cat([p["topk_ids"] for p in prompts]),
            "topk_logprobs": torch.cat([p["topk_logprobs"] for p in prompts]),
            "offsets": rows,
        }
    return {k: torch.stack([p[k] for p in prompts]) for k in prompts[0]}
