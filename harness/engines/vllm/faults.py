"""Fault switches inside vLLM's worker processes, to prove the harness reports a real
worker death with the worker's name and its root-cause exception.

The driver names this module's FaultExtension as vLLM's `worker_extension_cls`
whenever a scenario has faults: vLLM imports it in every worker process before the
model is built, and importing it installs the faults listed in $HARNESS_VLLM_FAULTS.
Nothing here runs unless a fault is asked for.

  pp-drop-residual@R  the PP rank R worker's stage cannot find `residual` in the
                      intermediate tensors it received (the bug class of vLLM PR 37622):
                      a KeyError raised inside the model's forward, on that worker only
  worker-exit@R       the PP rank R worker process exits (code 3) in the same place,
                      without a Python exception: a hard worker death
  pp-zero-aux@R       the PP rank R worker's stage receives every tensor but the hidden
                      states as zeros (the residual, and what a model sends besides): the
                      silent form of the same bug class (vLLM PRs 37622, 40786), caught by
                      the numbers only
"""

from __future__ import annotations

import os

from harness.engines.vllm.evidence import EvidenceExtension

FAULTS_ENV = "HARNESS_VLLM_FAULTS"
KINDS = ("pp-drop-residual", "worker-exit", "pp-zero-aux")


def parse(faults: list[str]) -> dict[str, int]:
    """{kind: PP rank}; unknown names fail loudly (a typo must not run a clean engine)."""
    parsed = {}
    for fault in faults:
        kind, _, rank = fault.partition("@")
        if kind not in KINDS or not rank.isdigit():
            raise ValueError(f"unknown vllm fault '{fault}' (known: {', '.join(k + '@<pp rank>' for k in KINDS)})")
        parsed[kind] = int(rank)
    return parsed


def target_problem(faults: list[str], pp: int) -> str | None:
    """A fault aimed at a PP rank these settings do not have would never fire."""
    for kind, rank in parse(faults).items():
        if rank >= pp:
            return (f"vllm fault {kind}@{rank} targets PP rank {rank}, but these settings have {pp} PP "
                    f"rank{'s' if pp > 1 else ''}; it would never fire (known: {', '.join(k + '@<pp rank>' for k in KINDS)})")
    return None


def _pp_rank() -> int:
    from vllm.distributed import get_pp_group

    return get_pp_group().rank_in_group


def _install(faults: dict[str, int]) -> None:
    import torch
    from vllm.sequence import IntermediateTensors

    original = IntermediateTensors.__getitem__

    def getitem(self, key):
        if key == "residual" and _pp_rank() == faults.get("pp-drop-residual"):
            raise KeyError("residual")
        if _pp_rank() == faults.get("worker-exit"):
            os._exit(3)
        if key != "hidden_states" and _pp_rank() == faults.get("pp-zero-aux"):
            return torch.zeros_like(original(self, key))
        return original(self, key)

    IntermediateTensors.__getitem__ = getitem


class FaultExtension(EvidenceExtension):
    """vLLM mixes this class into its worker class; the faults are installed on import.
    It is the evidence extension too (vLLM takes one extension class)."""


_FAULTS = parse([f for f in os.environ.get(FAULTS_ENV, "").split(",") if f])
if _FAULTS:
    _install(_FAULTS)
