"""A pytest plugin that makes the machine's load rise during a test: each call of
tests.kit.timing.time_scale returns a larger factor than the one before (1, 2, 3, ...).

A test that reads a budget again after the work it timed (comparing a run's duration with
`scaled(30)` at the assertion) fails under it, as it did on a machine whose load changed
between the two reads; a test that keeps the budget it gave passes:

    python -m pytest -p tests.kit.rising_load tests/test_launch.py -k hang_dumps -n 0
"""

from __future__ import annotations

import itertools

import pytest

from tests.kit import timing


@pytest.fixture(autouse=True)
def rising_load(monkeypatch):
    factors = itertools.count(1)
    monkeypatch.delenv(timing.TIME_SCALE_ENV, raising=False)
    monkeypatch.setattr(timing, "time_scale", lambda: float(next(factors)))
