"""Engine outputs: the one format every engine writes and every comparison reads.

A run's output directory holds:
  outputs.safetensors  tensors, named "<workload>.<field>"
  outputs.json         metadata: engine, versions, settings, timings, per-workload kind
  phases/rank<R>.json  optional: when each rank ended each phase (harness/contract/phases.py)

Fields per workload kind (K = the workload's top_k):
  logprobs: topk_ids [T, K] int64, topk_logprobs [T, K] float32, offsets [P+1] int64
            (T = total prompt tokens; prompt p owns rows offsets[p]:offsets[p+1];
            row i of a prompt is the next-token distribution after token i)
  greedy:   tokens [P, N] int64 (N = max_new_tokens), topk_ids [P, N, K] int64,
            topk_logprobs [P, N, K] float32 (the distribution each token was chosen from)
  generate: tokens [P, N] int64 (N = max_new_tokens; -1 after a sequence stopped),
            lengths [P] int64 (generated tokens kept, stop/EOS tokens included);
            generate_fields() builds both

Never pickle: tensors go through safetensors, everything else through JSON.
Engine-side code may import this module (torch, safetensors, stdlib only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load_file, save_file

from harness.contract.jsonfile import JSONObject, read_json
from harness.contract.storage import storage_error

TENSORS_FILE = "outputs.safetensors"
META_FILE = "outputs.json"


class _Brief(Protocol):
    """What describe_run reads of a run brief (harness/contract/runbrief.py RunBrief, a
    module of this one's layer: described here by its shape)."""

    @property
    def scenario_id(self) -> str: ...
    @property
    def settings(self) -> JSONObject: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def faults(self) -> Sequence[str]: ...
    @property
    def workloads(self) -> Sequence[JSONObject]: ...


def _writing(path: Path, write: Callable[[Path], object]) -> None:
    """write(path); on a failure, no half file is left to pass for outputs, and a full or
    read-only disk is raised as an OSError naming `path` (safetensors' own error names
    neither: harness/contract/storage.py), which the launcher reports as the machine's fault."""
    try:
        write(path)
    except Exception as exc:
        path.unlink(missing_ok=True)
        fault = storage_error(exc, path)
        if fault is not None:
            raise fault from exc
        raise


@dataclass
class EngineOutputs:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: JSONObject = field(default_factory=dict)

    def workload(self, name: str) -> dict[str, torch.Tensor]:
        """The tensors of one workload, keyed by field name."""
        prefix = name + "."
        return {k[len(prefix) :]: v for k, v in self.tensors.items() if k.startswith(prefix)}

    def put(self, workload: str, **fields: torch.Tensor) -> None:
        for key, value in fields.items():
            self.tensors[f"{workload}.{key}"] = value.detach().to("cpu").contiguous()

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        _writing(directory / TENSORS_FILE, lambda path: save_file(self.tensors, str(path)))
        _writing(directory / META_FILE, lambda path: path.write_text(json.dumps(self.meta, indent=1, sort_keys=True)))

    @classmethod
    def load(cls, directory: str | Path) -> EngineOutputs:
        directory = Path(directory)
        missing = [f for f in (TENSORS_FILE, META_FILE) if not (directory / f).exists()]
        if missing:
            raise FileNotFoundError(f"{directory} has no engine outputs (missing {', '.join(missing)})")
        return cls(load_file(str(directory / TENSORS_FILE)), read_json(directory / META_FILE))

    def describe_run(self, brief: _Brief, engine: str, **extra: object) -> None:
        """The meta every engine records: what ran (the brief) and with which versions;
        `extra` adds the engine's own fields (its version, timings, stage I/O...)."""
        import sys

        self.meta = {
            "engine": engine,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "scenario_id": brief.scenario_id,
            "settings": dict(brief.settings),
            "dtype": brief.dtype,
            "device": brief.device,
            "faults": list(brief.faults),
            "workloads": {w["name"]: {"kind": w["kind"]} for w in brief.workloads},
            **extra,
        }

    @staticmethod
    def generate_fields(sequences: list[list[int]], max_new_tokens: int) -> dict[str, torch.Tensor]:
        """A `generate` workload's fields from each prompt's kept tokens."""
        tokens = torch.full((len(sequences), max_new_tokens), -1, dtype=torch.int64)
        for p, seq in enumerate(sequences):
            if len(seq) > max_new_tokens:
                raise ValueError(f"prompt {p}: {len(seq)} tokens generated, at most {max_new_tokens} asked")
            tokens[p, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
        return {"tokens": tokens, "lengths": torch.tensor([len(s) for s in sequences], dtype=torch.int64)}

    @staticmethod
    def exists(directory: str | Path) -> bool:
        directory = Path(directory)
        return (directory / TENSORS_FILE).exists() and (directory / META_FILE).exists()
