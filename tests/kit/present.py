"""present(): a value a test expects to be there, typed without its None.

`assert "would never fire" in present(target_problem(...))` reads as the test means it
and lets mypy check what follows; a None fails the test at that call, with its type.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    """`value`, which must not be None (an answer the test expects the call to give)."""
    if value is None:
        raise AssertionError("expected a value, got None")
    return value
