"""Named fault switches of the reference engine.

A scenario turns a fault on by listing it in RunSpec.faults as "name" or "name@param"
(e.g. "rank-raise@1": raise on global rank 1). Each fault is registered here with a
description; engine code asks `active(faults, name)` at the spot where the fault acts.
The bug-class faults re-create real vLLM bugs (docs/BUG_CLASSES.md) and are checked
where the bug lived: model.py, parallel.py, pipeline.py.

Stdlib only.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    takes_param: bool = False
    param_name: str = "N"  # how the listing and the errors name the parameter
    check_param: Callable[[str], object] | None = None  # raises ValueError on a bad parameter


FAULTS: dict[str, Fault] = {}


def register(name: str, description: str, takes_param: bool = False, param_name: str = "N",
             check_param: Callable[[str], object] | None = None) -> Fault:
    fault = Fault(name, description, takes_param, param_name, check_param)
    FAULTS[name] = fault
    return fault


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(f"{text!r} is not a positive number")
    return value


register("rank-raise", "raise RuntimeError on global rank N during the first forward (@N)", takes_param=True)
register("rank-exit", "SIGKILL global rank N during the first forward, like an OOM kill (@N)", takes_param=True)
register("rank-hang", "global rank N sleeps forever during the first forward (@N)", takes_param=True)
register("tp-allreduce-perturb",
         "TP rank 1 adds a fixed +-EPS pattern to every all-reduce result, the embedding's first (@EPS, "
         "e.g. @1e-4): a small numeric error whose localisation must name the embedding", takes_param=True,
         param_name="EPS", check_param=_positive_float)
# The five bug classes of DESIGN.md, one switch each.
register("pp-buffer-missing-key",
         "vLLM PR 37622: a non-first stage's empty intermediate-tensor buffer lacks 'residual'")
register("pp-drop-kv-connector-output",
         "vLLM PR 38031: rebuilding the inter-stage object drops the KV-connector reports")
register("pp-drop-per-layer-inputs",
         "vLLM PR 40786: per-layer inputs are not passed to the layers past the first stage")
register("sp-residual-first-shard",
         "vLLM PR 33322: under SP every TP rank takes residual[0:n/tp] instead of its own shard")
register("compile-warmup-without-images",
         "vLLM PR 43617: warm-up (the compile capture) passes None for the deepstack image inputs")


def parse(faults: list[str]) -> dict[str, str | None]:
    """name -> param (None when the fault takes none). Unknown or malformed names are an
    error that lists the known ones, so a typo never silently runs a clean engine."""
    parsed: dict[str, str | None] = {}
    for item in faults:
        name, _, param = item.partition("@")
        if name not in FAULTS:
            known = ", ".join(f"{f.name}{'@' + f.param_name if f.takes_param else ''}" for f in FAULTS.values())
            raise ValueError(f"unknown fault {item!r}; the reference engine knows: {known}")
        if FAULTS[name].takes_param and not param:
            raise ValueError(f"fault {name!r} needs a parameter: {name}@{FAULTS[name].param_name}")
        if not FAULTS[name].takes_param and param:
            raise ValueError(f"fault {name!r} takes no parameter, got {item!r}")
        if param and FAULTS[name].check_param is not None:
            try:
                FAULTS[name].check_param(param)
            except ValueError:
                raise ValueError(f"fault {item!r}: {param!r} is not a valid {FAULTS[name].param_name}") from None
        parsed[name] = param or None
    return parsed


def active(faults, name: str) -> str | bool:
    """The fault's parameter if `name` is switched on (True for a parameterless one),
    else False. `faults` is a RunSpec or its list of fault strings."""
    faults = getattr(faults, "faults", faults)
    if name not in FAULTS:
        raise KeyError(f"no fault named {name!r} is registered")
    parsed = parse(faults)
    if name not in parsed:
        return False
    return parsed[name] if parsed[name] is not None else True


def _on_rank(faults: list[str], name: str, rank: int) -> bool:
    param = active(faults, name)
    return param is not False and int(param) == rank


def fire_rank_faults(faults: list[str], rank: int) -> None:
    """The process-level faults, fired at the first forward of the run."""
    if _on_rank(faults, "rank-raise", rank):
        raise RuntimeError(f"fault rank-raise: injected failure on rank {rank}")
    if _on_rank(faults, "rank-exit", rank):
        os.kill(os.getpid(), signal.SIGKILL)
    if _on_rank(faults, "rank-hang", rank):
        while True:
            time.sleep(3600)
