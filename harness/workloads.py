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
        if w.kind == "greedy":
            item["max_new_tokens"] = w.max_new_tokens
        resolved.append(item)
    return resolved


def checksum(resolved: list[dict]) -> str:
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
