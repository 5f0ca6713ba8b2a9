"""The multimodal half of the tiny-checkpoint builder (harness/inputs/models/tiny.py).

A `*ForConditionalGeneration` checkpoint is more than weights: vLLM and transformers
both read the model's processor (image processor, video processor or audio feature
extractor) and expand a prompt's placeholder tokens by it, so a tiny model needs a
processor whose sizes agree with its shrunk towers, a tokenizer holding every special
token the config names, and a chat template that says where an image goes. This module
builds those, generically where the library allows and by one entry per family (a
Family in FAMILIES) where it does not: the token strings a family's processor reads from
its tokenizer, its prompt marks, its rope split, the fixes its published layout needs.

Like tiny.py it is run by the engine's interpreter and imports only the standard
library, torch, transformers and tokenizers, and must write the same bytes in any
interpreter with the same versions of those.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

TOWERS = ("vision_config", "audio_config")
# Every width of a tower is the text width (tiny.SHRINK_SIZES' hidden_size), so the
# projector between them needs no per-family rule.
TOWER_SIZES = {
    "embed_dim": 128,
    "out_hidden_size": 128,
    "projection_dim": 128,
    "d_model": 128,
    "encoder_ffn_dim": 256,
    "output_dim": 128,
    "vision_output_dim": 128,
    "projector_input_dim": 128,
    "projector_output_dim": 128,
}
# The projector's own widths, in the top config (Command A Vision's alignment MLP)
PROJECTOR_SIZES = {"alignment_intermediate_size": 256, "projector_hidden_size": 128, "projection_dim": 128}
TOWER_COUNTS = {"encoder_layers": 2, "encoder_attention_heads": 4, "num_mel_bins": 128}
# a fixed-size vision tower sees a 4x4 grid of patches
PATCHES_PER_SIDE = 4
# A tower's layer list whose point is that only some layers are special: the last one
# keeps its kind, the others keep the common kind (Qwen2.5-VL: window attention).
LAYER_INDEXES = {"fullatt_block_indexes": lambda depth: [depth - 1]}

MODALITIES = ("image", "video", "audio")
# the config field that holds a named token's id: image_token -> image_token_id / _index
ID_SUFFIXES = ("_id", "_index")


@dataclasses.dataclass(frozen=True)
class Family:
    """What the generic builder cannot learn from transformers about one multimodal family
    (one model_type), all in one entry of FAMILIES; every fact is empty where the family
    needs none. Why a family needs a fact is said beside it, in its entry."""

    # The special tokens its processor reads from its tokenizer (tokenizer.boi_token and the
    # like) and that its config names by id (boi_token_index): the real strings, so vLLM's
    # processors, which match some of them by text, find them.
    named_tokens: dict[str, str] = dataclasses.field(default_factory=dict)
    # Plain (not special) tokens its vLLM processor looks up by text in the vocabulary
    added_tokens: list[str] = dataclasses.field(default_factory=list)
    # tokenizer_config.json fields its vLLM processor insists on
    tokenizer_fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Its multimodal rope as its published config.json has it (for a full-size head; fit_mrope)
    mrope: dict[str, Any] = dataclasses.field(default_factory=dict)
    # What its chat template writes for an image / video / audio clip where that is more than
    # the processor's own token (vLLM's get_placeholder_str says the same); "" where the
    # processor inserts the image tokens itself, before the text
    prompt_marks: dict[str, str] = dataclasses.field(default_factory=dict)
    # A processor part's field that the generic sizing would get wrong -> the vision config
    # field it follows
    part_fields: dict[str, str] = dataclasses.field(default_factory=dict)
    # A processor part's values where its published processor differs from the part's class defaults
    part_values: dict[str, Any] = dataclasses.field(default_factory=dict)
    # A sub-config whose default is of another model type than its checkpoints' -> their model type
    sub_config_types: dict[str, str] = dataclasses.field(default_factory=dict)
    # Where its vLLM loader reads its weights when not beside config.json: the weights are
    # copied there as well
    weight_folder: str = ""
    # config.json fields its published checkpoints write as one int where transformers saves
    # [height, width]: sub-config -> its field names
    square_as_int: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Config fields holding a token's id under a name of their own -> the token's text, resolved
    # by the tokenizer once it is written (a newline is a plain token)
    config_token_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    # Renames transformers applies on load to every matching weight of the family and undoes on
    # save to every one of them, also to those it did not rename: (pattern, published name)
    saved_renames: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # Its projector's queries per image side in pixels (the sides its processor resizes every
    # image to); the config keys them by patch count, so they are recounted for the tiny patch
    # size: the published counts are of 14-pixel patches, and vLLM's warm-up then looked up a
    # patch count the table did not have (a crash blamed on the engine for the checkpoint's fault)
    patch_queries: dict[int, int] = dataclasses.field(default_factory=dict)
    # Weights transformers' model makes and its published checkpoints (and vLLM's loader) have
    # not (patterns): left out of the saved checkpoint
    unpublished: tuple[str, ...] = ()
    # The model type whose processor its checkpoints ship, where transformers maps none to its
    # own model type (a config only vLLM's model reads: Cosmos 3 Omni's is Qwen3-VL's)
    processor_of: str = ""


# Pieces several families share
_QWEN_VL = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}
_QWEN_MARKS = {"image": "<|vision_start|><|image_pad|><|vision_end|>", "video": "<|vision_start|><|video_pad|><|vision_end|>"}
_QWEN2_MROPE: dict[str, Any] = {"mrope_section": [16, 24, 24]}
_QWEN3_MROPE: dict[str, Any] = {"mrope_section": [24, 20, 20], "mrope_interleaved": True}
_QWEN35_MROPE: dict[str, Any] = {"mrope_section": [11, 11, 10], "mrope_interleaved": True, "partial_rotary_factor": 0.25}
_GLM = {
    "image_token": "<|image|>",
    "video_token": "<|video|>",
    "image_start_token": "<|begin_of_image|>",
    "image_end_token": "<|end_of_image|>",
    "video_start_token": "<|begin_of_video|>",
    "video_end_token": "<|end_of_video|>",
}
_GLM_MARKS = {"image": "<|begin_of_image|><|image|><|end_of_image|>", "video": "<|begin_of_video|><|video|><|end_of_video|>"}
# Idefics3 / SmolVLM: a tile's position is a token of its own (up to 6 x 6 tiles)
_IDEFICS3 = Family(
    named_tokens={
        "fake_image_token": "<fake_token_around_image>",
        "image_token": "<image>",
        "video_token": "<video>",
        "end_of_utterance_token": "<end_of_utterance>",
        "global_image_token": "<global-img>",
        **{f"row_{r}_col_{c}_token": f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)},
    }
)
# MiniCPM-V 4.6 / 4.7: its processor reads all of them from the tokenizer; vLLM's spells them out
_MINICPMV = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "image_start_token": "<image>",
    "image_end_token": "</image>",
    "slice_start_token": "<slice>",
    "slice_end_token": "</slice>",
    "image_id_start_token": "<image_id>",
    "image_id_end_token": "</image_id>",
}
_QWEN2_VL = Family(named_tokens=_QWEN_VL, prompt_marks=_QWEN_MARKS, mrope=_QWEN2_MROPE)
_QWEN3_VL = Family(named_tokens=_QWEN_VL, prompt_marks=_QWEN_MARKS, mrope=_QWEN3_MROPE)
_QWEN3_5 = Family(named_tokens=_QWEN_VL, prompt_marks=_QWEN_MARKS, mrope=_QWEN35_MROPE)
_GLM4V = Family(
    named_tokens=_GLM,
    prompt_marks=_GLM_MARKS,
    # GLM-4.1V / 4.5V rotate half of each head (vLLM assumes it; their config.json files say it)
    mrope={"mrope_section": [8, 12, 12], "partial_rotary_factor": 0.5},
)

# Every multimodal family that needs more than the generic builder, by model_type: adding
# a family is adding its entry here.
FAMILIES: dict[str, Family] = {
    "qwen2_vl": _QWEN2_VL,
    "qwen2_5_vl": _QWEN2_VL,
    "qwen3_vl": _QWEN3_VL,
    "qwen3_vl_moe": _QWEN3_VL,
    "qwen3_5": _QWEN3_5,
    "qwen3_5_moe": _QWEN3_5,
    # vLLM's Cosmos 3 Omni (cosmos3.py) runs its understanding tower as Qwen3-VL, with Qwen3-VL's
    # processor; its weights are read only from `[tv]*er/` (allow_patterns_overrides), as Cosmos 3 Edge's
    "cosmos3_omni": dataclasses.replace(_QWEN3_VL, processor_of="qwen3_vl", weight_folder="transformer"),
    "cosmos3_edge": Family(
        named_tokens=_QWEN_VL,
        prompt_marks=_QWEN_MARKS,
        mrope=_QWEN3_MROPE,
        # its transformers model refuses image inputs without mm_token_type_ids, which its
        # processor, unlike Qwen2-VL's, returns only when asked; a processor's text defaults
        # are read from its tokenizer's init kwargs (processing_utils.py _merge_kwargs)
        tokenizer_fields={"return_mm_token_type_ids": True},
        # published in a Diffusers layout, and vLLM globs only `[tv]*er/*.safetensors`
        # (cosmos3_edge.py allow_patterns_overrides)
        weight_folder="transformer",
        # transformers' `.mlp.up_proj.` -> `.mlp.fc1.` is meant for the text layers, and its
        # SigLIP2 tower, published (and read by vLLM) as `fc1` / `fc2`, is saved as up / down_proj
        saved_renames=[
            (r"^(model\.visual\..*\.mlp\.)up_proj\.", r"\1fc1."),
            (r"^(model\.visual\..*\.mlp\.)down_proj\.", r"\1fc2."),
        ],
    ),
    "minicpmv4_6": Family(named_tokens=_MINICPMV),
    "minicpmv4_7": Family(
        named_tokens=_MINICPMV,
        mrope=_QWEN35_MROPE,
        # its canvas rope markers, which its transformers model reads from config.json and vLLM too
        config_token_ids={
            "image_start_id": "<image>",
            "image_end_id": "</image>",
            "slice_start_id": "<slice>",
            "slice_end_id": "</slice>",
            "newline_id": "\n",
        },
    ),
    "exaone4_5": Family(
        named_tokens={
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_start_token": "<vision>",
            "vision_end_token": "</vision>",
        },
        prompt_marks={"image": "<vision><|image_pad|></vision>", "video": "<vision><|video_pad|></vision>"},
    ),
    "paddleocr_vl": Family(
        named_tokens={
            "image_token": "<|IMAGE_PLACEHOLDER|>",
            "image_start_token": "<|IMAGE_START|>",
            "image_end_token": "<|IMAGE_END|>",
        },
        prompt_marks={"image": "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"},
        mrope=_QWEN2_MROPE,
    ),
    "gemma3": Family(
        named_tokens={"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"},
        # Gemma's SentencePiece vocabulary has runs of newlines as single tokens, and vLLM's
        # Gemma 3 processor merges the newlines around an image into them (gemma3_mm.py)
        added_tokens=["\n", "\n\n", "\n\n\n", "\n\n\n\n"],
        prompt_marks={"image": "<start_of_image>"},
    ),
    "paligemma": Family(
        named_tokens={"image_token": "<image>"},
        added_tokens=["\n"],
        tokenizer_fields={"add_bos_token": True},
        # its processor inserts the image tokens itself, before the text
        prompt_marks={"image": ""},
    ),
    "qwen2_audio": Family(
        named_tokens={"audio_token": "<|AUDIO|>", "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"},
        prompt_marks={"audio": "<|audio_bos|><|AUDIO|><|audio_eos|>"},
    ),  # vLLM adds "Audio 1: " before it, as text
    "qwen3_asr": Family(
        named_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"},
        prompt_marks={"audio": "<|audio_start|><|audio_pad|><|audio_end|>"},
    ),  # vLLM's get_placeholder_str
    "glmasr": Family(
        named_tokens={"audio_token": "<|pad|>", "audio_bos_token": "<|begin_of_audio|>", "audio_eos_token": "<|end_of_audio|>"},
        prompt_marks={"audio": "<|begin_of_audio|><|pad|><|end_of_audio|>"},
    ),
    "glm4v": _GLM4V,
    "glm4v_moe": _GLM4V,
    # GLM-OCR: a GLM-4V tower and text model whose processor is GLM-4V's (vLLM's glm_ocr.py
    # serves it with Glm4vProcessingInfo); transformers 5.19 maps no processor to glm_ocr
    "glm_ocr": dataclasses.replace(_GLM4V, processor_of="glm4v"),
    "glm5_next": Family(named_tokens=_GLM, prompt_marks=_GLM_MARKS),
    "idefics3": _IDEFICS3,
    "smolvlm": _IDEFICS3,
    "lfm2_vl": Family(
        named_tokens={
            "image_token": "<image>",
            "image_start_token": "<|image_start|>",
            "image_end_token": "<|image_end|>",
            "image_thumbnail_token": "<|img_thumbnail|>",
            **{f"img_row_{r}_col_{c}_token": f"<|img_row_{r}_col_{c}|>" for r in range(1, 7) for c in range(1, 7)},
        },
        # transformers builds its SigLIP2 tower with the pooling head unless the config says
        # vision_use_head (undeclared; published config.json files say false, and vLLM's
        # Siglip2Model has no head: "no module or parameter named 'vision_model.head'")
        unpublished=(r"\.vision_model\.head\.",),
    ),
    "aria": Family(
        named_tokens={"image_token": "<|img|>", "fim_prefix_token": "<|fim_prefix|>", "fim_suffix_token": "<|fim_suffix|>"},
        prompt_marks={"image": "<|fim_prefix|><|img|><|fim_suffix|>"},
        # its projector's queries per image (AriaProcessor's size_conversion, published 128 and
        # 256): a quarter of them, so a prompt with two images (vLLM counts the larger number for
        # every image, aria.py get_num_image_tokens) stays within the harness's 512-token length
        patch_queries={490: 32, 980: 64},
    ),
    "cohere2_vision": Family(
        named_tokens={
            "image_token": "<|IMG_PATCH|>",
            "boi_token": "<|START_OF_IMG|>",
            "eoi_token": "<|END_OF_IMG|>",
            "img_line_break_token": "<|IMG_LINE_BREAK|>",
        },
        # its image processor's `patch_size` is the side of a tile's token grid after the
        # tower's patches and the projector's downsampling (published: 512 / 16 / 2 = 16, 256
        # tokens a tile), not the tower's patch: the tiny tile's 64 / 16 / 2 = 2. And it tiles an
        # image into up to 12 crops beside a thumbnail: at most 2, so two images fit in 512 tokens
        part_values={"max_patches": 2, "patch_size": 2},
    ),
    "step3p7": Family(
        # its processor and vLLM's (transformers_utils/processors/step3_vl.py) spell these out
        named_tokens={
            "image_token": "<im_patch>",
            "image_start_token": "<im_start>",
            "image_end_token": "<im_end>",
            "patch_start_token": "<patch_start>",
            "patch_end_token": "<patch_end>",
            "patch_newline_token": "<patch_newline>",
        },
        # its `patch_size` is the side of its local crops (504 pixels = 36 ViT patches, beside a
        # 728-pixel global view), not the ViT's patch; the tiny crops are as large as the tiny global view
        part_fields={"patch_size": "image_size"},
    ),
    "muse_glimmer": Family(
        named_tokens={  # vLLM's processor's
            "image_token": "<|patch|>",
            "image_start_token": "<|image_start|>",
            "image_end_token": "<|image_end|>",
            "video_token": "<|video|>",
            "video_sep_token": "<|vid_frame_separator|>",
            "video_start_token": "<|vid_start|>",
            "video_end_token": "<|vid_end|>",
            "image_sentinel_token": "<|image|>",
        }
    ),
    "minimax_m3_vl": Family(
        named_tokens={
            "image_token": "]<]image[>[",
            "video_token": "]<]video[>[",
            "vision_start_token": "]<]start of image[>[",
            "vision_end_token": "]<]end of image[>[",
        },
        # transformers' `.block_sparse_moe.` -> `.mlp.` is meant for the MoE layers, and its vision
        # tower's `mlp.fc1` is saved as `block_sparse_moe.fc1`
        saved_renames=[(r"^(vision_tower\..*\.)block_sparse_moe\.", r"\1mlp.")],
    ),
    "qianfan_ocr": Family(
        named_tokens={
            "start_image_token": "<img>",
            "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>",
            "image_token": "<IMG_CONTEXT>",
            "image_placeholder_token": "<image>",
        },
        prompt_marks={"image": "<image>"},  # its processor's image_placeholder_token
        # its GotOcr2 image processor defaults to CLIP's normalization, its checkpoints (and
        # vLLM's InternVL processor, processors/internvl.py) use ImageNet's
        part_values={"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]},
        # its tower's sizes, which vLLM reads through its own config class
        # (transformers_utils/configs/qianfan_ocr.py) and divides as ints (qianfan_ocr.py:50)
        square_as_int={"vision_config": ("image_size", "patch_size")},
        # transformers' InternViT `encoder.layers.` -> `layers.`, undone on its Qwen3 decoder too
        saved_renames=[(r"^(language_model\.model\.)encoder\.layers\.", r"\1layers.")],
    ),
    "cohere_compass": Family(
        named_tokens={
            "image_token": "<|IMAGE_PAD|>",
            "video_token": "<|VIDEO_PAD|>",
            "vision_start_token": "<|VISION_START|>",
            "vision_end_token": "<|VISION_END|>",
        },
        prompt_marks={"image": "<|VISION_START|><|IMAGE_PAD|><|VISION_END|>"},
    ),
    "internvl": Family(
        named_tokens={
            "start_image_token": "<img>",
            "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>",
            "image_token": "<IMG_CONTEXT>",
            "video_token": "<video>",
        }
    ),
    # BLIP-2: its processor puts the Q-Former's query tokens before the text itself, adding
    # `<image>` to the tokenizer unless the tokenizer names it (and then, in transformers 5.19,
    # fails on the name: processing_blip_2.py reads `.content` of the string); so a plain token of
    # the vocabulary, which the config names by id (image_token_index, OPT's 50265 by default)
    "blip-2": Family(added_tokens=["<image>"], config_token_ids={"image_token_index": "<image>"}, prompt_marks={"image": ""}),
    # HunYuan-VL (vLLM serves it through its Transformers backend, with transformers' own
    # processor): the processor reads these from its tokenizer and the config names them by id;
    # the published tokenizer's spellings are not known here, and no code reads them by text
    "hunyuan_vl": Family(
        named_tokens={"image_token": "<hy_image>", "image_start_token": "<hy_image_start>", "image_end_token": "<hy_image_end>"},
        prompt_marks={"image": "<hy_image_start><hy_image><hy_image_end>"},
        config_token_ids={"im_start_id": "<hy_image_start>", "im_end_id": "<hy_image_end>", "im_newline_id": "\n"},
    ),
    # vLLM's Inkling renderer (renderers/inkling.py:81) refuses a tokenizer without its chat
    # tokens (renderers/inkling_encoding.py SPECIAL_TOKEN_SPELLINGS), which it finds by text
    "inkling_mm_model": Family(
        added_tokens=[
            "<|message_user|>",
            "<|message_model|>",
            "<|message_system|>",
            "<|message_tool|>",
            "<|content_text|>",
            "<|content_model_end_sampling|>",
            "<|content_thinking|>",
            "<|content_xml|>",
            "<|content_invoke_tool_json|>",
            "<|end_message|>",
            "<|audio_end|>",
        ]
    ),
    # its config class with no arguments makes the text config a LlamaConfig
    # (configuration_granite4_vision.py), whose model lacks Granite's multipliers
    "granite4_vision": Family(sub_config_types={"text_config": "granite4_vision_text"}),
}


def family(model_type: str) -> Family:
    """The family's entry; a model type without one gets the empty Family (nothing beyond
    the generic builder)."""
    return FAMILIES[model_type] if model_type in FAMILIES else Family()


def default_sub_configs(model_type: str) -> dict:
    """Config class arguments that give a family's sub-configs their published model type."""
    return {name: {"model_type": kind} for name, kind in family(model_type).sub_config_types.items()}


