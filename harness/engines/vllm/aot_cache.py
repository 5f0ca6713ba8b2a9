"""vLLM's AOT compile cache, made loadable on CPU, so a warm start does not compile again.

vLLM 0.32 saves each compiled model (`torch.compiler` AOT precompile) under
VLLM_CACHE_ROOT and, on the next start, loads it in `_try_load_aot_compiled_fn`
(compilation/decorators.py), which then calls `compiled_fn.finalize_loading(vllm_config)`.
Only vLLM's own serializable function class has that method; on CPU vLLM compiles with
stock inductor under DYNAMO_TRACE_ONCE, whose loaded `compiled_fn` is a plain function, so
every load fails ("'function' object has no attribute 'finalize_loading'"), vLLM logs
"Compiling model again due to a load failure" and compiles from scratch: a warm cache
saved nothing (docs/VLLM.md lists the releases this was seen on).

`install()` wraps `torch.compiler.load_compiled_function` in the worker so that a loaded
plain function gets the `finalize_loading` vLLM asks for, doing nothing: a stock-inductor
artifact is whole when torch loads it, there is nothing to finalize. vLLM's own class
keeps its method. What may be reused stays vLLM's decision (its cache key: config, source
files, vLLM and torch versions) and the harness's (a cache root per torch and vLLM version,
harness/engines/compile_cache.py). bench/vllm_start.py checks that a warm run's outputs
are bit-identical to the cold run's.

HARNESS_VLLM_AOT_LOAD=0 leaves vLLM's own behaviour (bench/vllm_start.py --stock-aot: the
"before" of docs/BENCHMARKS.md). Runs in vLLM's interpreter; imports torch only when installed.
"""

from __future__ import annotations

import functools

from harness.contract.settings.variables import VLLM_AOT_LOAD

OFF_ENV = VLLM_AOT_LOAD.name


def _nothing_to_finalize(*_args, **_kwargs) -> None:
    """A stock-inductor artifact is complete once torch has loaded it."""


def install() -> None:
    if not VLLM_AOT_LOAD.on():
        return
    import torch

    load = getattr(torch.compiler, "load_compiled_function", None)
    if load is None or getattr(load, "_harness_patched", False):
        return

    @functools.wraps(load)
    def load_compiled_function(*args, **kwargs):
        loaded = load(*args, **kwargs)
        compiled = getattr(getattr(loaded, "_artifacts", None), "compiled_fn", None)
        if compiled is not None and not hasattr(compiled, "finalize_loading"):
            try:
                compiled.finalize_loading = _nothing_to_finalize
            except (AttributeError, TypeError):  # an object that takes no attributes: vLLM's own path
                pass
        return loaded

    load_compiled_function._harness_patched = True  # type: ignore[attr-defined]
    torch.compiler.load_compiled_function = load_compiled_function
