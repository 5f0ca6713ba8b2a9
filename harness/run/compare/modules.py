"""Where in the engine a numeric failure starts: the first module whose output leaves the
golden's while its input is still inside, from the hidden states vLLM's workers recorded
(harness/engines/vllm/record.py) in a failing layout and in the golden's layout.

A recording is one safetensors file per worker (`pp<P>-tp<T>.safetensors`): for each place
(`embed_tokens`, `layers.<i>`, `layers.<i>.mlp`, ...) its tensor inputs `<place>:in<j>` and
outputs `<place>:out<j>` over the first token rows of the workload's first step, and in its
metadata the order in which they ran (`<place>:in`, `<place>:out` events) and each place's
class with its source line. Places carry the golden's names in every layout: a PP stage
records its own layers under their global indices.

The walk follows the golden's events in order. At `<place>:in`, every input of the place
is held to the golden's; at `<place>:out`, every output. The first one that leaves the bound
is the answer:
  - an output, with the place's inputs inside: that module made the divergence (its class
    and source line named, and the TP ranks whose copy left);
  - an input, with everything before it inside: the divergence came in between the place
    before and this one; on a PP stage's first layer that is the PP boundary (what the
    stage received), otherwise code between the recorded modules.
Rows: vLLM's scheduler may put fewer prompts into the first step of one run than of the
other (the requests arrive while the engine core already steps), so only the leading token
rows whose token ids both runs' embeddings saw alike are compared (a prompt's rows do not
depend on the others' in the step: each attends to its own). Integer inputs (token ids,
positions) must then be equal: otherwise the two runs did not see the same batch and
nothing is located.

TP: each TP rank's copy is held to the golden on its own (a fault may touch one rank). A
place whose ranks all leave the golden but whose sum over the ranks agrees with it is a
row-parallel module's pre-reduce partial output (a shared expert or MoE built with
`reduce_results=False`, reduced by its caller): it is held to the golden summed over the
ranks, and no rank is named for it. A tensor of another shape than the golden's (a
column-parallel shard) is not comparable and is passed over (listed under `not_compared`).

The bound is the dtype's hidden_rtol (tolerances.py, the table the logit check reads too), per token row: |delta| / |golden|.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.contract.jsonfile import JSONObject
from harness.run.compare.localize import relative_deltas
from harness.run.compare.tolerances import hidden_rtol

ENGINE_FILES = "pp*-tp*.safetensors"


@dataclass
class WorkerRecord:
    """One worker's recording."""

    tp_rank: int
    pp_rank: int
    tensors: dict[str, torch.Tensor]
    events: list[str]
    classes: dict[str, str]
    # each place's tensor arguments by name (record.py tensor_names)
    inputs: dict[str, list[str]]

    @property
    def places(self) -> set[str]:
        return {e.rsplit(":", 1)[0] for e in self.events}


def load_recording(directory: Path) -> list[WorkerRecord]:
    """Every worker's file in `directory` (empty when there is none)."""
    from safetensors import safe_open

    workers = []
    for path in sorted(Path(directory).glob(ENGINE_FILES)):
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
        workers.append(
            WorkerRecord(
                tp_rank=int(meta.get("tp_rank", 0)),
                pp_rank=int(meta.get("pp_rank", 0)),
                tensors=tensors,
                events=json.loads(meta.get("order", "[]")),
                classes=json.loads(meta.get("classes", "{}")),
                inputs=json.loads(meta.get("inputs", "{}")),
            )
        )
    return workers


def layer_of(place: str) -> int | None:
    """`layers.3.mlp` -> 3; a place outside the layers (embed_tokens, norm) -> None."""
    parts = place.split(".")
    return int(parts[1]) if parts[0] == "layers" and len(parts) > 1 and parts[1].isdigit() else None


def _views(workers: list[WorkerRecord], key: str) -> list[tuple[WorkerRecord, torch.Tensor]]:
    return sorted(((w, w.tensors[key]) for w in workers if key in w.tensors), key=lambda v: v[0].tp_rank)


