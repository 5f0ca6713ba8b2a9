"""Workloads: what every scenario of a suite asks its engine to compute.

The harness tokenizes here, once, so every engine (and the golden) sees the very
same token ids, and the engine side needs no tokenizer. The resolved workloads are
hashed into the workload checksum that goldens are keyed on (golden.workload_checksum).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.contract.roots import DATA_DIR
from harness.contract.runbrief import MEDIA
from harness.inputs import chat
from harness.inputs.images import image_path
from harness.inputs.media import audio_path, video_path
from harness.inputs.scenarios.schema import WorkloadDef

# every zoo tokenizer puts <s> first (zoo.SPECIAL_TOKENS)
BOS_ID = 0
EOS_ID = 1
MEDIA_FILES = {"images": image_path, "videos": video_path, "audios": audio_path}  # name -> file in the cache
# where an image goes in a prompt text (Geo3K's own marker)
IMAGE_MARK = "<image>"


class WorkloadError(ValueError):
    """A workload this model cannot be given (a scenario file's problem, not the harness's)."""


def prompt_texts(prompts: str | list[str], count: int) -> list[str]:
    if isinstance(prompts, list):
        return prompts[:count]
    if prompts == "gsm8k-test":
        texts = []
        with open(DATA_DIR / "gsm8k" / "test.jsonl") as f:
            for line in f:
                texts.append(json.loads(line)["question"])
                if len(texts) == count:
                    break
        return texts
    raise WorkloadError(f"unknown prompt set '{prompts}' (known: gsm8k-test, or a list of strings)")


def tokenize(workloads: list[WorkloadDef], model_dir: Path, tokenizer) -> list[dict]:
    """Workload dicts of the run-brief contract (harness/contract/runbrief.py), with token ids
    of the model's `tokenizer` (zoo.load_tokenizer). A checkpoint with a chat template (a
    multimodal model's processor) has its prompts written by that template; the others
    are BOS + the text."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    template = chat.template_of(model_dir)
    resolved = []
    for w in workloads:
        texts = prompt_texts(w.prompts, w.num_prompts)
        item: dict = {"name": w.name, "kind": w.kind, "top_k": w.top_k}
        prompts = _text_prompts(w, texts, tokenizer, config) if template is None else _chat_prompts(w, texts, tokenizer, template)
        # later passes repeat the first, media and all
        item.update({field: entries * w.passes for field, entries in prompts.items()})
        if w.kind == "greedy":
            item["max_new_tokens"] = w.max_new_tokens
        if w.capture_hidden:
            item["capture_hidden"] = True
        if w.record_modules:  # only when set: a golden's workload checksum stays as it was
            item["record_modules"] = True
        resolved.append(item)
    return resolved


def _text_prompts(w: WorkloadDef, texts: list[str], tokenizer, config: dict) -> dict:
    """BOS + each text, an image's placeholder after BOS where a prompt has an image."""
    if w.videos or w.audios:
        raise WorkloadError(
            f"workload '{w.name}': videos and audios need a model with a chat template "
            "(a multimodal checkpoint built with its processor: model: {arch: ...})"
        )
    prefix = shared_prefix_ids(w.shared_prefix, tokenizer)
    ids = [([BOS_ID] + prefix + tokenizer.encode(t).ids)[: w.max_prompt_tokens] for t in texts]
    if "image_token_id" in config:
        _refuse_placeholder_in_text(ids, config["image_token_id"], w.name)
    if not w.images:
        return {"prompts": ids}
    prompts, images = _with_images(ids, w.images, config, w.name)
    return {"prompts": prompts, "images": images}


def shared_prefix_ids(count: int, tokenizer) -> list[int]:
    """`count` tokens of one fixed passage (the last GSM8K test questions, which no
    workload's first prompts reach), the start every prompt of a `shared_prefix` workload shares."""
    if not count:
        return []
    with open(DATA_DIR / "gsm8k" / "test.jsonl") as f:
        passage = " ".join(json.loads(line)["question"] for line in f.readlines()[-8:])
    ids = tokenizer.encode(passage).ids
    if len(ids) < count:
        raise WorkloadError(f"shared_prefix={count} is longer than the shared passage ({len(ids)} tokens)")
    return ids[:count]


