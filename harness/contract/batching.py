"""Batch composition: how an engine submits a workload's prompts (the `batch` axis).

A prompt's outputs must not depend on what else is in its batch; engines have broken
that at TP > 1 (a reduction whose order follows the batch size). The axis changes only
how the prompts reach the engine, never which outputs come back:

    all    every prompt of the workload in one submission (the engine batches them)
    one    one submission per prompt: every batch holds a single sequence
    mixed  one submission, the prompts shuffled (fixed seed) and each followed by a
           filler prompt of another length that is not the workload's: other batch
           neighbours, other batch sizes, other padding

Engines share this module so every engine composes the same batches; outputs go back to
the workload's order (fillers dropped) before they are written. Stdlib only: engine
processes import it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

R = TypeVar("R")

MODES = ("all", "one", "mixed")
SEED = 0


@dataclass(frozen=True)
class Submission:
    """One submission: `prompts` as the engine gets them, and for each, the index of the
    workload prompt it is (None for a filler)."""

    prompts: list[list[int]]
    # read-only: a replica's share (list[int]) is one too
    origin: Sequence[int | None]


def filler(prompt: list[int], salt: int) -> list[int]:
    """A prompt that is none of the workload's: the same first token (BOS), then the
    rest of `prompt` reversed and cut or repeated to another length."""
    body = list(reversed(prompt[1:])) or [prompt[0]]
    length = max(2, len(prompt) // 2 + 3 + salt % 5)
    return prompt[:1] + (body * (length // len(body) + 1))[: length - 1]


def compose(prompts: list[list[int]], mode: str) -> list[Submission]:
    """The submissions that carry `prompts` under `mode`."""
    if mode == "all":
        return [Submission(list(prompts), list(range(len(prompts))))]
    if mode == "one":
        return [Submission([p], [i]) for i, p in enumerate(prompts)]
    if mode == "mixed":
        order = list(range(len(prompts)))
        random.Random(SEED).shuffle(order)
        sent: list[list[int]] = []
        origin: list[int | None] = []
        for n, i in enumerate(order):
            sent += [prompts[i], filler(prompts[i], n)]
            origin += [i, None]
        return [Submission(sent, origin)]
    raise ValueError(f"unknown batch mode {mode!r} (known: {', '.join(MODES)})")


def restore(per_submission: Sequence[Sequence[R]], submissions: list[Submission], count: int) -> list[R]:
    """Per-prompt results of each submission (in its order) -> the `count` workload
    prompts' results in the workload's order, fillers dropped."""
    out: list[R | None] = [None] * count
    for results, sub in zip(per_submission, submissions):
        for result, i in zip(results, sub.origin):
            if i is not None:
                out[i] = result
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:
        raise RuntimeError(f"batch composition lost the results of prompts {missing}")
    return cast(list[R], out)  # none is None: checked above
