"""present(): a value a test expects to be there, typed without its None; raised(): the
exception a call a test expects to fail raises.

`assert "would never fire" in present(target_problem(...))` reads as the test means it
and lets mypy check what follows; a None fails the test at that call, with its type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    """`value`, which must not be None (an answer the test expects the call to give)."""
    if value is None:
        raise AssertionError("expected a value, got None")
    return value


def raised(call: Callable[[], Any]) -> BaseException:
    """What `call()` raised (its traceback and chain intact, for the test to read)."""
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - the exception is what is tested
        return exc
    raise AssertionError("nothing raised")
