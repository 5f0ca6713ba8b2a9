"""The conformance kit's parts that start nothing: the settings it calls impossible, the
rank fault any engine honours, its command line (tests/test_conformance.py runs it)."""

from __future__ import annotations

import pytest

from harness import cli
from harness.engines.launch import rankside
from harness.run.conformance import impossible_settings, parse_settings
from tests.kit.plugins import Site


@pytest.fixture
def site(tmp_path, monkeypatch):
    return Site(tmp_path / "site", monkeypatch)


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


def test_the_settings_no_engine_can_run_by_its_own_declaration():
    hf_like = {"tp": (1,), "pp": (1,), "sp": (False,), "compile": (False,)}
    cases = dict((what.split(" ")[0], settings) for what, settings in impossible_settings(hf_like, {"tp": 1, "pp": 1}))
    assert cases == {
        "an": {"tp": 1, "pp": 1, "nosuchaxis": True},
        "tp=2,": {"tp": 2, "pp": 1},
        "pp=2,": {"tp": 1, "pp": 2},
        "sp=True,": {"tp": 1, "pp": 1, "sp": True},
        "compile=True,": {"tp": 1, "pp": 1, "compile": True},
        "tp=0": {"tp": 0, "pp": 1},
    }
    open_axes = impossible_settings({"tp": None, "sp": (False, True), "mode": ("a", "b")}, {"tp": 1})
    assert [s for _, s in open_axes] == [{"tp": 1, "nosuchaxis": True}, {"tp": 1, "mode": "nosuchvalue"}, {"tp": 0}]
    assert parse_settings("tp2-pp2") == {"tp": 2, "pp": 2} and parse_settings("tp2-sp") == {"tp": 2, "sp": True}
    with pytest.raises(ValueError):
        parse_settings("tp=2")


def test_conformance_rejects_an_unknown_check(capsys):
    assert cli.main(["conformance", "reference", "--check", "speed"]) == 2
    err = capsys.readouterr().err
    assert "unknown checks ['speed'] (the kit has: load, versions," in err


def test_conformance_of_an_engine_that_does_not_load_fails_its_first_check(site, tmp_path, capsys):
    site.install("broken-engines", "0.3", {"harness.engines": {"broken": "not_there_at_all:Engine"}})
    assert cli.main(["conformance", "broken", "--work-dir", str(tmp_path / "kit")]) == 1
    out = capsys.readouterr().out
    assert "FAIL  load" in out and "broken-engines 0.3" in out and "No module named 'not_there_at_all'" in out
    assert "SKIP  hang" in out and "8 checks: 0 pass, 1 fail, 7 skip" in out
