"""A stand-in for vllm's public API (LLM, SamplingParams), for the tests of the script
`harness repro` writes (tests/test_repro.py): no engine, just deterministic logprobs.

FAKE_VLLM_PP (applies when pipeline_parallel_size > 1) picks the bug it shows:
  ok      the same numbers as pp 1
  shift   prompt logprobs of position 3 moved (one logit +0.5) (a numeric bug)
  crash   a vLLM-style worker traceback from "Worker_PP1", then the driver's error
  hang    never answers
FAKE_VLLM_REFERENCE=crash makes the pp 1 setting crash instead.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

__version__ = "0.0.fake"
VOCAB = 40


@dataclass
class Logprob:
    logprob: float
    rank: int


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    ignore_eos: bool = False


@dataclass
class Completion:
    token_ids: list
    logprobs: list


@dataclass
class RequestOutput:
    prompt_token_ids: list
    prompt_logprobs: list | None  # None unless SamplingParams asked for them, as in vLLM
    outputs: list


def _distribution(prefix: list[int], shift: float) -> list[float]:
    logits = [math.sin(1.7 * t + 0.3 * len(prefix) + 0.11 * sum(prefix[-3:])) * 3 for t in range(VOCAB)]
    if shift:
        logits[0] += shift
    top = max(logits)
    norm = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - norm for x in logits]


def _position(lps: list[float], k: int, token: int | None) -> dict:
    order = sorted(range(VOCAB), key=lambda t: -lps[t])
    row = {t: Logprob(lps[t], r + 1) for r, t in enumerate(order[:k])}
    if token is not None and token not in row:
        row[token] = Logprob(lps[token], order.index(token) + 1)
    return row


class LLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        pp = int(kwargs.get("pipeline_parallel_size", 1))
        self.mode = os.environ.get("FAKE_VLLM_PP", "ok") if pp > 1 else os.environ.get("FAKE_VLLM_REFERENCE", "ok")

    def generate(self, inputs, params, use_tqdm=False):
        if self.mode == "crash":
            w = "(Worker_PP1 pid=4242) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] "
            print(w + "WorkerProc hit an exception.", flush=True)
            print(w + "Traceback (most recent call last):", flush=True)
            print(
                w + '  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 3174, in sync_and_gather_intermediate_tensors',
                flush=True,
            )
            print(w + "    assert self.intermediate_tensors is not None", flush=True)
            print(w + "AssertionError", flush=True)
            raise RuntimeError("EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
        if self.mode == "hang":
            time.sleep(3600)
        shift = 0.5 if self.mode == "shift" else 0.0
        outs = []
        for item in inputs:
            ids = list(item["prompt_token_ids"])
            prompt = (
                [None]
                + [
                    _position(_distribution(ids[:i], shift if i == 3 else 0.0), params.prompt_logprobs, ids[i])
                    for i in range(1, len(ids))
                ]
                if params.prompt_logprobs
                else None
            )
            seq, steps = list(ids), []
            for _ in range(params.max_tokens):
                lps = _distribution(seq, 0.0)
                tok = max(range(VOCAB), key=lambda t: lps[t])
                steps.append(_position(lps, params.logprobs, tok))
                seq.append(tok)
            outs.append(RequestOutput(ids, prompt, [Completion(seq[len(ids) :], steps)]))
        return outs


print(f"fake vllm {__version__} imported by {sys.argv[0]}", file=sys.stderr)
