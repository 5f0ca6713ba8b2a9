"""The engine registry: engine name -> plugin class.

Each entry is imported only when asked for, so `harness list` stays fast and an
engine that is not installed (vllm on a machine without it) fails with a message
that says how to install it, not an ImportError at start-up.
"""

from __future__ import annotations

import importlib

from harness.contract.launchplan import LaunchPlan
from harness.engines.base import Engine

# name -> (module, class, how to install it)
REGISTRY: dict[str, tuple[str, str, str]] = {
    "reference": ("harness.engines.reference", "ReferenceEngine", "built in: `make install`"),
    "vllm": ("harness.engines.vllm", "VllmEngine", "`make install-vllm`"),
    "hf": ("harness.engines.hf", "HfEngine", "`make install` (transformers)"),
}


class EngineUnavailable(RuntimeError):
    pass


def get_engine(name: str) -> Engine:
    if name not in REGISTRY:
        raise EngineUnavailable(f"unknown engine '{name}' (known: {', '.join(sorted(REGISTRY))})")
    module, cls, install = REGISTRY[name]
    try:
        return getattr(importlib.import_module(module), cls)()
    except ImportError as exc:
        raise EngineUnavailable(f"engine '{name}' is not installed ({exc}); install it with {install}") from None


__all__ = ["Engine", "LaunchPlan", "get_engine", "EngineUnavailable", "REGISTRY"]
