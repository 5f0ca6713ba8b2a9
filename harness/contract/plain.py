"""Plain data from an engine's objects, for outputs.json.

An engine hands back its own objects where the harness expects values: vLLM 0.21.0's
EngineArgs added its ModelConfig and ParallelConfig into the speculative_config dict the
driver had given it, and the driver's record of its arguments then failed to write
("Object of type ModelConfig is not JSON serializable"). `plain(value)` converts what a
rank records field by field: a dataclass (vLLM's configs) to a dict of its fields, an
enum to its name, a mapping or a sequence item by item, a path to its text, a torch
dtype or device to its name, a one-value tensor or numpy scalar to its number; anything
else becomes its type's name in angle brackets, so the record still says what was there.
Nesting is bounded and a cycle is cut, so a config that points back at its parent ends.

Standard library only (torch is recognised by name, not imported).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

# a vLLM config holds configs: deeper than this is written as its type's name
MAX_DEPTH = 8


def plain(value: object, _depth: int = 0, _seen: frozenset[int] = frozenset()) -> Any:
    # Any: JSON-safe data (None, bool, int, float, str, lists and str-keyed dicts of them),
    # which callers keep as the shape they passed in (a meta dict stays a dict)
    """`value` as JSON-safe data (the module doc)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):  # before int: an IntEnum is an int
        return value.name
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)  # JSON has no nan or inf
    if isinstance(value, PurePath):
        return str(value)
    if _depth >= MAX_DEPTH or id(value) in _seen:
        return _name(value)
    seen = _seen | {id(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v, _depth + 1, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, _depth + 1, seen) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v, _depth + 1, seen) for v in value), key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name, None), _depth + 1, seen) for f in dataclasses.fields(value)}
    return _scalar(value)


def _scalar(value: Any) -> Any:
    # Any: a torch or numpy value, read by duck typing (neither is imported here)
    """A torch dtype or device by its name, a one-value tensor or numpy scalar by its number,
    anything else by its type's name."""
    module = type(value).__module__.split(".")[0]
    if module == "torch" and type(value).__name__ in ("dtype", "device"):
        return str(value)
    if module in ("torch", "numpy") and callable(getattr(value, "item", None)):
        numel = getattr(value, "numel", None)  # torch's count of values; numpy's is `size`
        if (numel() if callable(numel) else getattr(value, "size", None)) == 1:
            return plain(value.item())
    return _name(value)


def _name(value: object) -> str:
    return f"<{type(value).__name__}>"
