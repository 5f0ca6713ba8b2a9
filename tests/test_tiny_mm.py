"""Tiny multimodal checkpoints (harness/inputs/models/tiny_mm.py) and prompts written by their
chat template (harness/inputs/chat.py): built by this interpreter's transformers, then read
back by transformers' own AutoProcessor and model, as an engine would read them."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from harness.inputs import chat, models
from harness.inputs.models import ArchModel
from harness.inputs.zoo import load_tokenizer
from tests.kit.present import present

pytestmark = pytest.mark.e2e  # runs the builder script in a subprocess


@pytest.fixture(scope="module")
def llava():
    return models.resolve(ArchModel(arch="LlavaForConditionalGeneration"), sys.executable).directory


@pytest.fixture(scope="module")
def gemma3():
    return models.resolve(ArchModel(arch="Gemma3ForConditionalGeneration"), sys.executable).directory


def _image():
    from PIL import Image

    from harness.inputs.images import image_path

    return Image.open(image_path("gradient-84x56")).convert("RGB")


def test_a_tiny_llava_is_read_by_transformers_with_its_processor_as_published_llavas_are(llava):
    """The weights carry the tower's `vision_model.` level (as every published LLaVA and
    vLLM's loader have them), the processor's image size and patch size are the tiny
    tower's, and the prompt the chat template writes expands to one token per patch."""
    import torch
    from safetensors import safe_open
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    with safe_open(llava / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert "vision_tower.vision_model.embeddings.patch_embedding.weight" in names
    assert not any(n.startswith("vision_tower.embeddings.") for n in names)

    config = json.loads((llava / "config.json").read_text())
    vision = config["vision_config"]
    assert vision["image_size"] == 4 * vision["patch_size"] and config["image_seq_length"] == 16
    processor = AutoProcessor.from_pretrained(llava)
    ids = present(chat.template_of(llava)).prompt_ids("How many apples?", chat.Media(images=1), 20, load_tokenizer(llava))
    assert ids.count(config["image_token_index"]) == 1 and ids[0] == 0  # BOS, one unexpanded placeholder
    text = processor.tokenizer.decode(ids)
    inputs = processor(text=text, images=[_image()], return_tensors="pt")
    assert int((inputs["input_ids"] == config["image_token_index"]).sum()) == 16

    # (model, info): transformers types from_pretrained as the model alone, also with output_loading_info=True
    loaded: Any = LlavaForConditionalGeneration.from_pretrained(llava, output_loading_info=True)
    model, loading = loaded
    assert not loading["missing_keys"] and not loading["unexpected_keys"], loading
    with torch.no_grad():
        logits = model.eval()(**inputs).logits
    assert logits.shape[1] == inputs["input_ids"].shape[1] and torch.isfinite(logits).all()


def test_a_tiny_gemma3_has_every_token_its_config_and_processor_name(gemma3):
    """boi / eoi / image soft token ids point at the tokenizer's tokens, vLLM's newline
    tokens are in the vocabulary and inside the config's vocab_size, and two images in
    one prompt expand to mm_tokens_per_image tokens each."""
    from transformers import AutoProcessor

    config = json.loads((gemma3 / "config.json").read_text())
    processor = AutoProcessor.from_pretrained(gemma3)
    vocab = processor.tokenizer.get_vocab()
    assert vocab["<start_of_image>"] == config["boi_token_index"]
    assert vocab["<end_of_image>"] == config["eoi_token_index"]
    assert vocab["<image_soft_token>"] == config["image_token_index"]
    assert all(vocab[n] < config["text_config"]["vocab_size"] for n in ("\n", "\n\n", "\n\n\n", "\n\n\n\n"))

    template = present(chat.template_of(gemma3))
    ids = template.prompt_ids("Two pictures.", chat.Media(images=2), 20, load_tokenizer(gemma3))
    assert ids.count(config["boi_token_index"]) == 2
    inputs = processor(text=processor.tokenizer.decode(ids), images=[_image(), _image()], return_tensors="pt")
    assert int((inputs["input_ids"] == config["image_token_index"]).sum()) == 2 * config["mm_tokens_per_image"]


def test_a_chat_template_prompt_keeps_the_template_and_cuts_the_text(llava):
    """The text budget cuts the question, never the template's own tokens; a text that
    holds a special token (an image placeholder in the text) is refused."""
    template, tokenizer = present(chat.template_of(llava)), load_tokenizer(llava)
    long = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
    one = chat.Media(images=1)
    full = template.prompt_ids(long, one, 1000, tokenizer)
    cut = template.prompt_ids(long, one, 5, tokenizer)
    assert len(cut) == 1 + 1 + 5 and cut == full[:7]  # BOS, <image>, five tokens of text
    assert template.prompt_ids(long, chat.Media(), 5, tokenizer) == [cut[0]] + cut[2:]
    with pytest.raises(ValueError, match="special token"):
        template.prompt_ids("look: <image> here", one, 20, tokenizer)


def test_a_text_model_has_no_chat_template(tmp_path):
    assert chat.template_of(tmp_path) is None


def test_fused_experts_are_saved_in_the_published_layout_and_read_back_the_same():
    """transformers keeps Qwen3-VL-MoE's fused experts transposed from the published
    layout and does not transpose them back on save; the builder does. The checkpoint
    then has the published shapes ([experts, hidden, 2 x intermediate] for gate_up), and
    transformers reading it computes exactly what the model it was saved from computes."""
    import torch
    from safetensors import safe_open
    from transformers import Qwen3VLMoeForConditionalGeneration

    from harness.inputs.models import tiny

    ref = ArchModel(
        arch="Qwen3VLMoeForConditionalGeneration",
        overrides={"text_config": {"moe_intermediate_size": 32}},
        extra_config={"text_config": {"norm_topk_prob": True}},
    )
    directory = models.resolve(ref, sys.executable).directory
    with safe_open(directory / "model.safetensors", "pt") as f:
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys() if "layers.0.mlp.experts" in k}
    assert shapes == {
        "model.language_model.layers.0.mlp.experts.gate_up_proj": [4, 128, 64],
        "model.language_model.layers.0.mlp.experts.down_proj": [4, 32, 128],
    }

    built = tiny.build_model(ref.arch, ref.seed, ref.overrides, ref.extra_config)
    read = Qwen3VLMoeForConditionalGeneration.from_pretrained(directory).eval()
    ids = torch.tensor([[0, 17, 240, 33, 101, 7]])
    with torch.no_grad():
        assert torch.equal(built(input_ids=ids).logits, read(input_ids=ids).logits)


