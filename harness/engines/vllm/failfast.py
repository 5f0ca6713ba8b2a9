"""A vLLM worker whose model step raised ends its process, so that the engine dies now.

vLLM's multiprocess executor sends each step to every worker but, with pipeline
parallelism, waits for the answer of the output rank only (the last PP stage). When an
earlier stage raises in its step, the worker logs the traceback and returns a failure that
nobody reads; the last stage waits for that stage's hidden states, and the engine core
gives up only when its step RPC times out: 300 s (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) of a
machine doing nothing, per crashed scenario and per trial of the interaction minimizer.
A step that raised is fatal to an offline engine whatever the layout (the executor raises
the failure it reads), so a worker of a multi-process world whose `execute_model` or
`sample_tokens` raised exits GRACE_S later: time for vLLM to log the traceback (the root
cause crash.py reads) and to end the engine its own way if it does; otherwise the
executor's monitor sees the worker die and shuts the engine down. A world of one worker
is left alone (its failure is the answer the executor reads).

Runs in vLLM's interpreter; nothing here imports vLLM at module import.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time

GRACE_S = 15.0
EXIT_CODE = 70  # EX_SOFTWARE: the executor's "died unexpectedly (exit code: 70)"
STEP_METHODS = ("execute_model", "sample_tokens")


def install() -> None:
    """Wrap the step methods of vLLM's GPU worker class (the CPU worker inherits them); a
    vLLM without that module is left as it is."""
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError:
        return
    for name in STEP_METHODS:
        method = Worker.__dict__.get(name)
        if method is not None and not getattr(method, "_harness_failfast", False):
            setattr(Worker, name, ending_on_failure(method))


def ending_on_failure(method):
    """`method`, and when it raises in a worker of several, this process's exit armed."""

    @functools.wraps(method)
    def step(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception:  # not SystemExit / KeyboardInterrupt: the process is ending already
            if _world_size(self) > 1:
                arm_exit()
            raise

    step._harness_failfast = True  # type: ignore[attr-defined]
    return step


def arm_exit(grace_s: float = GRACE_S, exit=os._exit) -> threading.Thread:
    """Exit this process `grace_s` from now (a daemon thread: the first armed ends it)."""

    def later() -> None:
        time.sleep(grace_s)
        print(
            f"harness: this vLLM worker's step raised {grace_s:.0f} s ago and the engine still runs: "
            f"the worker exits ({EXIT_CODE}) so that the executor ends it",
            file=sys.stderr,
            flush=True,
        )
        exit(EXIT_CODE)

    thread = threading.Thread(target=later, name="harness-failfast", daemon=True)
    thread.start()
    return thread


def _world_size(worker) -> int:
    config = getattr(worker, "parallel_config", None) or getattr(getattr(worker, "vllm_config", None), "parallel_config", None)
    return int(getattr(config, "world_size", 1) or 1)
