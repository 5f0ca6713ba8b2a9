"""Speculative decoding with n-gram drafts (prompt lookup), as vLLM's `ngram` method.

A decode step feeds each sequence's last token plus up to K drafted tokens; the target
model's greedy choice at each of those positions decides how many drafts to keep: the
drafts are kept while they equal the target's choice, and the target's choice at the
first disagreement (or after the last draft) is the bonus token. The tokens emitted are
therefore exactly the target's greedy tokens, one step or several at a time: a wrong
draft costs a recomputation, never a different token.

Pure functions, no torch: pipeline.py runs the steps, every rank drafts the same tokens
from the same shared context.
"""

from __future__ import annotations

NUM_SPECULATIVE_TOKENS = 2
NGRAM_MAX, NGRAM_MIN = 3, 1


def propose(context: list[int], k: int = NUM_SPECULATIVE_TOKENS) -> list[int]:
    """Up to `k` tokens that followed the latest earlier occurrence of the context's last
    n tokens (the longest n from NGRAM_MAX down to NGRAM_MIN that occurs); [] when none does."""
    for n in range(min(NGRAM_MAX, len(context) - 1), NGRAM_MIN - 1, -1):
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == tail:
                return context[start + n : start + n + k]
    return []


def accepted(drafts: list[int], choices: list[int]) -> int:
    """How many leading drafts the target agrees with: choices[j] is the target's greedy
    token at the position drafts[j] was proposed for."""
    count = 0
    for draft, choice in zip(drafts, choices):
        if draft != choice:
            break
        count += 1
    return count


def emitted(drafts: list[int], choices: list[int], trust_first_draft: bool = False) -> list[int]:
    """The tokens one verification step emits: the accepted drafts and the bonus token,
    i.e. choices[: accepted + 1]. `trust_first_draft` (the spec-accepts-unverified-draft
    fault) takes the first draft without comparing it to the target's choice."""
    if trust_first_draft and drafts:
        return [drafts[0]] + choices[1 : 2 + accepted(drafts[1:], choices[1:])]
    return choices[: accepted(drafts, choices) + 1]
