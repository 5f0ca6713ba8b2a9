"""A multimodal family's facts live in one entry of harness/inputs/models/tiny_mm.py's FAMILIES:
a made-up family registered there, and nowhere else, is seen by every lookup of the
tiny-checkpoint builder (no model is built)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.inputs.models import tiny_mm
from harness.inputs.models.tiny_mm import Family

TOY = Family(
    named_tokens={"image_token": "<toy_image>", "toy_start_token": "<toy_start>", "toy_end_token": "<toy_end>"},
    added_tokens=["\n\n"],
    tokenizer_fields={"return_mm_token_type_ids": True},
    mrope={"mrope_section": [2, 3, 3], "mrope_interleaved": True},
    prompt_marks={"image": "<toy_start><toy_image><toy_end>"},
    part_fields={"crop_side": "image_size"},
    part_values={"image_mean": [0.5, 0.5, 0.5]},
    sub_config_types={"text_config": "toy_vl_text"},
    weight_folder="transformer",
    square_as_int={"vision_config": ("image_size", "patch_size")},
    config_token_ids={"newline_id": "\n\n"},
    saved_renames=[(r"^(tower\.)up\.", r"\1fc1.")],
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(tiny_mm.FAMILIES, "toy_vl", TOY)
    return "toy_vl"


def test_an_unknown_model_type_gets_the_empty_family():
    empty = tiny_mm.family("no_such_family")
    assert empty == Family() and not empty.named_tokens and not empty.weight_folder
    assert tiny_mm.named_tokens("no_such_family") == {} and tiny_mm.added_tokens("no_such_family") == []


def test_every_family_is_one_entry():
    """Each entry is a Family; the shared pieces (Qwen-VL's tokens) are the same ones."""
    assert all(isinstance(f, Family) for f in tiny_mm.FAMILIES.values())
    assert tiny_mm.family("qwen3_vl_moe") is tiny_mm.family("qwen3_vl")
    assert tiny_mm.family("cosmos3_edge").named_tokens is tiny_mm.family("qwen2_vl").named_tokens


def test_a_family_added_in_one_place_reaches_the_tokenizer_and_config_lookups(toy):
    assert tiny_mm.family(toy) is TOY
    named = tiny_mm.named_tokens(toy)  # no processor class in transformers: the entry's tokens alone
    assert named == TOY.named_tokens
    assert tiny_mm.added_tokens(toy) == ["\n\n"] and tiny_mm.tokenizer_fields(toy) == {"return_mm_token_type_ids": True}
    assert tiny_mm.default_sub_configs(toy) == {"text_config": {"model_type": "toy_vl_text"}}

    config = SimpleNamespace(model_type=toy, image_token_id=0, toy_start_token_index=0, text_config=None)
    tiny_mm.set_token_ids(config, tiny_mm.token_ids(named, 3))
    assert (config.image_token_id, config.toy_start_token_index) == (3, 4)


def test_a_family_added_in_one_place_reaches_the_rope_processor_and_prompt(toy):
    text = SimpleNamespace(head_dim=32, hidden_size=128, num_attention_heads=4, rope_parameters={"rope_theta": 1e4})
    config = SimpleNamespace(model_type=toy, text_config=text)
    tiny_mm.fit_mrope(config)
    assert text.rope_parameters == {"rope_theta": 1e4, "mrope_section": [4, 6, 6], "mrope_interleaved": True}

    processor = SimpleNamespace(image_token="<toy_image>", video_token="<toy_video>")
    assert tiny_mm.placeholders(toy, processor) == {"image": "<toy_start><toy_image><toy_end>", "video": "<toy_video>"}

    vision = SimpleNamespace(patch_size=8, image_size=32)
    part = SimpleNamespace(patch_size=14, crop_side=504, image_mean=[0.1, 0.2, 0.3])
    sized = tiny_mm._sized(part, SimpleNamespace(model_type=toy, vision_config=vision))
    assert vars(sized) == {"patch_size": 8, "crop_side": 32, "image_mean": [0.5, 0.5, 0.5]}


def test_a_family_added_in_one_place_reaches_the_written_checkpoint(toy, tmp_path):
    """config.json's square sizes and token ids, the weights' published names and folder."""
    import torch
    from safetensors.torch import load_file, save_file

    (tmp_path / "config.json").write_text(json.dumps({"vision_config": {"image_size": [32, 32], "patch_size": [8, 8]}}))
    tiny_mm.write_hub_config(toy, tmp_path)
    vocab = {"\n\n": 9}
    tiny_mm.write_config_token_ids(toy, lambda text, add_special_tokens: {"input_ids": [vocab[text]]}, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == {
        "newline_id": 9,
        "vision_config": {"image_size": 32, "patch_size": 8},
    }

    class Saved(torch.nn.Module):  # a model as transformers saves one: its weights, and its config
        config: SimpleNamespace

    model = Saved()
    model.tower = torch.nn.Module()
    model.tower.up = torch.nn.Linear(2, 2, bias=False)
    model.config = SimpleNamespace(model_type=toy)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
    tiny_mm.write_hub_layout(model, tmp_path)
    assert set(load_file(tmp_path / "model.safetensors")) == {"tower.fc1.weight"}
    tiny_mm.write_weight_folder(toy, tmp_path)
    assert set(load_file(tmp_path / "transformer" / "model.safetensors")) == {"tower.fc1.weight"}
