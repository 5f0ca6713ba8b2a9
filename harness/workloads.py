"""Workloads: what every scenario of a suite asks its engine to compute.

The harness tokenizes here, once, so every engine (and the golden) sees the very
same token ids, and the engine side needs no tokenizer. The resolved workloads are
hashed into the workload checksum that goldens are keyed on.

Images (vision models): the harness writes each image as a PNG of seeded pixels and
puts the model's placeholder tokens (one per patch) right after BOS. The checksum
hashes the pixels, not the file's path, so goldens stay valid on other machines.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from harness.scenario import WorkloadDef
from harness.zoo import DATA_DIR, cache_root, load_tokenizer

BOS_ID = 0  # every zoo tokenizer puts <s> first (zoo.SPECIAL_TOKENS)


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
    raise ValueError(f"unknown prompt set '{prompts}' (known: gsm8k-test, or a list of strings)")


def resolve(workloads: list[WorkloadDef], model_dir: Path) -> list[dict]:
    """Workload dicts of the run-spec contract (harness/runspec.py), with token ids."""
    tokenizer = load_tokenizer(model_dir)
    config = json.loads((Path(model_dir) / "config.json").read_text())
    resolved = []
    for w in workloads:
        texts = prompt_texts(w.prompts, w.num_prompts)
        ids = [[BOS_ID] + tokenizer.encode(t).ids for t in texts]
        item = {"name": w.name, "kind": w.kind, "prompts": [p[: w.max_prompt_tokens] for p in ids], "top_k": w.top_k}
        if "image_token_id" in config:
            _refuse_placeholder_in_text(item["prompts"], config["image_token_id"], w.name)
        if w.images:
            item["prompts"], item["images"] = _with_images(ids, w, config)
        if w.kind == "greedy":
            item["max_new_tokens"] = w.max_new_tokens
        if w.capture_hidden:
            item["capture_hidden"] = True
        resolved.append(item)
    return resolved


def _refuse_placeholder_in_text(prompts: list[list[int]], token: int, workload: str) -> None:
    for i, p in enumerate(prompts):
        if token in p:
            raise ValueError(f"workload '{workload}': text of prompt {i} tokenizes to the image placeholder "
                             f"id {token}; pick other prompts")


def _with_images(ids: list[list[int]], w: WorkloadDef, config: dict) -> tuple[list[list[int]], list]:
    """Prompts 0..w.images-1 get an image: BOS, one placeholder per patch, then the text."""
    if "image_token_id" not in config:
        raise ValueError(f"workload '{w.name}' asks for images, but model_type "
                         f"'{config.get('model_type')}' has no vision encoder")
    size, patch = config["vision_image_size"], config["vision_patch_size"]
    placeholders = [config["image_token_id"]] * (size // patch) ** 2
    prompts, images = [], []
    for i, p in enumerate(ids):
        if i < w.images:
            prompts.append((p[:1] + placeholders + p[1:])[: max(w.max_prompt_tokens, len(placeholders) + 2)])
            images.append(str(image_file(i, size)))
        else:
            prompts.append(p[: w.max_prompt_tokens])
            images.append(None)
    return prompts, images


def image_pixels(index: int, size: int):
    """The seeded pixels [size, size, 3] uint8 of image `index` (numpy PCG64: stable bytes)."""
    import numpy as np

    return np.random.default_rng(1000 + index).integers(0, 256, (size, size, 3), dtype=np.uint8)


def image_file(index: int, size: int) -> Path:
    """The PNG of image `index`, written into the cache on first use."""
    from PIL import Image

    path = cache_root().parent / "images" / f"image{index}-{size}px.png"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        Image.fromarray(image_pixels(index, size)).save(tmp, format="PNG")
        os.replace(tmp, path)  # concurrent scenarios never read a half-written file
    return path


def _content(value):
    """A resolved workload with each image path replaced by a hash of its pixels."""
    if isinstance(value, dict) and "images" in value:
        return {**value, "images": [None if p is None else _pixel_hash(p) for p in value["images"]]}
    return value


def _pixel_hash(path: str) -> str:
    import numpy as np
    from PIL import Image

    with Image.open(path) as img:
        return hashlib.sha256(np.asarray(img.convert("RGB")).tobytes()).hexdigest()


def checksum(resolved: list[dict]) -> str:
    return hashlib.sha256(json.dumps([_content(w) for w in resolved], sort_keys=True).encode()).hexdigest()
