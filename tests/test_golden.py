"""Goldens: a missing or mismatched golden is an error naming what differs and
how to regenerate; version drift is reported, not enforced."""

import pytest
import torch

from harness import golden as goldens
from harness.contract.outputs import EngineOutputs


def manifest(**overrides):
    m = goldens.make_manifest(
        suite="demo", model="tiny-llama", model_sha256="aa", workload_sha256="bb", engine="reference",
        dtype="float32", settings={"tp": 1}, versions={"torch": "2.13.0"},
    )
    m.update(overrides)
    return m


@pytest.fixture
def stored(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    run = tmp_path / "run"
    out = EngineOutputs(meta={"engine": "reference", "timings": {"run_s": 1.0}})
    out.put("logits", topk_ids=torch.arange(6).reshape(3, 2))
    out.save(run)
    return goldens.store_golden(run, manifest())


def test_missing_golden_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path))
    with pytest.raises(goldens.GoldenError, match=r"no golden for suite 'demo'.*harness golden demo"):
        goldens.load_golden(manifest())


def test_roundtrip_and_timings_not_stored(stored):
    outputs, m = goldens.load_golden(manifest())
    assert torch.equal(outputs.workload("logits")["topk_ids"], torch.arange(6).reshape(3, 2))
    assert "timings" not in outputs.meta and "created" in m


def test_stale_golden_names_every_difference(stored):
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_golden(manifest(model_sha256="cc", dtype="bfloat16"))
    text = str(err.value)
    assert "model_sha256: golden has 'aa', this run has 'cc'" in text
    assert "dtype: golden has 'float32', this run has 'bfloat16'" in text
    assert "harness golden demo" in text


def test_version_drift_is_information_not_an_error(stored):
    _, m = goldens.load_golden(manifest(versions={"torch": "2.14.0"}))
    assert goldens.version_drift(m, {"torch": "2.14.0"}) == {"torch": {"golden": "2.13.0", "now": "2.14.0"}}
