"""The model zoo builds the same bytes every time and refuses a build that drifts."""

import dataclasses

import pytest

from harness.inputs import zoo


@pytest.mark.slow  # builds a zoo model from scratch (transformers for the hf families)
@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_build_is_deterministic_and_matches_recorded_checksum(name, tmp_path):
    recipe = zoo.get_recipe(name)
    zoo.build(recipe, tmp_path / "a")
    assert zoo.checkpoint_sha256(tmp_path / "a") == recipe.sha256


@pytest.mark.slow  # builds a zoo model from scratch (transformers for the hf families)
def test_cached_model_dir_is_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    path = zoo.model_dir("tiny-llama")
    assert zoo.checkpoint_sha256(path) == zoo.get_recipe("tiny-llama").sha256
    assert zoo.model_dir("tiny-llama") == path  # second call reuses the cache


@pytest.mark.slow  # builds a zoo model from scratch (transformers for the hf families)
def test_checksum_mismatch_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    bad = dataclasses.replace(zoo.get_recipe("tiny-llama"), name="tiny-drift", seed=1)
    monkeypatch.setitem(zoo.ZOO, "tiny-drift", bad)
    with pytest.raises(RuntimeError, match="model 'tiny-drift' built with checksum .* not reproducible"):
        zoo.model_dir("tiny-drift")
    assert not list(tmp_path.glob("models/tiny-drift-*/model.safetensors"))  # nothing half-installed


def test_unknown_model():
    with pytest.raises(KeyError, match="unknown model 'gpt-9'"):
        zoo.get_recipe("gpt-9")


def test_the_table_lists_every_spec_the_families_define():
    """A recipe written in a family module but left out of harness/inputs/zoo/table.py would not be in the zoo."""
    from harness.inputs.zoo import hf_families, llama, table, trained, variants

    defined = {
        v.name for m in (llama, variants, trained, hf_families) for v in vars(m).values() if isinstance(v, zoo.ModelRecipe)
    }
    assert defined == {s.name for s in table.RECIPES}
    assert list(zoo.ZOO.values()) == list(table.RECIPES)


def test_a_name_listed_twice_is_an_error():
    from harness.inputs.zoo import table

    with pytest.raises(ValueError, match="model 'tiny-llama' is listed twice"):
        table.by_name((zoo.get_recipe("tiny-llama"), zoo.get_recipe("tiny-llama")))