def test_multimodal_rope_sections_fit_the_tiny_head():
    """Qwen-VL's and GLM-4V's rope split (temporal, height, width) is written into the
    config, scaled to the tiny head's rotary half, so vLLM and transformers read one split."""
    from harness.inputs.models import tiny

    for arch, expected in [
        ("Qwen2VLForConditionalGeneration", [4, 6, 6]),
        ("Qwen3VLForConditionalGeneration", [6, 5, 5]),
        ("Glm4vForConditionalGeneration", [2, 3, 3]),
    ]:
        text = tiny.build_model(arch, 0, {}).config.text_config
        assert text.rope_parameters["mrope_section"] == expected, arch
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        rotary = head_dim * text.rope_parameters.get("partial_rotary_factor", 1.0)
        assert sum(expected) * 2 == rotary, arch


def test_the_rope_split_follows_an_override_of_the_text_head():
    """An override that resizes the text head (Qwen3.5 VL's 128, which vLLM's CPU gated-delta-net
    kernel wants) gets the split refit: vLLM asserts sum(mrope_section) == rotary_dim // 2."""
    from harness.inputs.models import tiny

    text = tiny.build_model("Qwen3_5ForConditionalGeneration", 0, {"text_config": {"head_dim": 128}}).config.text_config
    rope = text.rope_parameters
    assert sum(rope["mrope_section"]) * 2 == int(128 * rope["partial_rotary_factor"])


def test_an_override_that_gives_its_own_rope_split_keeps_it():
    """The refit is skipped only where the scenario's overrides name rope_parameters, at any
    depth (text_config's): the split they give is the one written."""
    from harness.inputs.models import tiny

    given = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    overrides = {"text_config": {"head_dim": 32, "rope_parameters": given}}
    rope = tiny.build_model("Qwen3VLForConditionalGeneration", 0, overrides).config.text_config.rope_parameters
    assert rope["mrope_section"] == [2, 3, 3]
    assert tiny._names(overrides, "rope_parameters") and not tiny._names({"text_config": {"head_dim": 32}}, "rope_parameters")


def test_a_config_only_vllm_reads_gets_the_processor_its_checkpoints_ship():
    """Cosmos 3 Omni's config (a model type transformers maps no processor to) is built with
    Qwen3-VL's processor, tokens and rope split, as vLLM's cosmos3.py serves it."""
    import transformers

    from harness.inputs.models import tiny, tiny_mm

    assert tiny_mm.processor_class("cosmos3_omni") is transformers.Qwen3VLProcessor
    assert tiny_mm.named_tokens("cosmos3_omni")["image_token"] == "<|image_pad|>"
    config = tiny.tiny_config(transformers.Cosmos3OmniConfig(), {}, {})
    assert config.vision_config.depth <= 2 and config.text_config.hidden_size == 128
    text = config.text_config
    assert sum(text.rope_parameters["mrope_section"]) * 2 == text.head_dim


