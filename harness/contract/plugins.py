"""Plugins: what installed packages add to the harness through Python entry points.

A package the user installs (an in-house engine, SGLang, a fork of vLLM, a model
family) declares entry points in its pyproject.toml, and the harness finds them
without being edited:

    [project.entry-points."harness.engines"]
    tp-plan = "harness_tp_plan:TpPlanEngine"      # an harness.engines.base.Engine subclass

    [project.entry-points."harness.models"]
    tiny-mine = "my_models:TINY_MINE"             # an harness.inputs.zoo.recipe.ModelRecipe (or a callable returning one)

Discovery reads only the installed packages' metadata (entry_points.txt), never
imports them: `discover(group)` is cheap, and a plugin that does not import breaks
nothing until it is asked for, then fails as a message naming its package and the
import error (`Plugin.load`). The entry point's name is what a scenario file names.

Standard library only; imports nothing of the harness.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import re
import sys
from dataclasses import dataclass

ENGINES_GROUP = "harness.engines"
MODELS_GROUP = "harness.models"


class PluginError(RuntimeError):
    """A plugin that cannot be used: the message names its package and what went wrong."""


@dataclass(frozen=True)
class Plugin:
    group: str
    # the entry point's name: what a scenario file names
    name: str
    value: str  # "module:attr"
    distribution: str  # the installed package that declares it
    version: str

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].strip()

    def origin(self) -> str:
        """`harness-tp-plan 0.1.0 (harness_tp_plan:TpPlanEngine)`: where it comes from."""
        return f"{self.distribution} {self.version} ({self.value})"

    def install_hint(self) -> str:
        return f"reinstall it (`pip install {self.distribution}`) or uninstall it (`pip uninstall {self.distribution}`)"

    def load(self) -> object:
        """The object the entry point names; any failure (the module or one of its imports
        missing, an error while importing it, no such attribute) is a PluginError naming
        the package and the error, never a traceback. Its message reads on after the
        kind of plugin: f"engine {exc}"."""
        if not self.module:
            raise PluginError(f"'{self.name}' of package {self.origin()}: the entry point names no module")
        try:
            obj: object = importlib.import_module(self.module)
            for part in filter(None, self.attr.split(".")):
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - a third party's import may raise anything
            raise PluginError(
                f"'{self.name}' of package {self.origin()} does not load here: {type(exc).__name__}: {exc}; {self.install_hint()}"
            ) from None
        return obj


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_cache: dict[tuple[str, tuple[str, ...]], dict[str, list[Plugin]]] = {}  # by (group, sys.path)


def discover(group: str) -> dict[str, list[Plugin]]:
    """Every entry point of `group` in the installed packages, by name. A name with more
    than one plugin (two packages claim it) keeps them all: the caller says which wins
    or that it is ambiguous. The same package seen twice on sys.path counts once.
    Cached per sys.path (a few ms per scan)."""
    key = (group, tuple(sys.path))
    if key not in _cache:
        found: dict[str, list[Plugin]] = {}
        seen: set[tuple[str, str, str]] = set()
        for ep in metadata.entry_points(group=group):
            dist = getattr(ep, "dist", None)
            dist_name = (dist.metadata["Name"] if dist is not None else None) or "an unknown package"
            version = (dist.version if dist is not None else None) or "?"
            ident = (_normal(dist_name), ep.name, ep.value)
            if ident in seen:
                continue
            seen.add(ident)
            found.setdefault(ep.name, []).append(Plugin(group, ep.name, ep.value, dist_name, version))
        _cache[key] = found
    return _cache[key]


def clear_cache() -> None:
    """Forget what was discovered (a package was installed into the running process)."""
    _cache.clear()


def ambiguity(name: str, plugins: list[Plugin]) -> str:
    """The message for a name that several packages claim."""
    return (
        f"'{name}' is registered by {len(plugins)} packages: "
        + "; ".join(p.origin() for p in plugins)
        + "; uninstall all but one (or register them under other names)"
    )