def is_multimodal(config) -> bool:
    return any(getattr(config, tower, None) is not None for tower in TOWERS)


def shrink_towers(config) -> None:
    """The tower fields tiny.shrink does not know, made small in every tower."""
    for tower in TOWERS:
        sub = getattr(config, tower, None)
        if sub is None:
            continue
        for field, value in TOWER_SIZES.items():
            _set_int(sub, field, value)
        for field, value in TOWER_COUNTS.items():
            current = getattr(sub, field, None)
            if isinstance(current, int) and current > value:
                _set_int(sub, field, value)
        _fit_layer_indexes(sub)
        patch = _side(getattr(sub, "patch_size", None))
        image_size = getattr(sub, "image_size", None)
        if _side(image_size) is not None and patch is not None:
            side = patch * PATCHES_PER_SIDE  # InternVL writes both as [height, width]
            sub.image_size = [side, side] if isinstance(image_size, (list, tuple)) else side
    for field, value in PROJECTOR_SIZES.items():
        _set_int(config, field, value)
    fit_family(config)


def _fit_layer_indexes(tower) -> None:
    """A list of the tower's layers (Qwen3-VL's deepstack_visual_indexes, Qwen2.5-VL's
    fullatt_block_indexes) made to point into the shrunk tower: as many of its last
    layers as the list had entries (at most all of them), or the family's own choice
    (LAYER_INDEXES)."""
    depth = next((getattr(tower, f) for f in ("depth", "num_hidden_layers") if isinstance(getattr(tower, f, None), int)), None)
    if depth is None:
        return
    for field, values in list(vars(tower).items()):
        if not field.endswith(("_indexes", "_indices")) or not isinstance(values, (list, tuple)) or not values:
            continue
        if all(isinstance(v, int) and 0 <= v < depth for v in values):
            continue
        chosen = LAYER_INDEXES.get(field)
        setattr(tower, field, chosen(depth) if chosen else list(range(depth - min(len(values), depth), depth)))


