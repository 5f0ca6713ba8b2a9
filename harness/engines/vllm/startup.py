"""Where a vLLM engine start goes, measured inside its workers, so a slow start can be taken apart.

`vllm.LLM(...)` is one opaque call, and a long one on CPU (docs/BENCHMARKS.md). Its parts
happen in the workers, in this order, each a method of vLLM's worker class: the worker
process starts and imports vLLM (until vLLM constructs its worker object: `constructed`), then

  init_device                 the device and the distributed groups (TP/PP rendezvous)
  load_model                  the model built and its weights loaded
  determine_available_memory  the profile run that sizes the KV cache
  initialize_from_config      the KV cache allocated
  compile_or_warm_up_model    torch.compile and warm-up (CUDA graphs on GPUs)

As each step starts, the worker announces it (contract/phases.py `announce`, into the
scenario's output directory the driver names in $HARNESS_RANK_OUTPUT_DIR), so the
progress line says "loading the model" or "compiling and warming up" while the driver
sits in `vllm.LLM(...)` (ACTIVITY).

`install()` makes every worker vLLM constructs time those methods (wrapped on its class
when WorkerBase.__init__ runs, so a worker class loaded after the install is timed too;
once per class; the outermost call of a step is what counts) and records when each ran in
this process; the evidence call hands the record to the driver (evidence.py), which turns
it into seconds per phase, along the slowest worker (`breakdown`), for the outputs' timings.

Runs in vLLM's interpreter; nothing here imports vLLM at module import.
"""

from __future__ import annotations

import functools
import os
import time

# Names in the breakdown, in flow order (docs/BENCHMARKS.md uses them): the worker's
# construction, then its start-up steps (methods of vLLM's worker class).
NAMES = {
    "constructed": "worker start + import",
    "init_device": "device + process groups",
    "load_model": "model build + load",
    "determine_available_memory": "KV cache sizing",
    "initialize_from_config": "KV cache allocation",
    "compile_or_warm_up_model": "compile + warm-up",
}

STEPS = tuple(NAMES)[1:]
# What a worker announces as each step starts (contract/phases.py DOING); a (eager, compiled)
# pair where the step compiles the model under compile (vLLM's profile run on GPUs, warm-up)
ACTIVITY: dict[str, str | tuple[str, str]] = {
    "init_device": "rendezvous",
    "load_model": "load",
    "determine_available_memory": ("kv-cache", "compile"),
    "initialize_from_config": "kv-cache",
    "compile_or_warm_up_model": ("warmup", "compile"),
}
# step -> [start, end] of its first call in this process
TIMELINE: dict[str, list[float]] = {}
# when this process's worker was constructed: its process up, vLLM imported
CONSTRUCTED: list[float] = []


def install() -> None:
    """Time the start-up of every vLLM worker constructed in this process from now on.
    vLLM's LLM class imports WorkerBase already: this costs nothing."""
    from vllm.v1.worker.worker_base import WorkerBase

    init = WorkerBase.__init__
    if getattr(init, "_harness_timed", False):
        return

    @functools.wraps(init)
    def constructed(self, *args, **kwargs):
        if not CONSTRUCTED:
            CONSTRUCTED.append(time.time())
        _time_steps(type(self))
        return init(self, *args, **kwargs)

    constructed._harness_timed = True  # type: ignore[attr-defined]
    WorkerBase.__init__ = constructed  # type: ignore[method-assign]


def _time_steps(cls) -> None:
    for c in cls.__mro__:
        for name in STEPS:
            method = c.__dict__.get(name)
            if callable(method) and not getattr(method, "_harness_timed", False):
                setattr(c, name, _timed(name, method))


def _timed(name: str, method):
    """Record the first call's [start, end]. A super() call inside it records first and is
    then overwritten by the outer call that ends after it; a later call is not recorded."""

    @functools.wraps(method)
    def timed(*args, **kwargs):
        if name in TIMELINE:
            return method(*args, **kwargs)
        _announce(name, args[0] if args else None)
        start = time.time()
        try:
            return method(*args, **kwargs)
        finally:
            TIMELINE[name] = [start, time.time()]
            if name == "init_device":  # its process groups, and their shared memory, exist from here
                _record_ident()

    timed._harness_timed = True  # type: ignore[attr-defined]
    return timed


def _record_ident() -> None:
    from harness.contract.settings.variables import RANK_OUTPUT_DIR
    from harness.engines.vllm import forking

    forking.record_ident(RANK_OUTPUT_DIR.raw())


def _announce(step: str, worker) -> None:
    """Tell the progress line this worker starts `step` (never fails the step)."""
    from harness.contract.phases import announce
    from harness.contract.settings.variables import RANK_OUTPUT_DIR

    directory = RANK_OUTPUT_DIR.raw()
    if not directory:
        return
    activity = ACTIVITY[step]
    if isinstance(activity, tuple):
        activity = activity[1] if compiling(worker) else activity[0]
    announce(directory, f"vllm-worker-{os.getpid()}", activity)


def compiling(worker) -> bool:
    """Does this worker's vLLM compile the model (the driver's enforce_eager=False)?"""
    model_config = getattr(getattr(worker, "vllm_config", None), "model_config", None)
    return getattr(model_config, "enforce_eager", True) is False


def record() -> dict:
    """This worker's start-up: when it was constructed, and each step's [start, end]; {}
    where no worker was constructed after the install."""
    return {"constructed": CONSTRUCTED[0], "steps": dict(TIMELINE)} if CONSTRUCTED else {}


def breakdown(called: float, ready: float, workers: list[dict]) -> dict[str, float]:
    """Seconds per start-up phase from the driver's `vllm.LLM(...)` call to its return, along
    the slowest worker: a phase ends when its last worker ends it (they wait for each other
    in every collective). The engine core's own start is in `worker start + import`; the
    rest after the last step (the engine core's handshake, the tokenizer) is `engine ready`.
    The values add up to ready - called; {} when no worker reported."""
    records = [w for w in workers if w and "constructed" in w]
    if not records:
        return {}
    ends = {"constructed": max(w["constructed"] for w in records)}
    for step in STEPS:
        seen = [w["steps"][step][1] for w in records if step in w.get("steps", {})]
        if seen:
            ends[step] = max(seen)
    out, previous = {}, called
    for step in sorted(ends, key=lambda s: ends[s]):
        end = min(max(ends[step], previous), ready)
        out[NAMES[step]] = round(end - previous, 3)
        previous = end
    out["engine ready"] = round(max(ready - previous, 0.0), 3)
    return out
