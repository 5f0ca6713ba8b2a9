"""harness/contract/replicas.py: the `dp` axis's split and merge, shared by the engines."""

from __future__ import annotations

import torch

from harness.contract import replicas


def _logprobs(rows_per_prompt: list[int], base: int) -> dict:
    offsets = torch.tensor([0, *rows_per_prompt]).cumsum(0)
    total = int(offsets[-1])
    return {"topk_ids": torch.arange(total).unsqueeze(1) + base, "topk_logprobs": torch.zeros(total, 1), "offsets": offsets}


def test_merge_puts_every_replicas_prompts_back_in_the_workloads_order():
    """Replica r served prompts r, r+dp, ...: the merge interleaves them back, for logprob
    rows (their offsets too) and per-prompt tensors alike."""
    workloads: list[dict] = [
        {"name": "logits", "kind": "logprobs", "prompts": [[1, 2], [1, 2, 3], [1]]},
        {"name": "greedy", "kind": "greedy", "prompts": [[1], [2], [3]]},
        {"name": "none", "kind": "greedy", "prompts": []},
    ]
    cut = [replicas.replica_workloads(workloads, 2, r) for r in range(2)]
    assert [w["prompts"] for w in cut[1]] == [[[1, 2, 3]], [[2]], []]
    by_replica = {
        0: {
            "logits": _logprobs([2, 1], 100),
            "greedy": {"tokens": torch.tensor([[10], [30]])},
            "none": {"tokens": torch.zeros(0, 1)},
        },
        1: {"logits": _logprobs([3], 200), "greedy": {"tokens": torch.tensor([[20]])}, "none": {"tokens": torch.zeros(0, 1)}},
    }
    merged = replicas.merge(workloads, by_replica, 2)
    assert merged["greedy"]["tokens"].tolist() == [[10], [20], [30]]
    assert merged["logits"]["offsets"].tolist() == [0, 2, 5, 6]
    assert merged["logits"]["topk_ids"][:, 0].tolist() == [100, 101, 200, 201, 202, 102]
    assert merged["none"]["tokens"].shape == (0, 1)
    assert replicas.merge(workloads, {0: by_replica[0]}, 1) is by_replica[0]
