"""Running a parallelised stage: the KV cache, one forward step across PP stages, the
warm-up (where torch.compile captures), and the two workload kinds.

Every rank runs the same sequence of steps in lockstep. One step:
  pad the flat token batch -> (non-first stage) allocate the intermediate buffer from the
  model's declaration and receive into it -> stage forward -> (non-last stage) send the
  intermediate tensors to the peer on the next stage; (last stage) return the logits.
Sampling happens on the last stage and the chosen tokens are broadcast to every rank
from the driver rank (TP rank 0 of the last stage), so all stages feed the same tokens
to the next step.
"""

from __future__ import annotations

import torch

from harness.engines.reference import faults as fault_switches
from harness.engines.reference.parallel import (
    ParallelContext,
    broadcast_from,
    recv_tensor_dict,
    send_tensor_dict,
)

#: prompts of a workload run in groups of at most this many sequences / prompt tokens,
#: which bounds the KV cache and the attention's key gather. The grouping depends only
#: on the workload, so every setting sees the same batches.
MAX_SEQS_PER_BATCH = 16
MAX_TOKENS_PER_BATCH = 1024


def _describe(tensors: dict[str, torch.Tensor]) -> dict[str, dict]:
    return {k: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for k, t in tensors.items()}


def batch_groups(prompts: list[list[int]]) -> list[range]:
    """Consecutive prompt index ranges, each within the per-batch limits (at least one prompt)."""
    groups, start, tokens = [], 0, 0
    for i, p in enumerate(prompts):
        if i > start and (i - start >= MAX_SEQS_PER_BATCH or tokens + len(p) > MAX_TOKENS_PER_BATCH):
            groups.append(range(start, i))
            start, tokens = i, 0
        tokens += len(p)
    if prompts:
        groups.append(range(start, len(prompts)))
    return groups


def cache_shape_for(workloads: list[dict]) -> tuple[int, int]:
    """(sequence slots, max length) the KV cache needs for all workloads (and the warm-up)."""
    slots, max_len = 2, 8
    for w in workloads:
        prompts = w["prompts"]
        extra = int(w.get("max_new_tokens", 0)) if w["kind"] == "greedy" else 0
        for g in batch_groups(prompts):
            slots = max(slots, len(g))
        max_len = max(max_len, max((len(p) for p in prompts), default=0) + extra)
    return slots, max_len