def _compare(golden: torch.Tensor, views: list[tuple[WorkerRecord, torch.Tensor]], rtol: float) -> JSONObject:
    """Which TP ranks' copies leave the golden: {"bad": [ranks], "rel": max |delta|/|h|,
    "row": first bad row, "partial": summed over ranks}; {"skip": why} when not comparable."""
    if golden.dtype in (torch.int32, torch.int64, torch.bool):
        unequal = [w.tp_rank for w, t in views if t.shape != golden.shape or not torch.equal(t, golden)]
        return {"bad": unequal, "rel": 0.0, "row": 0, "integer": True}
    same = [(w, t) for w, t in views if t.shape == golden.shape]
    if not same:
        return {"skip": f"shape {tuple(views[0][1].shape)} != golden {tuple(golden.shape)}"}
    g = golden.float().reshape(golden.shape[0], -1)[None, None]
    stacked = torch.stack([t.float().reshape(t.shape[0], -1) for _, t in same])[:, None]
    rel = relative_deltas(g[0], stacked)[:, 0]  # [views, rows]
    # a view per worker that holds the place: TP ranks, and under PP a place two stages run
    # (the Transformers backend's dropout before the layers) once per stage
    outside = [r > rtol for r in rel]
    leaving = [i for i, out in enumerate(outside) if out.any()]
    bad = sorted({same[i][0].tp_rank for i in leaving})
    if len(same) > 1 and len(leaving) == len(same):
        summed = relative_deltas(g[0], stacked.sum(dim=0, keepdim=True))[0, 0]
        if not (summed > rtol).any():
            return {"bad": [], "rel": summed.max().item(), "row": 0, "partial": True}
    rows = [int(outside[i].nonzero()[0, 0]) for i in leaving]
    stages = sorted({same[i][0].pp_rank for i in leaving})
    return {"bad": bad, "rel": rel.max().item(), "row": min(rows, default=0), "stages": stages}


def locate(golden_dir: Path, candidate_dir: Path, dtype: str, label: str = "the failing layout") -> JSONObject:
    """The first diverging module of the recording in `candidate_dir` against the golden's
    in `golden_dir` (see the module docstring). `label` names the candidate in the text."""
    rtol = hidden_rtol(dtype)
    golden, candidate = load_recording(golden_dir), load_recording(candidate_dir)
    if len(golden) != 1 or not golden[0].events:
        return {"layer": None, "recorded": False, "text": f"the golden layout's recording in {golden_dir} is missing or empty"}
    ran = [w for w in candidate if w.events]
    if not ran:
        return {
            "layer": None,
            "recorded": False,
            "text": f"not localized: no hook ran in the workers of {label} (no decoder layer list found, or a "
            "graph torch.compile traced, which calls no module)",
        }
    rows = common_rows(golden[0], ran)
    if rows == 0:
        return {
            "layer": None,
            "recorded": True,
            "text": f"the recorded first steps of {label} and the golden start with other tokens",
        }
    return _walk(_cut(golden[0], rows), [_cut(w, rows) for w in ran], rtol, label)


def common_rows(golden: WorkerRecord, candidate: list[WorkerRecord]) -> int:
    """How many leading token rows both runs' first steps share: the token ids the first
    place with an integer input (the embedding) saw alike in every worker that ran it."""
    key = next((k for k in golden.tensors if k.endswith(":in0") and not golden.tensors[k].is_floating_point()), None)
    seen = [w.tensors[key] for w in candidate if key and key in w.tensors]
    if key is None or not seen:
        return min([len(t) for w in [golden, *candidate] for t in w.tensors.values()], default=0)
    ids = golden.tensors[key]
    rows = len(ids)
    for other in seen:
        n = min(len(ids), len(other))
        differ = (ids[:n] != other[:n]).nonzero()
        rows = min(rows, int(differ[0, 0]) if len(differ) else n)
    return rows


def _cut(worker: WorkerRecord, rows: int) -> WorkerRecord:
    tensors = {k: t[:rows] for k, t in worker.tensors.items()}
    return WorkerRecord(worker.tp_rank, worker.pp_rank, tensors, worker.events, worker.classes, worker.inputs)