def test_synthetic_videos_and_audio_clips_are_deterministic_and_shaped_as_named(tmp_path, monkeypatch):
    import numpy as np

    from harness.inputs import media

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    frames = np.load(media.video_path("gradient-56x28x4"))
    assert frames.shape == (4, 28, 56, 3) and frames.dtype == np.uint8
    assert np.array_equal(np.roll(frames[0], 4, axis=1), frames[1])  # each frame moves 4 px
    clip = np.load(media.audio_path("tone-250ms"))
    assert clip.shape == (media.AUDIO_RATE // 4,) and clip.dtype == np.float32 and np.abs(clip).max() <= 0.5
    assert np.array_equal(media.audio_samples("noise-100ms"), media.audio_samples("noise-100ms"))
    for bad in ("gradient-56x28", "gradient-56x28x0"):
        with pytest.raises(ValueError, match="video name"):
            media.parse_video(bad)
    with pytest.raises(ValueError, match="audio name"):
        media.parse_audio("tone-1s")


def test_an_audio_prompt_reads_through_transformers_own_processor_and_model():
    """Qwen2-Audio: the chat template marks the clip with its bos / audio / eos tokens,
    transformers' processor expands the audio token to the clip's length, and the model
    takes exactly that many audio features."""
    import numpy as np
    import torch
    from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

    from harness.inputs import media

    directory = models.resolve(ArchModel(arch="Qwen2AudioForConditionalGeneration"), sys.executable).directory
    config = json.loads((directory / "config.json").read_text())
    ids = present(chat.template_of(directory)).prompt_ids(
        "What is this sound?", chat.Media(audios=1), 20, load_tokenizer(directory)
    )
    assert ids.count(config["audio_token_index"]) == 1
    processor = AutoProcessor.from_pretrained(directory)
    inputs = processor(
        text=processor.tokenizer.decode(ids),
        audio=[np.load(media.audio_path("tone-500ms"))],
        sampling_rate=media.AUDIO_RATE,
        return_tensors="pt",
    )
    expanded = int((inputs["input_ids"] == config["audio_token_index"]).sum())
    assert 1 < expanded < 100  # half a second: a handful of audio positions, not 30 s of padding
    model = Qwen2AudioForConditionalGeneration.from_pretrained(directory).eval()
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).logits).all()


def test_a_workload_checks_each_media_name_by_its_kind_and_counts_one_entry_per_prompt():
    from harness.inputs.scenarios.schema import WorkloadDef

    ok = WorkloadDef(
        name="w",
        kind="logprobs",
        num_prompts=2,
        images=[None, ["noise-56x84", "gradient-84x56"]],
        videos=["gradient-56x56x4", None],
        audios=[None, "tone-500ms"],
    )
    assert ok.media_of("images", 1) == ["noise-56x84", "gradient-84x56"] and ok.media_of("images", 0) == []
    assert ok.media_of("videos", 0) == ["gradient-56x56x4"] and ok.media_of("audios", 1) == ["tone-500ms"]
    bad_media: list[tuple[dict[str, Any], str]] = [
        ({"videos": ["gradient-56x56", None]}, "video name"),
        ({"audios": ["noise-56x84", None]}, "audio name"),
        ({"images": ["tone-500ms", None]}, "image name"),
        ({"audios": ["tone-500ms"]}, "audios has 1 entries"),
    ]
    for bad, said in bad_media:
        with pytest.raises(ValueError, match=said):
            WorkloadDef(name="w", kind="logprobs", num_prompts=2, **bad)


def test_a_chat_template_mark_must_be_made_of_special_tokens(llava):
    """A mark spelled in plain BPE pieces would reach the engines as text: the builder refuses it."""
    from transformers import AutoTokenizer

    from harness.inputs.models import tiny_mm

    tokenizer = AutoTokenizer.from_pretrained(llava)
    tiny_mm.check_marks({"image": "<image>"}, tokenizer, "llava")
    with pytest.raises(LookupError, match="not made of the tokenizer's special tokens"):
        tiny_mm.check_marks({"image": "<|begin_of_image|><image>"}, tokenizer, "llava")


def test_a_tiny_aria_projects_the_patches_its_processor_makes():
    """Aria's projector keys its queries by patch count, published for 14-pixel patches; the
    tiny tower's patches are larger, and vLLM's warm-up crashed on a count the table lacked
    ('Number of patches 900 not found in patch_to_query_dict'). transformers' own model, fed
    what its own processor makes of an image, runs the same lookup."""
    import torch
    import transformers

    directory = models.resolve(ArchModel(arch="AriaForConditionalGeneration"), sys.executable).directory
    processor = transformers.AutoProcessor.from_pretrained(directory)
    model = transformers.AutoModelForImageTextToText.from_pretrained(directory).eval()
    config = model.config
    patch = config.vision_config.patch_size
    assert set(config.projector_patch_to_query_dict) == {(490 // patch) ** 2, (980 // patch) ** 2}
    inputs = processor(
        text=[f"<|fim_prefix|>{processor.image_token}<|fim_suffix|> hello"], images=[_image()], return_tensors="pt"
    )
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape[1] == inputs["input_ids"].shape[1] and torch.isfinite(logits).all()
    # as many image tokens as vLLM counts for an image (aria.py: the table's largest query count)
    image_tokens = int((inputs["input_ids"] == processor.tokenizer.convert_tokens_to_ids(processor.image_token)).sum())
    assert image_tokens == max(config.projector_patch_to_query_dict.values())
