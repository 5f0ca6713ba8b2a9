"""Named fault switches of the reference engine.

A scenario turns a fault on by listing it in RunBrief.faults as "name" or "name@param"
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
    # how the listing and the errors name the parameter
    param_name: str = "N"
    param_what: str = "a global rank"  # what the parameter is, for the errors
    check_param: Callable[[str], object] | None = None  # raises ValueError on a bad parameter

    @property
    def targets_rank(self) -> bool:
        return self.takes_param and self.param_name == "N"


FAULTS: dict[str, Fault] = {}


def register(
    name: str,
    description: str,
    takes_param: bool = False,
    param_name: str = "N",
    param_what: str = "a global rank",
    check_param: Callable[[str], object] | None = None,
) -> Fault:
    if takes_param and param_name == "N" and check_param is None:
        check_param = _global_rank
    fault = Fault(name, description, takes_param, param_name, param_what, check_param)
    FAULTS[name] = fault
    return fault


def _global_rank(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a rank number")
    return int(text)


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(f"{text!r} is not a positive number")
    return value


register("rank-raise", "raise RuntimeError on global rank N during the first forward (@N)", takes_param=True)
register("rank-exit", "SIGKILL global rank N during the first forward, like an OOM kill (@N)", takes_param=True)
register("rank-hang", "global rank N sleeps forever during the first forward (@N)", takes_param=True)
register(
    "tp-allreduce-perturb",
    "TP rank 1 adds a fixed +-EPS pattern to every all-reduce result, the embedding's first (@EPS, "
    "e.g. @1e-4): a small numeric error whose localisation must name the embedding",
    takes_param=True,
    param_name="EPS",
    param_what="a positive number",
    check_param=_positive_float,
)
# The five vLLM bug classes of docs/DESIGN.md ("The bugs it exists to catch"), one switch each.
register("pp-buffer-missing-key", "vLLM PR 37622: a non-first stage's empty intermediate-tensor buffer lacks 'residual'")
register("pp-drop-kv-connector-output", "vLLM PR 38031: rebuilding the inter-stage object drops the KV-connector reports")
register("pp-drop-per-layer-inputs", "vLLM PR 40786: per-layer inputs are not passed to the layers past the first stage")
register("sp-residual-first-shard", "vLLM PR 33322: under SP every TP rank takes residual[0:n/tp] instead of its own shard")
register(
    "compile-warmup-without-images", "vLLM PR 43617: warm-up (the compile capture) passes None for the deepstack image inputs"
)
# The bug classes of the newer axes (expert parallelism, chunked prefill, prefix caching),
# as real engines have had them.
register(
    "ep-expert-map-ignored",
    "under EP a global expert id indexes the rank's local experts (the expert map is skipped): "
    "ranks past the first run their experts for tokens routed to other ranks' experts",
)
register(
    "ep-dispatch-drop-token",
    "under EP the dispatch drops the batch's first token on the last EP rank: its experts there never see it",
)
register(
    "chunked-prefill-drops-kv", "a prefill chunk after the first attends without the KV the earlier chunks of its prompt wrote"
)
register(
    "prefix-cache-skips-stage",
    "a prefix-cache hit restores the cached KV blocks on the first pipeline stage only; later stages attend to empty blocks",
)
register(
    "dp-merge-misorders",
    "the data-parallel replicas' outputs are merged as if each served a contiguous block of prompts "
    "(each serves every dp-th): prompts get other prompts' outputs",
)
register(
    "spec-accepts-unverified-draft",
    "speculative decoding keeps each step's first drafted token without comparing it to the model's choice",
)
# Interaction faults: each fires only where two features meet, never with either alone, as
# the bugs of where features meet do (a one-feature suite cannot see them; a covering array
# does, and the failing interaction is narrowed to exactly the pair: tests/test_interactions.py).
register(
    "spec-trusts-after-prefix-hit",
    "with prefix caching and speculative decoding together: a sequence whose prompt began with a "
    "prefix-cache hit keeps each step's first drafted token unverified (its verification rows are "
    "counted from the uncached tokens)",
)
register(
    "dp-replica-trusts-drafts",
    "with data parallelism and speculative decoding together: replicas past the first keep each step's "
    "first drafted token unverified",
)
# Settings accepted but not applied: the run must not pass as the setting it skipped
# (harness/run/compare/applied.py turns it into `unsupported`).
register(
    "sp-switched-off",
    "accept sp=True but run without SP, as vLLM 0.20.2 did for a small hidden size (its SP threshold heuristic)",
)
register("compile-switched-off", "accept compile=True but run eagerly")


def known() -> str:
    return ", ".join(f"{f.name}{'@' + f.param_name if f.takes_param else ''}" for f in FAULTS.values())


def _param_ok(fault: Fault, param: str) -> bool:
    assert fault.check_param is not None, f"fault {fault.name} takes a parameter but registered no check for it"
    try:
        fault.check_param(param)
    except ValueError:
        return False
    return True


def parse(faults: list[str]) -> dict[str, str | None]:
    """name -> param (None when the fault takes none). Unknown or malformed names are an
    error that lists the known ones, so a typo never silently runs a clean engine."""
    parsed: dict[str, str | None] = {}
    for item in faults:
        name, _, param = item.partition("@")
        if name not in FAULTS:
            raise ValueError(f"unknown fault {item!r}; the reference engine knows: {known()}")
        fault = FAULTS[name]
        if not fault.takes_param and param:
            raise ValueError(f"fault {name!r} takes no parameter, got {item!r}; the reference engine knows: {known()}")
        if fault.takes_param and not _param_ok(fault, param):
            raise ValueError(
                f"fault {name!r} needs {fault.param_what}: {name}@{fault.param_name}, got {item!r}; "
                f"the reference engine knows: {known()}"
            )
        parsed[name] = param or None
    return parsed


def target_problem(faults: list[str], world_size: int) -> str | None:
    """A rank fault aimed at a rank these settings do not have would never fire: the run
    would pass and seem to prove the harness misses the fault."""
    for name, param in parse(faults).items():
        if not FAULTS[name].targets_rank:
            continue
        assert param is not None, "parse() refuses a rank fault without its rank"
        if int(param) >= world_size:
            ranks = "rank" if world_size == 1 else "ranks"
            return (
                f"fault {name}@{param} targets global rank {param}, but these settings have "
                f"{world_size} {ranks} (0..{world_size - 1}); it would never fire"
            )
    return None


def active(faults, name: str) -> str | bool:
    """The fault's parameter if `name` is switched on (True for a parameterless one),
    else False. `faults` is a RunBrief or its list of fault strings."""
    faults = getattr(faults, "faults", faults)
    if name not in FAULTS:
        raise KeyError(f"no fault named {name!r} is registered")
    parsed = parse(faults)
    if name not in parsed:
        return False
    param = parsed[name]
    return param if param is not None else True


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