def _walk(golden: WorkerRecord, candidate: list[WorkerRecord], rtol: float, label: str) -> JSONObject:
    not_compared: list[str] = []
    previous = None  # the last event whose tensors agreed
    for event in golden.events:
        place, side = event.rsplit(":", 1)
        holders = [w for w in candidate if place in w.places]
        if not holders:
            not_compared.append(f"{place} (not run in {label})")
            continue
        for key in sorted(k for k in golden.tensors if k.startswith(f"{event}") and k[len(event) :].isdigit()):
            found = _compare(golden.tensors[key], _views(holders, key), rtol)
            if "skip" in found:
                not_compared.append(f"{key}: {found['skip']}")
                continue
            if found["bad"]:
                return _verdict(golden, holders, place, side, key, found, previous, rtol, label, not_compared)
        previous = event
    return {
        "layer": None,
        "recorded": True,
        "agrees": True,
        "rtol": rtol,
        "not_compared": not_compared,
        "text": f"every recorded module of {label} agrees with the golden's (|delta|/|h| <= {rtol:g} per token row)",
    }


def _verdict(
    golden: WorkerRecord,
    holders: list[WorkerRecord],
    place: str,
    side: str,
    key: str,
    found: JSONObject,
    previous: str | None,
    rtol: float,
    label: str,
    not_compared: list[str],
) -> JSONObject:
    layer = layer_of(place)
    stage = found.get("stages", [holders[0].pp_rank])[0]  # the stage whose copy left, where two run the place
    where_class = golden.classes.get(place, "? ?")
    module_class, _, source = where_class.partition(" ")
    ranks = found["bad"]
    tp_size = len({w.tp_rank for w in holders})
    on = "" if tp_size == 1 else (f" on TP rank {ranks[0]}" if len(ranks) == 1 else f" on TP ranks {', '.join(map(str, ranks))}")
    if tp_size > 1 and len(ranks) == tp_size:
        on = " on every TP rank" if tp_size > 2 else " on both TP ranks"
    what = _tensor_name(golden, place, key)
    if side == "out":
        text = f"{module_class}, {source}: output differs{on}, input agrees"
    elif found.get("integer"):
        text = (
            f"{module_class}, {source}: its input {what} differs from the golden's{on}: the two runs did not see the same batch"
        )
    else:
        came = f"after {previous.rsplit(':', 1)[0]} agreed" if previous else "from the start"
        boundary = previous is not None and _first_of_stage(place, holders, previous)
        text = f"{module_class}, {source}: input {what} differs{on} {came}" + (
            f" (received by PP stage {stage} from the stage before: the PP boundary)" if boundary else ""
        )
    return {
        "engine_module": True,
        "layer": layer if layer is not None else (-1 if side == "in" or place.startswith("embed") else None),
        "place": place if layer is None else f"layer {layer}" + (f" {place.split('.', 2)[2]}" if place.count(".") >= 2 else ""),
        "module": place,
        "module_class": module_class,
        "source": source,
        "side": "output" if side == "out" else "input",
        "tensor": key,
        "pp_stage": stage,
        "diverging_tp_ranks": ranks,
        **({"tp_rank": ranks[0], "tp_copy": "replica"} if tp_size > 1 else {}),
        "token_row": found["row"],
        "max_rel_delta": found["rel"],
        "rtol": rtol,
        "not_compared": not_compared,
        "text": f"{text} ({place}, pp stage {stage}; |delta|/|h| {found['rel']:.2g} > {rtol:g}) in {label}",
    }


def _tensor_name(golden: WorkerRecord, place: str, key: str) -> str:
    """`residual` for `layers.2:in2` (its forward's parameter name), else `in2` / `out0`."""
    side = key.rsplit(":", 1)[1]
    names = golden.inputs.get(place, [])
    j = int(side[2:]) if side.startswith("in") and side[2:].isdigit() else -1
    return f"`{names[j]}`" if 0 <= j < len(names) else side


def _first_of_stage(place: str, holders: list[WorkerRecord], previous: str) -> bool:
    """Whether the event before `place` ran on another PP stage (the tensors crossed a boundary)."""
    before = previous.rsplit(":", 1)[0]
    return all(before not in w.places for w in holders)