def _side(size) -> int | None:
    """A square size given as an int or as [height, width]."""
    if isinstance(size, (list, tuple)) and len(size) == 2 and size[0] == size[1]:
        size = size[0]
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _set_int(config, field: str, value: int) -> None:
    if isinstance(getattr(config, field, None), int) and not isinstance(getattr(config, field), bool):
        setattr(config, field, value)


def fit_family(config) -> None:
    """Counts a family derives from its tower's size, recomputed for the tiny tower."""
    vision = getattr(config, "vision_config", None)
    patches = PATCHES_PER_SIDE * PATCHES_PER_SIDE
    fit_mrope(config)
    # Gemma 3 pools the patch grid to this many tokens
    if hasattr(config, "mm_tokens_per_image"):
        config.mm_tokens_per_image = patches // 4
    side = _side(getattr(vision, "image_size", None))
    if getattr(config, "image_grid_pinpoints", None) and side is not None:  # LLaVA-NeXT's any-resolution grids
        config.image_grid_pinpoints = grid_pinpoints(side)
    fit_patch_queries(config)
    if hasattr(config, "image_seq_length") and vision is not None:  # LLaVA: one token per patch
        full = getattr(config, "vision_feature_select_strategy", "default") == "full"
        shuffle = getattr(config, "downsample_ratio", None)  # InternVL's pixel shuffle merges patches
        config.image_seq_length = int(patches * shuffle**2) if isinstance(shuffle, float) else patches + (1 if full else 0)


