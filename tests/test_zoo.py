"""The model zoo builds the same bytes every time and refuses a build that drifts."""

import dataclasses

import pytest

from harness import zoo


@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_build_is_deterministic_and_matches_recorded_checksum(name, tmp_path):
    spec = zoo.get_spec(name)
    zoo.build(spec, tmp_path / "a")
    assert zoo.checkpoint_sha256(tmp_path / "a") == spec.sha256


def test_cached_model_dir_is_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    path = zoo.model_dir("tiny-llama")
    assert zoo.checkpoint_sha256(path) == zoo.get_spec("tiny-llama").sha256
    assert zoo.model_dir("tiny-llama") == path  # second call reuses the cache


def test_checksum_mismatch_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    bad = dataclasses.replace(zoo.get_spec("tiny-llama"), name="tiny-drift", seed=1)
    monkeypatch.setitem(zoo.ZOO, "tiny-drift", bad)
    with pytest.raises(RuntimeError, match="model 'tiny-drift' built with checksum .* not reproducible"):
        zoo.model_dir("tiny-drift")
    assert not list(tmp_path.glob("models/tiny-drift-*/model.safetensors"))  # nothing half-installed


def test_unknown_model():
    with pytest.raises(KeyError, match="unknown model 'gpt-9'"):
        zoo.get_spec("gpt-9")
