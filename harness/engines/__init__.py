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


def declared_axes(name: str) -> dict[str, tuple | None] | None:
    """The axes engine `name` declares, or None when it cannot be loaded here (unknown or
    not installed: its scenarios say so, with the fix, when they run)."""
    try:
        return dict(get_engine(name).axes)
    except EngineUnavailable:
        return None


def every_engines_axes() -> dict[str, tuple | None]:
    """The axes of every engine that can be loaded here (first declaration wins)."""
    axes: dict[str, tuple | None] = {}
    for name in REGISTRY:
        for axis, allowed in (declared_axes(name) or {}).items():
            axes.setdefault(axis, allowed)
    return axes


__all__ = ["Engine", "LaunchPlan", "get_engine", "EngineUnavailable", "REGISTRY", "declared_axes", "every_engines_axes"]
