"""The run spec: what the harness tells an engine process to do.

This is the contract between the harness process and the engine processes. The
harness writes it as JSON next to the run's outputs; each engine process (every
rank of the reference engine, or the one vLLM driver process) reads it. Engine
side code may import this module: it depends on the standard library only.

A workload is a plain dict so engines can pass through fields they do not know:

    {"name": "logits", "kind": "logprobs", "prompts": [[1, 2, 3], ...], "top_k": 20}
        teacher-forced: the top-k next-token logprobs at every position of every
        prompt (position i is the distribution of token i+1).
    {"name": "greedy", "kind": "greedy", "prompts": [[...], ...],
     "max_new_tokens": 16, "top_k": 20}
        greedy generation of exactly max_new_tokens per prompt (no EOS stop), with
        the top-k logprobs of every generated step (used by the near-tie rule).

Image inputs (models with a vision encoder): a workload may carry
    "images": [null | "/abs/path/to/image.png", ...]   one entry per prompt
PNG files written by the harness; a prompt with an image holds the model's image
placeholder token(s) where the image goes. Text-only prompts have null. Engines
read the PNG themselves (Pillow is allowed on the engine side for this).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

WORKLOAD_KINDS = ("logprobs", "greedy")


@dataclass
class RunSpec:
    scenario_id: str
    engine: str
    model_dir: str
    dtype: str  # "float32" | "bfloat16" | "float16"
    # Parallel and engine settings of this scenario: tp, pp, sp, compile, plus
    # any other engine option declared as a matrix axis.
    settings: dict
    workloads: list[dict]
    output_dir: str
    # Named fault switches (engine-defined), e.g. "rank-raise@1". Off by default.
    faults: list[str] = field(default_factory=list)
    device: str = "cpu"  # "cpu" (gloo) or "cuda" (nccl)
    seed: int = 0

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "RunSpec":
        return cls(**json.loads(Path(path).read_text()))

    @property
    def tp(self) -> int:
        return int(self.settings.get("tp", 1))

    @property
    def pp(self) -> int:
        return int(self.settings.get("pp", 1))

    @property
    def sp(self) -> bool:
        return bool(self.settings.get("sp", False))

    @property
    def compile(self) -> bool:
        return bool(self.settings.get("compile", False))
