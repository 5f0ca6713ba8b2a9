"""Hand-made teacher-forced logprob outputs (run/compare/numeric.py's input), for the tests of
the comparison rules and of the repro script that must judge as the harness does."""

from __future__ import annotations

import torch

K = 8


def logprob_outputs(logits: torch.Tensor, offsets: list[int], k: int = K) -> dict:
    """A logprobs workload's fields from per-position logits."""
    values, ids = logits.log_softmax(-1).topk(k, -1)
    return {"topk_ids": ids, "topk_logprobs": values, "offsets": torch.tensor(offsets)}


def decisive_flips(rows: int = 20, flipped: int = 1, seed: int = 0) -> tuple[dict, dict]:
    """Golden and scenario outputs where the first `flipped` positions swap their top-1
    and top-2 (a gap of 0.1, past bf16's near-tie 0.05) while every |dlogprob| stays under
    bf16's bound (0.15): what bf16 rounding does at a near-but-not-quite tie."""
    golden = 3 * torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed))
    scenario = golden.clone()
    for row in range(flipped):
        a, b = golden[row].topk(2).indices
        golden[row, b] = golden[row, a] - 0.1
        scenario[row, a], scenario[row, b] = golden[row, b], golden[row, a]
    return logprob_outputs(golden, [0, rows]), logprob_outputs(scenario, [0, rows])
