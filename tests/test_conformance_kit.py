"""The conformance kit's parts that start nothing: the settings it calls impossible, the
rank fault any engine honours, its command line (tests/test_conformance.py runs it)."""

from __future__ import annotations

import pytest

from harness.launch import rankside


def test_the_rank_fault_any_engine_honours(monkeypatch):
    assert rankside.parse_rank_fault("raise@1") == ("raise", 1)
    assert rankside.parse_rank_fault(" hang@0 ") == ("hang", 0)
    for bad in ("raise", "raise@x", "explode@1", "@1"):
        with pytest.raises(ValueError, match="expected one of raise@<global rank>, hang@<global rank>"):
            rankside.parse_rank_fault(bad)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(rankside.RANK_FAULT_ENV, "raise@1")
    rankside.fire_rank_fault()  # another rank's fault: nothing happens here
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(RuntimeError, match="HARNESS_RANK_FAULT: injected failure on rank 1"):
        rankside.fire_rank_fault()
