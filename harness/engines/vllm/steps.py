"""What vLLM's scheduler handed this worker, step by step: the evidence of the scheduler axes.

Prefix caching, chunked prefill and batch composition change how vLLM schedules a
prompt, not what a worker holds, so their evidence is the scheduler's own output as the
worker received it (`Worker.execute_model(scheduler_output)`, counted around the call):

  prefix_cache     a new request's `num_computed_tokens` when first scheduled: the
                   prompt tokens whose KV came from the prefix cache (hit tokens)
  chunked_prefill  the steps over which each prompt's prefill ran (more than one: it was
                   split) and the most tokens one step scheduled (the budget held)
  batch            how many requests each step ran
  spec             the draft tokens the scheduler sent to be verified, and how many of
                   them the step's sampled tokens kept (a request that had k drafts and
                   got n tokens back accepted n - 1 of them: the rest was the bonus token)

`install()` wraps vLLM's GPU worker class, which the CPU worker inherits `execute_model`
from; `record()` is what the evidence call hands the driver. Runs in vLLM's interpreter;
nothing here imports vLLM at module import.
"""

from __future__ import annotations

import functools

STATS: dict = {}  # this process's counts (reset())
PROMPT_LEN: dict[str, int] = {}  # request id -> prompt length
CHUNKS: dict[str, int] = {}  # request id -> the steps its prefill ran in
# request id -> draft tokens of the step being run
DRAFTS: dict[str, int] = {}


def reset() -> None:
    STATS.clear()
    STATS.update(
        steps=0,
        largest_step_tokens=0,
        smallest_batch=0,
        largest_batch=0,
        requests=0,
        hit_requests=0,
        hit_tokens=0,
        drafts=0,
        accepted=0,
    )
    PROMPT_LEN.clear()
    CHUNKS.clear()
    DRAFTS.clear()


reset()


def install() -> None:
    """Count every scheduler step a vLLM worker of this process executes from now on, and
    the tokens each step sampled; a vLLM without the GPU worker module is not counted."""
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError:
        return
    for name, before in (("execute_model", observe), ("sample_tokens", None)):
        method = Worker.__dict__.get(name)
        if method is not None and not getattr(method, "_harness_counted", False):
            setattr(Worker, name, _counted(method, before))


def _counted(method, before):
    """`method` with `before` called on its argument and its result's accepted drafts
    counted; a count never fails a step (the evidence then says less)."""

    @functools.wraps(method)
    def counted(self, arg, *args, **kwargs):
        if before is not None:
            _quietly(before, arg)
        result = method(self, arg, *args, **kwargs)
        _quietly(count_accepted, result)
        return result

    counted._harness_counted = True  # type: ignore[attr-defined]
    return counted


def _quietly(fn, arg) -> None:
    try:
        fn(arg)
    except Exception:  # noqa: BLE001 - evidence must never fail vLLM's step
        pass


def count_accepted(output) -> None:
    """The drafts a step's sampled tokens kept (ModelRunnerOutput: per request, the tokens
    it generated this step; None or an async handle from a step that sampled nothing here)."""
    sampled = getattr(output, "sampled_token_ids", None)
    if not sampled or not DRAFTS:
        return
    for req_id, tokens in zip(output.req_ids, sampled):
        if DRAFTS.pop(req_id, 0):
            STATS["accepted"] += max(len(tokens) - 1, 0)


def observe(out) -> None:
    """One step's scheduler output into STATS."""
    total = int(out.total_num_scheduled_tokens)
    if total <= 0:
        return
    STATS["steps"] += 1
    STATS["largest_step_tokens"] = max(STATS["largest_step_tokens"], total)
    size = len(out.num_scheduled_tokens)
    STATS["largest_batch"] = max(STATS["largest_batch"], size)
    STATS["smallest_batch"] = min(STATS["smallest_batch"] or size, size)
    drafts = {r: len(t) for r, t in (getattr(out, "scheduled_spec_decode_tokens", None) or {}).items() if t}
    STATS["drafts"] += sum(drafts.values())
    DRAFTS.clear()
    DRAFTS.update(drafts)
    computed = {}
    for req in out.scheduled_new_reqs:
        PROMPT_LEN[req.req_id] = len(req.prompt_token_ids or [])
        STATS["requests"] += 1
        # KV already there at its first step: prefix-cache hits
        if req.num_computed_tokens:
            STATS["hit_requests"] += 1
            STATS["hit_tokens"] += int(req.num_computed_tokens)
        computed[req.req_id] = int(req.num_computed_tokens)
    cached = out.scheduled_cached_reqs
    computed.update(zip(cached.req_ids, map(int, cached.num_computed_tokens)))
    for req_id, done in computed.items():
        # a step that starts before the prompt's end ran (a chunk of) its prefill
        if done < PROMPT_LEN.get(req_id, 0) and out.num_scheduled_tokens.get(req_id, 0):
            CHUNKS[req_id] = CHUNKS.get(req_id, 0) + 1


def record() -> dict:
    """STATS, with the prefills: how many ran, in how many chunks, how many were split."""
    return {
        **STATS,
        "prefills": len(CHUNKS),
        "prefill_chunks": sum(CHUNKS.values()),
        "split_prefills": sum(1 for n in CHUNKS.values() if n > 1),
    }
