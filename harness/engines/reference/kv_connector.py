"""A KV connector, as vLLM's: prefix KV saved to and loaded from an external store.

The store is a directory; an entry is the KV of a prompt prefix (whole blocks of
BLOCK tokens, keyed by the prefix's token ids), one file per rank holding that rank's
layers and KV heads. Each rank's connector reports the saves and loads it finished;
the reports ride with the intermediate tensors to the last stage, merged stage by stage
(`kv_connector_output`, the field vLLM PR 38031 dropped), and the driver sends the
merged reports back to every rank's scheduler. The scheduler relies on an operation
(a stored prefix, a loaded one) only once every stage reported it, and waits for
reports a bounded number of steps: a report that never comes is a stall, raised as
KVConnectorStall naming the stages whose reports were lost.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from safetensors.torch import load_file, save_file

BLOCK = 16  # tokens per stored KV block
# empty steps the scheduler waits for missing reports before it gives up
WAIT_STEPS = 4


class KVConnectorStall(RuntimeError):
    """Reports the scheduler waits for never arrived from some pipeline stages."""


def prefix_len(prompt: list[int]) -> int:
    """Tokens of `prompt` the store may hold: whole blocks, leaving at least one token to compute."""
    return (len(prompt) - 1) // BLOCK * BLOCK


def prefix_key(prompt: list[int]) -> str:
    return hashlib.sha256(repr(prompt[: prefix_len(prompt)]).encode()).hexdigest()[:16]


class KVConnector:
    """One rank's end of the store: saves and loads its own layers' KV cache rows."""

    def __init__(self, store_dir: str | Path, rank: int, pp_rank: int, layer_ids: range):
        self.store = Path(store_dir)
        self.rank, self.pp_rank, self.layer_ids = rank, pp_rank, layer_ids
        self.finished: list[list[str]] = []  # [op, key] since the last report
        self.counts = {"saved": 0, "loaded": 0}

    def _path(self, key: str) -> Path:
        return self.store / key / f"rank{self.rank}.safetensors"

    def save(self, kv_caches, slot: int, prompt: list[int]) -> None:
        n, key = prefix_len(prompt), prefix_key(prompt)
        tensors = {}
        for layer_id, (k, v) in zip(self.layer_ids, kv_caches):
            tensors[f"{layer_id}.k"] = k[slot, :n].contiguous().cpu()
            tensors[f"{layer_id}.v"] = v[slot, :n].contiguous().cpu()
        self._path(key).parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(self._path(key)))
        self.finished.append(["saved", key])
        self.counts["saved"] += 1

    def load(self, kv_caches, slot: int, prompt: list[int]) -> None:
        n, key = prefix_len(prompt), prefix_key(prompt)
        tensors = load_file(str(self._path(key)))
        for layer_id, (k, v) in zip(self.layer_ids, kv_caches):
            k[slot, :n].copy_(tensors[f"{layer_id}.k"])
            v[slot, :n].copy_(tensors[f"{layer_id}.v"])
        self.finished.append(["loaded", key])
        self.counts["loaded"] += 1

    def take_report(self) -> dict:
        report, self.finished = {"stage": self.pp_rank, "finished": self.finished}, []
        return report


class ConnectorScheduler:
    """What every rank's scheduler knows of the store: which stages confirmed which op."""

    def __init__(self, num_stages: int):
        self.num_stages = num_stages
        self.confirmed: dict[tuple[str, str], set[int]] = {}

    def record(self, reports: list[dict]) -> None:
        for report in reports:
            for op, key in report["finished"]:
                self.confirmed.setdefault((op, key), set()).add(report["stage"])

    def complete(self, op: str, key: str) -> bool:
        return len(self.confirmed.get((op, key), ())) == self.num_stages

    def missing(self, ops: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [o for o in ops if not self.complete(*o)]

    def stall_error(self, ops: list[tuple[str, str]]) -> KVConnectorStall:
        op, key = self.missing(ops)[0]
        seen = sorted(self.confirmed.get((op, key), ()))
        lost = sorted(set(range(self.num_stages)) - set(seen))
        return KVConnectorStall(
            f"KV connector: '{op}' of prefix {key} was reported by pipeline stages {seen} but never by "
            f"stages {lost} after {WAIT_STEPS} steps ({len(self.missing(ops))} operations waiting). The "
            "reports travel with the intermediate tensors (kv_connector_output) to the last stage: "
            "lost at a PP boundary?"
        )
