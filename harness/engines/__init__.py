"""The engine registry: engine name -> plugin class.

Two sources: the built-in engines (BUILTIN) and the engines of installed packages,
found through the `harness.engines` entry point group (harness/contract/plugins.py; how to write
and register one: docs/ENGINES.md). A built-in name wins: a package that registers
`vllm` or `reference` is ignored for that name (`harness list --engines` shows it as
shadowed), so installing a package never changes what an existing suite runs. Two
packages registering one name make that name an error that names both.

Each engine is imported only when asked for, so `harness list` stays fast and an
engine that is not installed (vllm on a machine without it, a plugin whose package is
broken) fails with a message that says which package and how to fix it, not an
ImportError at start-up.

The room holds, beside the registry: the base class (base.py), the built-in engines
(reference/, vllm/, hf/), the compile cache and shared environment directories, and the
launcher every engine starts its ranks through (launch/, below the base class).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from harness.contract import plugins
from harness.contract.launchplan import LaunchPlan
from harness.engines.base import Engine

# name -> (module, class, how to install it)
BUILTIN: dict[str, tuple[str, str, str]] = {
    "reference": ("harness.engines.reference", "ReferenceEngine", "built in: `make install`"),
    "vllm": ("harness.engines.vllm", "VllmEngine", "`harness install vllm`"),
    "hf": ("harness.engines.hf", "HfEngine", "`make install` (transformers)"),
}
# the name older code knows the built-in table by
REGISTRY = BUILTIN


class EngineUnavailable(RuntimeError):
    pass


def _plugins() -> dict[str, list[plugins.Plugin]]:
    return plugins.discover(plugins.ENGINES_GROUP)


def engine_names() -> list[str]:
    """Every engine name a scenario file may use here: the built-ins, then the installed
    packages' (those a built-in shadows counted once)."""
    return list(BUILTIN) + sorted(n for n in _plugins() if n not in BUILTIN)


def get_engine(name: str) -> Engine:
    if name in BUILTIN:
        module, cls, install = BUILTIN[name]
        try:
            return getattr(importlib.import_module(module), cls)()
        except ImportError as exc:
            raise EngineUnavailable(f"engine '{name}' is not installed ({exc}); install it with {install}") from None
    found = _plugins().get(name)
    if not found:
        raise EngineUnavailable(
            f"unknown engine '{name}' (known: {', '.join(engine_names())}); an engine of "
            f"another package is found once that package is installed (`harness docs engines`)"
        )
    if len(found) > 1:
        raise EngineUnavailable(f"engine {plugins.ambiguity(name, found)}")
    return _instantiate(found[0])