def with_shared_passage(texts: list[str], count: int, tokenizer) -> list[str]:
    """For a chat template, which writes the start of every prompt: each text led by the
    same passage of `count` tokens, so every prompt shares the template's start and the
    passage (at least `count` tokens; the last may merge with the text's first word)."""
    if not count:
        return texts
    passage = tokenizer.decode(shared_prefix_ids(count, tokenizer))
    return [f"{passage} {t}" for t in texts]


def _chat_prompts(w: WorkloadDef, texts: list[str], tokenizer, template: chat.ChatTemplate) -> dict:
    """Each prompt as the checkpoint's chat template writes it, and its media files."""
    texts = with_shared_passage(texts, w.shared_prefix, tokenizer)
    counts = [chat.Media(*(len(w.media_of(f, i)) for f in MEDIA)) for i in range(len(texts))]
    fields = {
        f: [[str(path_of(n)) for n in w.media_of(f, i)] or None for i in range(len(texts))]
        for f, path_of in MEDIA_FILES.items()
        if getattr(w, f)
    }
    return {
        "prompts": [template.prompt_ids(t, counts[i], w.max_prompt_tokens - 1, tokenizer) for i, t in enumerate(texts)],
        **fields,
    }


def encode_text(text: str, tokenizer, config: dict) -> list[int]:
    """BOS + the ids of `text`, each IMAGE_MARK replaced by the model's image placeholder
    ids (one image per mark). Evals and the training script both encode through here, so
    a trained model sees at test time exactly the layout it was trained on."""
    pieces = text.split(IMAGE_MARK)
    if len(pieces) > 1 and "image_token_id" not in config:
        raise WorkloadError(f"prompt has {IMAGE_MARK} but model_type '{config.get('model_type')}' has no vision encoder")
    ids = [BOS_ID]
    for i, piece in enumerate(pieces):
        if i:
            ids += _placeholder(config)
        if piece:
            piece_ids = tokenizer.encode(piece).ids
            if "image_token_id" in config and config["image_token_id"] in piece_ids:
                raise WorkloadError(f"text {piece[:40]!r} tokenizes to the image placeholder id {config['image_token_id']}")
            ids += piece_ids
    return ids


def _refuse_placeholder_in_text(prompts: list[list[int]], token: int, workload: str) -> None:
    for i, p in enumerate(prompts):
        if token in p:
            raise WorkloadError(
                f"workload '{workload}': text of prompt {i} tokenizes to the image placeholder id {token}; pick other prompts"
            )


def _placeholder(config: dict) -> list[int]:
    """The tokens that stand for one image right after BOS. Models with vision start/end
    tokens (Qwen-VL) take the unexpanded form (start, one image pad, end) and each engine
    expands it to the image's feature size, as vLLM does with token prompts; models
    without them (the reference engine's llama-vl) take one placeholder per patch."""
    if "vision_start_token_id" in config:
        return [config["vision_start_token_id"], config["image_token_id"], config["vision_end_token_id"]]
    patches = (config["vision_image_size"] // config["vision_patch_size"]) ** 2
    return [config["image_token_id"]] * patches


def _with_images(prompts: list[list[int]], names: list, config: dict, workload: str) -> tuple[list[list[int]], list]:
    """Prompts with the model's image placeholder after BOS where a prompt has an image,
    and the PNG path per prompt (the run-brief contract)."""
    if "image_token_id" not in config:
        raise WorkloadError(f"workload '{workload}' has images but model_type '{config.get('model_type')}' has no vision encoder")
    placeholder = _placeholder(config)
    out_prompts, paths = [], []
    for ids, name in zip(prompts, names):
        if isinstance(name, list):
            raise WorkloadError(
                f"workload '{workload}': a prompt with several images needs a model with a chat template "
                "(a multimodal checkpoint built with its processor: model: {arch: ...})"
            )
        out_prompts.append(ids[:1] + placeholder + ids[1:] if name else ids)
        paths.append(str(image_path(name)) if name else None)
    return out_prompts, paths