def fit_patch_queries(config) -> None:
    """A projector's queries per patch count (Aria's projector_patch_to_query_dict) for the
    patch counts the tiny tower makes of the images its processor resizes."""
    sides = family(config.model_type).patch_queries
    patch = _side(getattr(getattr(config, "vision_config", None), "patch_size", None))
    if sides and patch and hasattr(config, "projector_patch_to_query_dict"):
        config.projector_patch_to_query_dict = {(side // patch) ** 2: queries for side, queries in sides.items()}
        config.max_value_projector_patch_to_query_dict = max(sides.values())


def fit_mrope(config) -> None:
    """Multimodal rope (Qwen-VL, GLM-4V) splits each head's rotary half into temporal,
    height and width sections. Published config.json files carry the split, which
    transformers' model code otherwise defaults to a full-size head's; the tiny head
    gets the family's split scaled to its own rotary half, written into the config so
    vLLM and transformers read the same one."""
    mrope = family(config.model_type).mrope
    text = getattr(config, "text_config", None)
    if not mrope or text is None:
        return
    rope = dict(getattr(text, "rope_parameters", None) or {})
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    factor = mrope.get("partial_rotary_factor", rope.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", 1.0)))
    half = int(head_dim * factor) // 2
    sections = mrope["mrope_section"]
    scaled = [s * half // sum(sections) for s in sections]
    scaled[0] += half - sum(scaled)
    rope.update({**mrope, "mrope_section": scaled})
    text.rope_parameters = rope


def grid_pinpoints(image_size: int) -> list[list[int]]:
    """LLaVA-NeXT's any-resolution grids for the tiny tower: up to 2 x 2 tiles (the
    published ones go to 6 x 6 tiles of 384 pixels)."""
    return [[image_size * h, image_size * w] for h in (1, 2) for w in (1, 2)]


def named_tokens(model_type: str) -> dict[str, str]:
    """The special tokens of a family's tokenizer, by name: the processor's own defaults
    (its `image_token="<image>"` arguments), then the family's entry (Family.named_tokens)."""
    found = {}
    cls = processor_class(model_type)
    if cls is not None:
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if name.endswith("_token") and isinstance(param.default, str):
                found[name] = param.default
    return {**found, **family(model_type).named_tokens}


def tokenizer_fields(model_type: str) -> dict:
    return dict(family(model_type).tokenizer_fields)


def processor_type(model_type: str) -> str:
    """The model type whose processor a family's checkpoints ship: its own, or Family.processor_of."""
    return family(model_type).processor_of or model_type


def processor_class(model_type: str):
    import transformers
    from transformers.models.auto import processing_auto

    name = processing_auto.PROCESSOR_MAPPING_NAMES.get(processor_type(model_type))
    return getattr(transformers, name, None) if name else None


def added_tokens(model_type: str) -> list[str]:
    return list(family(model_type).added_tokens)


def token_ids(named: dict[str, str], first_id: int) -> dict[str, int]:
    """The id each named token gets: the tokenizer holds them, in order, right after
    its own special tokens (ids from `first_id`)."""
    order = list(dict.fromkeys(named.values()))
    return {name: first_id + order.index(text) for name, text in named.items()}


def set_token_ids(config, ids: dict[str, int]) -> None:
    """Point every config field that names a special token's id at the tokenizer's id:
    `image_token` -> image_token_id or image_token_index, in the config and its text config."""
    for holder in (config, getattr(config, "text_config", None)):
        if holder is None:
            continue
        for name, token_id in ids.items():
            for suffix in ID_SUFFIXES:
                if hasattr(holder, name + suffix):
                    setattr(holder, name + suffix, token_id)


def _class_name(mapping: dict, model_type: str) -> str | None:
    """A processor part's class name from transformers' auto mapping; the PIL backend
    where there is one (vLLM's venv may carry a torchvision without its C++ ops)."""
    found = mapping.get(model_type)
    if isinstance(found, dict):
        found = found.get("pil") or next(iter(found.values()), None)
    if isinstance(found, (tuple, list)):
        found = next((name for name in found if name), None)
    return found


def build_processor(config, tokenizer):
    """The model's own processor class with a tokenizer of the tiny vocabulary and its
    parts sized to the tiny towers."""
    import transformers
    from transformers.models.auto import feature_extraction_auto, image_processing_auto, video_processing_auto

    cls = processor_class(config.model_type)
    if cls is None:
        raise LookupError(f"transformers {transformers.__version__} has no processor for model_type '{config.model_type}'")
    # A model type may have no parts of its own but its processor's family's (qwen3_vl_moe: qwen3_vl's).
    home = cls.__module__.split(".")[-2]
    accepts = inspect.signature(cls.__init__).parameters
    parts = {}
    for part, mapping in (
        ("image_processor", image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES),
        ("video_processor", video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES),
        ("feature_extractor", feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES),
    ):
        part_name = _class_name(mapping, processor_type(config.model_type)) or _class_name(mapping, home)
        if part_name and part in accepts:
            parts[part] = _sized(getattr(transformers, part_name)(), config)
    kwargs = {k: v for k, v in _processor_kwargs(config).items() if k in accepts}
    return cls(tokenizer=tokenizer, **parts, **kwargs)


def _sized(part, config):
    """`part` (an image or video processor, an audio feature extractor) again, with the
    sizes its tower was shrunk to: patch, merge and temporal patch size, a fixed-size
    tower's image size, the audio tower's mel bins."""
    audio = getattr(config, "audio_config", None)
    mels = getattr(audio, "num_mel_bins", None)
    if isinstance(mels, int) and isinstance(getattr(part, "feature_size", None), int) and part.feature_size != mels:
        # Whisper's extractor: as many mel bins as the tower takes
        return type(part)(feature_size=mels)
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return part
    wanted = {
        "patch_size": _side(getattr(vision, "patch_size", None)),
        "merge_size": getattr(vision, "spatial_merge_size", None),
        "temporal_patch_size": getattr(vision, "temporal_patch_size", None),
    }
    kwargs: dict[str, Any] = {k: v for k, v in wanted.items() if isinstance(v, int) and isinstance(getattr(part, k, None), int)}
    for field, source in family(config.model_type).part_fields.items():
        if hasattr(part, field):
            kwargs[field] = _side(getattr(vision, source, None))
    kwargs.update({k: v for k, v in family(config.model_type).part_values.items() if hasattr(part, k)})
    patch = wanted["patch_size"]
    if isinstance(getattr(part, "patch_size", None), dict) and patch:  # Pixtral: {height, width}
        kwargs["patch_size"] = {"height": patch, "width": patch}
    if hasattr(part, "image_seq_length") and _patches(vision):  # PaliGemma's processor reads it here
        kwargs["image_seq_length"] = _patches(vision)
    image_size = _side(getattr(vision, "image_size", None))
    if isinstance(image_size, int) and getattr(part, "image_grid_pinpoints", None):
        kwargs["image_grid_pinpoints"] = grid_pinpoints(image_size)
    if isinstance(image_size, int):
        for field in ("size", "crop_size"):
            current = getattr(part, field, None)
            current = current if isinstance(current, dict) else vars(current) if hasattr(current, "__dict__") else {}
            current = {k: v for k, v in current.items() if v is not None}  # a SizeDict names every edge
            if "height" in current:
                kwargs[field] = {"height": image_size, "width": image_size}
            elif "shortest_edge" in current and "longest_edge" not in current:
                kwargs[field] = {"shortest_edge": image_size}
            elif "longest_edge" in current and "shortest_edge" not in current:  # Idefics3: tiles of image_size
                kwargs[field] = {"longest_edge": 2 * image_size}
        if isinstance(getattr(part, "max_image_size", None), dict) and part.max_image_size.get("longest_edge"):
            kwargs["max_image_size"] = {"longest_edge": image_size}
    return type(part)(**kwargs) if kwargs else part


def _processor_kwargs(config) -> dict:
    """What a processor repeats of its config (LLaVA's patch size and feature strategy,
    Gemma 3's tokens per image): copied from the tiny config so the two agree."""
    vision = getattr(config, "vision_config", None)
    patches = _patches(vision)
    scale = getattr(config, "scale_factor", None)
    found = {
        "patch_size": _side(getattr(vision, "patch_size", None)),
        "vision_feature_select_strategy": getattr(config, "vision_feature_select_strategy", None),
        "spatial_merge_size": getattr(config, "spatial_merge_size", None),  # Mistral 3's patch merger
        "downsample_rate": getattr(config, "downsample_rate", None),  # Granite 4 Vision's Q-Former windows
        "image_seq_length": getattr(config, "mm_tokens_per_image", None) or getattr(config, "image_seq_length", None),
        "num_image_tokens": patches,
        # Idefics3 / SmolVLM: a tile's patches after the pixel shuffle of scale_factor
        "image_seq_len": patches // scale**2 if patches and isinstance(scale, int) else None,
        # a CLIP tower's class token counts in the features (LLaVA's `default` strategy drops it again)
        "num_additional_image_tokens": 1 if getattr(vision, "model_type", "") == "clip_vision_model" else None,
        # BLIP-2's Q-Former queries: the image tokens its processor writes
        "num_query_tokens": getattr(config, "num_query_tokens", None),
        # Aria's queries per resized image side, as its projector was given them (fit_patch_queries)
        "size_conversion": dict(family(config.model_type).patch_queries) or None,
    }
    return {k: v for k, v in found.items() if v is not None}


def _patches(vision) -> int | None:
    """The patch count of a fixed-size tower's image."""
    size, patch = _side(getattr(vision, "image_size", None)), _side(getattr(vision, "patch_size", None))
    return (size // patch) ** 2 if isinstance(size, int) and isinstance(patch, int) else None


def placeholders(model_type: str, processor) -> dict[str, str]:
    """What stands for one image / video / audio clip in a prompt's text, by modality:
    the family's chat template mark (Family.prompt_marks), else the processor's own token.
    A table, not a question to vLLM: every interpreter (vLLM's, the harness's own for
    the transformers cross-check) must write the same bytes. tests/test_vllm_unit.py
    holds the table to vLLM's own get_placeholder_str."""
    own = {m: getattr(processor, f"{m}_token") for m in MODALITIES if isinstance(getattr(processor, f"{m}_token", None), str)}
    return {**own, **family(model_type).prompt_marks}


def check_marks(marks: dict[str, str], tokenizer, model_type: str) -> None:
    """Every mark must be made of the tokenizer's special tokens: a mark spelled out in
    plain BPE pieces would reach the engines as text, and no image would be placed."""
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    for modality, mark in marks.items():
        ids = tokenizer(mark, add_special_tokens=False)["input_ids"]
        if any(i not in special for i in ids):
            raise LookupError(
                f"the {modality} mark {mark!r} of model_type '{model_type}' is not made of the tokenizer's "
                "special tokens: name its tokens in its harness/inputs/models/tiny_mm.py FAMILIES entry (named_tokens)"
            )


def chat_template(marks: dict[str, str]) -> str:
    """A chat template that writes each content item of the user's messages: text as
    it is, an image / video / audio item as its placeholder. BOS first, no role markers
    (the tiny vocabulary has none)."""
    branches = "".join(f"{{% elif item['type'] == '{m}' %}}{text}" for m, text in sorted(marks.items()))
    return (
        "{{ bos_token }}{% for message in messages %}{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}"
        f"{branches}{{% endif %}}{{% endfor %}}{{% endif %}}{{% endfor %}}"
    )


def write_processor(config, tokenizer, out: Path) -> None:
    """The processor and its chat template, beside the weights (preprocessor_config.json,
    processor_config.json, chat_template.jinja)."""
    processor = build_processor(config, tokenizer)
    marks = placeholders(config.model_type, processor)
    check_marks(marks, tokenizer, config.model_type)
    processor.chat_template = chat_template(marks)  # its marks come from the processor itself
    processor.save_pretrained(out)
    write_config_token_ids(config.model_type, tokenizer, out)


def edit_config_json(out: Path, edit) -> None:
    """config.json of the checkpoint in `out`, read, changed in place by `edit(dict)`,
    written back in the builder's one layout (sorted keys, 2-space indent)."""
    import json

    path = out / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_config_token_ids(model_type: str, tokenizer, out: Path) -> None:
    """The ids the family's config_token_ids names, written into config.json."""
    fields = family(model_type).config_token_ids
    if not fields:
        return

    def set_ids(config: dict) -> None:
        for field, text in fields.items():
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise LookupError(f"{text!r} ({field}) is not one token of the tiny vocabulary")
            config[field] = ids[0]

    edit_config_json(out, set_ids)


def write_hub_config(model_type: str, out: Path) -> None:
    """config.json with a family's square sizes as published (Family.square_as_int)."""
    fields = family(model_type).square_as_int
    if not fields:
        return

    def square_as_int(config: dict) -> None:
        for sub, names in fields.items():
            for name in names:
                side = _side(config[sub].get(name))
                if side is not None:
                    config[sub][name] = side

    edit_config_json(out, square_as_int)


def write_weight_folder(model_type: str, out: Path) -> None:
    """A copy of the weights where the family's vLLM loader looks for them (Family.weight_folder)."""
    folder = family(model_type).weight_folder
    if folder:
        import shutil

        (out / folder).mkdir(exist_ok=True)
        shutil.copyfile(out / "model.safetensors", out / folder / "model.safetensors")


def write_hub_layout(model, out: Path) -> None:
    """Weight names and layouts as checkpoints on the hub have them. transformers 5
    converts published checkpoints on load and does not undo every conversion on save:
    it drops a wrapper level of some towers (CLIP's and SigLIP's `vision_model.`) and
    puts it back only at the top of a model, so a LLaVA it saves has
    `vision_tower.embeddings` where every published LLaVA, and vLLM's loader, have
    `vision_tower.vision_model.embeddings`; and it transposes fused expert weights
    (Qwen3-VL-MoE's `experts.gate_up_proj`) only when their shape says so, which on
    save it never does; and it saves Qwen2-Audio's decoder one `model.` level too deep;
    and a family's own renames (Family.saved_renames). All are undone here."""
    renames = _dropped_levels(model)
    transposes = _transposed_on_load(model)
    # Qwen2-Audio: its reverse rename doubles a level (`language_model.model.model.layers`)
    doubled = not any(_DOUBLED.search(name) for name in model.state_dict())
    undone = family(model.config.model_type).saved_renames
    unpublished = family(model.config.model_type).unpublished
    if not renames and not transposes and not doubled and not undone and not unpublished:
        return
    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    weights = load_file(path)
    renamed = {}
    for key, tensor in weights.items():
        for pattern, (dim0, dim1) in transposes:
            if re.search(pattern, key):
                if tensor.shape[dim0] == tensor.shape[dim1]:
                    raise LookupError(
                        f"{key} is square {tuple(tensor.shape)}: its layout cannot be told apart from "
                        "transformers' own; give the experts an intermediate size with 2 x it != hidden_size"
                    )
                tensor = tensor.transpose(dim0, dim1).contiguous()
        if doubled:
            key = _DOUBLED.sub(r"\1model.", key)
        for tower_keys, level in renames:
            prefix = _saved_prefix(key, tower_keys)
            if prefix is not None:
                key = f"{prefix}{level}.{key[len(prefix) :]}"
                break
        for pattern, published in undone:
            key = re.sub(pattern, published, key)
        if not any(re.search(pattern, key) for pattern in unpublished):  # matched on the published name
            renamed[key] = tensor
    save_file(renamed, path, metadata={"format": "pt"})


_DOUBLED = re.compile(r"(^|\.)model\.model\.")  # two `model` levels in a row, as whole names


def _transposed_on_load(model) -> list[tuple[str, tuple[int, int]]]:
    """(weight name pattern, dims) of the shape-checked transposes transformers applies
    when it loads a published checkpoint of this model type."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    found = []
    for rule in get_checkpoint_conversion_mapping(model.config.model_type) or []:
        for op in getattr(rule, "operations", None) or []:
            if type(op).__name__ == "Transpose" and getattr(op, "check_dims", False):
                found += [(pattern, (op.dim0, op.dim1)) for pattern in rule.source_patterns]
    return found


def _dropped_levels(model) -> list[tuple[set[str], str]]:
    """(the tower's own weight names, the level transformers drops) of each nested tower."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    found = []
    for name, module in model.named_modules():
        if not name:
            continue
        for rule in get_checkpoint_conversion_mapping(type(module).__name__) or []:
            level = getattr(rule, "prefix_to_remove", None)
            if level and not getattr(rule, "model_prefix", ""):
                found.append((set(module.state_dict()), level))
    return found


def _saved_prefix(key: str, tower_keys: set[str]) -> str | None:
    for own in tower_keys:
        if key.endswith("." + own):
            return key[: -len(own)]
    return None