class ModelRunner:
    def __init__(self, stage, ctx: ParallelContext, dtype: torch.dtype, workloads: list[dict],
                 compile: bool, faults: list[str]):
        self.stage, self.ctx, self.dtype = stage, ctx, dtype
        self.faults = faults
        self.forward_fn = torch.compile(stage.forward, dynamic=True) if compile else stage.forward
        self.compile = compile
        slots, self.max_len = cache_shape_for(workloads)
        self.trash_slot = slots  # padding tokens write here, never into a real sequence
        self.kv_caches = self._allocate_kv_cache(slots + 1, self.max_len)
        self.stage_io: dict | None = None  # filled at the first real (post warm-up) step
        self._record_io = False
        self._fired = False

    def _allocate_kv_cache(self, slots: int, max_len: int):
        cfg = self.stage.cfg
        caches = []
        for layer in self.stage.layers:
            shape = (slots, max_len, layer.self_attn.num_kv_heads, cfg.head_dim)
            # zeros, not empty: padding reads of never-written entries stay finite.
            caches.append((torch.zeros(shape, dtype=self.dtype, device=self.ctx.device),
                           torch.zeros(shape, dtype=self.dtype, device=self.ctx.device)))
        return caches

    # --- one step --------------------------------------------------------------------

    def padded_len(self, n: int) -> int:
        """Token count after padding: a multiple of tp (SP shards evenly) and at least
        2*tp, so no SP shard has a single token (dynamic-shape compile specialises 0/1)."""
        tp = self.ctx.tp
        return max(-(-n // tp) * tp, 2 * tp)

    def step(self, ids: list[int], positions: list[int], slots: list[int]) -> torch.Tensor | None:
        """One forward over a flat batch. Returns the [n, vocab] logits on the last stage."""
        ctx, n = self.ctx, len(ids)
        if n == 0 or max(positions) >= self.max_len:
            raise ValueError(f"bad step: {n} tokens, max position {max(positions, default=-1)}, cache {self.max_len}")
        pad = self.padded_len(n) - n
        dev = ctx.device
        ids_t = torch.tensor(ids + [0] * pad, dtype=torch.int64, device=dev)
        pos_t = torch.tensor(positions + [0] * pad, dtype=torch.int64, device=dev)
        slot_t = torch.tensor(slots + [self.trash_slot] * pad, dtype=torch.int64, device=dev)
        kv_len = max(positions) + 1
        intermediate = None
        if not ctx.is_first_stage:
            local = (n + pad) // ctx.tp if ctx.sp else n + pad
            intermediate = self.stage.make_empty_intermediate_tensors(local, self.dtype, dev)
            recv_tensor_dict(intermediate, src=ctx.prev_stage_peer)
        if not self._fired:
            self._fired = True
            fault_switches.fire_rank_faults(self.faults, ctx.rank)
        out = self.forward_fn(ids_t, pos_t, slot_t, self.kv_caches, kv_len, intermediate)
        if self._record_io:
            self._record_io = False
            self.stage_io = {"rank": ctx.rank, "pp_rank": ctx.pp_rank, "tp_rank": ctx.tp_rank,
                             "layers": [self.stage.layer_ids.start, self.stage.layer_ids.stop],
                             "num_tokens": n, "padded_tokens": n + pad,
                             "received": _describe(intermediate) if intermediate is not None else {},
                             "sent": _describe(out) if not ctx.is_last_stage else {}}
        if not ctx.is_last_stage:
            send_tensor_dict(out, dst=ctx.next_stage_peer)
            return None
        return out[:n]

    def share_tokens(self, tokens: torch.Tensor | None, count: int) -> list[int]:
        """Tokens chosen on the driver rank, broadcast to every rank."""
        buf = torch.empty(count, dtype=torch.int64, device=self.ctx.device)
        if self.ctx.rank == self.ctx.driver_rank:
            buf.copy_(tokens)
        return broadcast_from(buf, src=self.ctx.driver_rank).tolist()

    # --- warm-up and workloads ---------------------------------------------------------

    def warmup(self) -> None:
        """A dummy prefill (two sequences of different lengths) and a decode step, run
        before any real request: torch.compile captures here, with the same argument
        structure real requests use (all tensors, never None), and the first forward's
        faults fire here."""
        lens = [3, 5]
        ids = [i % self.stage.cfg.vocab_size for i in range(sum(lens))]
        positions = [p for n in lens for p in range(n)]
        slots = [s for s, n in enumerate(lens) for _ in range(n)]
        self.step(ids, positions, slots)
        self.step([1, 2], [n for n in lens], [0, 1])
        self._record_io = True

    def run_logprobs(self, prompts: list[list[int]], top_k: int) -> dict[str, torch.Tensor] | None:
        """Teacher-forced top-k logprobs at every position of every prompt."""
        ids_parts, lp_parts = [], []
        for group in batch_groups(prompts):
            ids = [t for i in group for t in prompts[i]]
            positions = [p for i in group for p in range(len(prompts[i]))]
            slots = [s for s, i in enumerate(group) for _ in prompts[i]]
            logits = self.step(ids, positions, slots)
            if logits is not None:
                lp, tk = torch.log_softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
                ids_parts.append(tk.cpu())
                lp_parts.append(lp.cpu())
        if not self.ctx.is_last_stage:
            return None
        if not prompts:
            ids_parts, lp_parts = [torch.empty(0, top_k, dtype=torch.int64)], [torch.empty(0, top_k)]
        offsets = torch.tensor([0] + [len(p) for p in prompts], dtype=torch.int64).cumsum(0)
        return {"topk_ids": torch.cat(ids_parts), "topk_logprobs": torch.cat(lp_parts), "offsets": offsets}

    def run_greedy(self, prompts: list[list[int]], max_new_tokens: int, top_k: int) -> dict[str, torch.Tensor] | None:
        """Prefill, then decode until each prompt has exactly max_new_tokens argmax tokens
        (no EOS stop); the top-k of each chosen step is kept."""
        out_tokens, out_ids, out_lps = [], [], []
        for group in batch_groups(prompts):
            lens = [len(prompts[i]) for i in group]
            tokens, step_ids, step_lps = [], [], []
            # prefill: all prompt tokens, then read each prompt's last row
            ids = [t for i in group for t in prompts[i]]
            positions = [p for n in lens for p in range(n)]
            slots = [s for s, n in enumerate(lens) for _ in range(n)]
            last_rows = torch.tensor(lens).cumsum(0) - 1
            for step in range(max_new_tokens):
                if step > 0:  # decode: the previous token of each sequence, at its next position
                    ids, positions, slots = tokens[-1], [n + step - 1 for n in lens], list(range(len(lens)))
                logits = self.step(ids, positions, slots)
                chosen = None
                if logits is not None:
                    rows = logits[last_rows.to(logits.device)] if step == 0 else logits
                    logprobs = torch.log_softmax(rows.float(), dim=-1)
                    chosen = logprobs.argmax(dim=-1)
                    lp, tk = logprobs.topk(top_k, dim=-1)
                    step_ids.append(tk.cpu())
                    step_lps.append(lp.cpu())
                tokens.append(self.share_tokens(chosen, len(lens)))
            if self.ctx.is_last_stage:
                out_tokens.append(torch.tensor(tokens, dtype=torch.int64).reshape(max_new_tokens, len(lens)).T)
                k = top_k
                out_ids.append(torch.stack(step_ids, 1) if step_ids else torch.empty(len(lens), 0, k, dtype=torch.int64))
                out_lps.append(torch.stack(step_lps, 1) if step_lps else torch.empty(len(lens), 0, k))
        if not self.ctx.is_last_stage:
            return None
        if not prompts:
            return {"tokens": torch.empty(0, max_new_tokens, dtype=torch.int64),
                    "topk_ids": torch.empty(0, max_new_tokens, top_k, dtype=torch.int64),
                    "topk_logprobs": torch.empty(0, max_new_tokens, top_k)}
        return {"tokens": torch.cat(out_tokens), "topk_ids": torch.cat(out_ids), "topk_logprobs": torch.cat(out_lps)}
