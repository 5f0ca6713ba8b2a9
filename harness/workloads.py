"""Workloads: what every scenario of a suite asks its engine to compute.

The harness tokenizes here, once, so every engine (and the golden) sees the very
same token ids, and the engine side needs no tokenizer. The resolved workloads are
hashed into the workload checksum that goldens are keyed on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.scenario import WorkloadDef
from harness.zoo import DATA_DIR, load_tokenizer

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
    resolved = []
    for w in workloads:
        texts = prompt_texts(w.prompts, w.num_prompts)
        ids = [([BOS_ID] + tokenizer.encode(t).ids)[: w.max_prompt_tokens] for t in texts]
        item = {"name": w.name, "kind": w.kind, "prompts": ids, "top_k": w.top_k}
        if w.images:
            item["prompts"], item["images"] = _with_images(ids, w.images, model_dir)
        if w.kind == "greedy":
            item["max_new_tokens"] = w.max_new_tokens
        resolved.append(item)
    return resolved


def _with_images(prompts: list[list[int]], names: list, model_dir: Path) -> tuple[list[list[int]], list]:
    """Prompts with the model's image placeholder after BOS where a prompt has an image,
    and the PNG path per prompt (the run-spec contract). The placeholder is the model's
    unexpanded one (vision start, one image pad, vision end); each engine expands it
    to the image's feature size, as vLLM does with token prompts."""
    from harness.images import image_path

    cfg = json.loads((model_dir / "config.json").read_text())
    if "image_token_id" not in cfg:
        raise ValueError(f"workload has images but model {model_dir.name} has no image_token_id (not a vision model)")
    if len(names) != len(prompts):
        raise ValueError(f"workload has {len(prompts)} prompts but {len(names)} image entries (one per prompt, null for none)")
    placeholder = [cfg["vision_start_token_id"], cfg["image_token_id"], cfg["vision_end_token_id"]]
    out_prompts, paths = [], []
    for ids, name in zip(prompts, names):
        out_prompts.append(ids[:1] + placeholder + ids[1:] if name else ids)
        paths.append(str(image_path(name)) if name else None)
    return out_prompts, paths


def checksum(resolved: list[dict]) -> str:
    """Over token ids and image *contents* (paths differ between machines)."""
    from harness.images import file_sha256

    portable = [{**w, "images": [file_sha256(p) if p else None for p in w["images"]]} if "images" in w else w for w in resolved]
    return hashlib.sha256(json.dumps(portable, sort_keys=True).encode()).hexdigest()
