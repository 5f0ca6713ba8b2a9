"""Automatic prefix caching, as vLLM's: the KV of whole blocks of earlier prompts, reused.

Each rank keeps the blocks of its own layers and KV heads, keyed by the token ids from
the prompt's start to the block's end (a block is only the same block after the same
prefix). Every rank stores and looks up the same prompts in lockstep, so every rank
finds the same hits and the steps stay the same size on all of them.

As in vLLM, a hit never covers a whole prompt (its last token is always computed: its
logits are the first sampled step), and a request that asks for prompt logprobs does not
read the cache (a cached position has no logits to give); it still fills it.
"""

from __future__ import annotations

import torch

# tokens per cached block, unless the run's block_size axis says otherwise
BLOCK = 16


def block_keys(prompt: list[int], block: int = BLOCK) -> list[tuple[int, ...]]:
    """The key of each whole block of `prompt`: its token ids from the start to the block's end."""
    return [tuple(prompt[: (b + 1) * block]) for b in range(len(prompt) // block)]


class PrefixCache:
    """One rank's cached blocks: key -> per-layer (k, v) rows of that block."""

    def __init__(self, block: int = BLOCK):
        self.block = block
        self.blocks: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.counts = {"hit_tokens": 0, "queried_tokens": 0, "stored_blocks": 0, "block": block}

    def hit_length(self, prompt: list[int]) -> int:
        """Leading tokens of `prompt` whose blocks are cached, leaving its last token to compute."""
        cached = 0
        for key in block_keys(prompt[:-1], self.block):
            if key not in self.blocks:
                break
            cached += self.block
        return cached

    def restore(self, kv_caches, slot: int, prompt: list[int], skip: bool = False) -> int:
        """Copy the cached blocks of `prompt` into `slot` of this rank's KV cache; returns
        how many leading tokens are now there. `skip` (the prefix-cache-skips-stage fault):
        the hit is taken but the blocks are left empty."""
        n = self.hit_length(prompt)
        self.counts["queried_tokens"] += len(prompt)
        self.counts["hit_tokens"] += n
        for b, key in enumerate(block_keys(prompt[:n], self.block)):
            rows = slice(b * self.block, (b + 1) * self.block)
            for (k_cache, v_cache), (k, v) in zip(kv_caches, self.blocks[key]):
                k_cache[slot, rows] = 0 if skip else k
                v_cache[slot, rows] = 0 if skip else v
        return n

    def store(self, kv_caches, slot: int, prompt: list[int]) -> None:
        """Keep the whole blocks of `prompt` (prefilled into `slot`) that are not cached yet."""
        for b, key in enumerate(block_keys(prompt, self.block)):
            if key in self.blocks:
                continue
            rows = slice(b * self.block, (b + 1) * self.block)
            self.blocks[key] = [(k[slot, rows].clone(), v[slot, rows].clone()) for k, v in kv_caches]
            self.counts["stored_blocks"] += 1