def _instantiate(plugin: plugins.Plugin) -> Engine:
    try:
        cls = plugin.load()
    except plugins.PluginError as exc:
        raise EngineUnavailable(f"engine {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Engine)):
        raise EngineUnavailable(
            f"engine '{plugin.name}' of package {plugin.origin()} is {cls!r}, not a subclass of "
            "harness.engines.base.Engine; the entry point must name the engine class"
        )
    try:
        engine = cls()
    except Exception as exc:  # noqa: BLE001 - a third party's constructor may raise anything
        raise EngineUnavailable(
            f"engine '{plugin.name}' of package {plugin.origin()} cannot be created: {type(exc).__name__}: {exc}"
        ) from None
    if not engine.name:
        engine.name = plugin.name
    return engine


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
    for name in engine_names():
        for axis, allowed in (declared_axes(name) or {}).items():
            axes.setdefault(axis, allowed)
    return axes


def axes_text(axes: dict) -> str:
    """`tp=any pp=1 sp=false,true`: an engine's declared axes, one word each."""

    def value(v) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{a}={'any' if vals is None else ','.join(value(v) for v in vals)}" for a, vals in axes.items()) or "(none)"


@dataclass
class EngineInfo:
    """One row of `harness list --engines`."""

    name: str
    # "built-in (harness.engines.reference:ReferenceEngine)" or "<package> <version> (<module:Class>)"
    origin: str
    # "ready" | "not ready" (loads, cannot run here) | "does not load" | "shadowed" | "ambiguous"
    status: str
    # why not, and how to fix it; for a shadowed plugin, by what
    detail: str = ""
    axes: dict | None = None
    # the file the engine class lives in (when it loads)
    path: str = ""
    # the model types it runs; None: any its library builds
    model_types: frozenset[str] | None = None

    def runs(self, model_type: str | None) -> bool | None:
        """Whether it runs a model of this type: True, False, or None when it cannot be told
        before the model is built (an engine that decides per model, or an unknown type)."""
        if self.status not in ("ready", "not ready"):
            return False
        if self.model_types is None or model_type is None:
            return None
        return model_type in self.model_types

    def models_text(self) -> str:
        return ", ".join(sorted(self.model_types)) if self.model_types is not None else "any its library builds"

    @property
    def usable(self) -> bool:
        return self.status == "ready"


def _status_of(engine: Engine) -> tuple[str, str]:
    try:
        reason = engine.unavailable_reason()
    except Exception as exc:  # noqa: BLE001 - a listing never dies of one engine
        return "not ready", f"unavailable_reason() raised {type(exc).__name__}: {exc}"
    return ("not ready", reason) if reason else ("ready", "")


def _loaded_info(name: str, origin: str) -> EngineInfo:
    try:
        engine = get_engine(name)
    except EngineUnavailable as exc:
        return EngineInfo(name, origin, "does not load", str(exc))
    status, detail = _status_of(engine)
    module = sys.modules.get(type(engine).__module__)
    try:
        kinds = engine.model_types()
    except Exception:  # noqa: BLE001 - a listing never dies of one engine
        kinds = None
    return EngineInfo(name, origin, status, detail, dict(engine.axes), getattr(module, "__file__", "") or "", kinds)


def inventory() -> list[EngineInfo]:
    """Every engine registered here, where it comes from and whether it can run here.
    Imports each engine's module (they are import-light by contract); starts nothing."""
    rows = []
    for name, (module, cls, _install) in BUILTIN.items():
        rows.append(_loaded_info(name, f"built-in ({module}:{cls})"))
    for name, found in sorted(_plugins().items()):
        if name in BUILTIN:
            rows += [
                EngineInfo(
                    name,
                    p.origin(),
                    "shadowed",
                    f"ignored: '{name}' is a built-in engine, which wins; register the package's engine under another name",
                )
                for p in found
            ]
        elif len(found) > 1:
            rows += [EngineInfo(name, p.origin(), "ambiguous", plugins.ambiguity(name, found)) for p in found]
        else:
            rows.append(_loaded_info(name, found[0].origin()))
    return rows


def engines_for(model_type: str | None, rows: list[EngineInfo] | None = None) -> tuple[list[EngineInfo], list[EngineInfo]]:
    """(the registered engines that run a model of this type, those that decide per model
    when it runs), ready here or not; `rows`: an inventory() already taken."""
    rows = inventory() if rows is None else rows
    return [e for e in rows if e.runs(model_type) is True], [e for e in rows if e.runs(model_type) is None]


def engines_text(model_type: str | None, rows: list[EngineInfo] | None = None) -> str:
    """`reference; maybe vllm, hf (they decide per model when it runs)` for messages and listings."""
    sure, maybe = engines_for(model_type, rows)
    parts = [", ".join(e.name + ("" if e.usable else " (not ready here)") for e in sure)] if sure else []
    if maybe:
        parts.append(f"maybe {', '.join(e.name for e in maybe)} (they decide per model when it runs)")
    return "; ".join(parts) or "none registered"


__all__ = [
    "engines_for",
    "engines_text",
    "Engine",
    "LaunchPlan",
    "get_engine",
    "EngineUnavailable",
    "BUILTIN",
    "REGISTRY",
    "declared_axes",
    "every_engines_axes",
    "engine_names",
    "inventory",
    "EngineInfo",
    "axes_text",
]
