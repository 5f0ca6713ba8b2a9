"""Goldens: a missing or mismatched golden is an error naming what differs and
how to regenerate; version drift is reported, not enforced."""

import json

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.roots import builtin_golden
from harness.run import golden as goldens


def manifest(**overrides):
    m = goldens.make_manifest(
        suite="demo",
        model="tiny-llama",
        model_sha256="aa",
        workload_sha256="bb",
        engine="reference",
        dtype="float32",
        settings={"tp": 1},
        versions={"torch": "2.13.0"},
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
        goldens.load_reference(manifest())


def test_roundtrip_and_timings_not_stored(stored):
    reference = goldens.load_reference(manifest())
    outputs, m = reference.outputs, reference.manifest
    assert torch.equal(outputs.workload("logits")["topk_ids"], torch.arange(6).reshape(3, 2))
    assert "timings" not in outputs.meta and "created" in m


def test_stale_golden_names_every_difference(stored):
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(manifest(model_sha256="cc", dtype="bfloat16"))
    text = str(err.value)
    assert "model_sha256: golden has 'aa', this run has 'cc'" in text
    assert "dtype: golden has 'float32', this run has 'bfloat16'" in text
    assert "harness golden demo" in text


def test_an_axis_added_at_its_default_asks_for_the_golden_already_made(stored):
    """A suite that adds an axis to its matrix, its golden at the axis's default, still holds
    to the golden made before: the same run. Any other value of it is another golden."""
    goldens.load_reference(manifest(settings={"tp": 1, "chunked_prefill": 0, "batch": "all", "spec": False}))
    with pytest.raises(goldens.GoldenError, match=r"settings: golden has \{'tp': 1\}, this run has .*'batch': 'one'"):
        goldens.load_reference(manifest(settings={"tp": 1, "batch": "one"}))


def test_version_drift_is_information_not_an_error(stored):
    reference = goldens.load_reference(manifest(versions={"torch": "2.14.0"}))
    assert reference.version_drift == {"torch": {"golden": "2.13.0", "now": "2.14.0"}}


def test_stored_golden_records_the_digest_of_each_file(stored):
    m = json.loads((stored / goldens.MANIFEST).read_text())
    assert m[goldens.DIGESTS] == goldens.file_digests(stored)
    assert set(m[goldens.DIGESTS]) == {"outputs.safetensors", "outputs.json"}


def test_damaged_metadata_file_is_an_error_naming_it(stored):
    (stored / "outputs.json").write_text('{"engine": "reference", "tampered": true}')
    with pytest.raises(
        goldens.GoldenError, match=r"golden file .*outputs\.json is damaged.*git checkout golden/demo.*harness golden demo"
    ):
        goldens.load_reference(manifest())


def test_golden_without_digests_cannot_be_trusted(stored):
    path = stored / goldens.MANIFEST
    m = json.loads(path.read_text())
    del m[goldens.DIGESTS]
    path.write_text(json.dumps(m))
    with pytest.raises(goldens.GoldenError, match=r"records no digests.*harness golden demo"):
        goldens.load_reference(manifest())


def test_unreadable_manifest_is_an_error_naming_it(stored):
    (stored / goldens.MANIFEST).write_text('{"suite": "de')
    with pytest.raises(goldens.GoldenError, match=r"unreadable manifest: .*manifest\.json is not JSON"):
        goldens.load_reference(manifest())


@pytest.mark.parametrize("text, found", [("[]", "a JSON array"), ("null", "JSON null"), ('"x"', "a JSON string")])
def test_a_manifest_that_is_json_but_not_an_object_is_an_error_naming_it(stored, text, found):
    path = stored / goldens.MANIFEST
    path.write_text(text)
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(manifest())
    assert f"unreadable manifest: {path} holds {found} where a JSON object" in str(err.value)
    assert "git checkout golden/demo" in str(err.value)


def test_a_file_added_after_storing_is_not_trusted(stored):
    (stored / "evals.json").write_text("{}")
    with pytest.raises(goldens.GoldenError, match=r"evals\.json is not in its manifest's digests"):
        goldens.load_reference(manifest())


COMMITTED = sorted(str(p.parent.relative_to(builtin_golden())) for p in builtin_golden().glob(f"**/{goldens.MANIFEST}"))


@pytest.mark.parametrize("key", COMMITTED)  # a suite, or suite/arch for a suite with an arch axis
def test_every_committed_golden_carries_matching_digests(key):
    directory = builtin_golden() / key
    goldens.verify_files(directory, json.loads((directory / goldens.MANIFEST).read_text()), key)
