"""Hidden states from inside vLLM's workers, for localizing a numeric failure
(harness/run/compare/modules.py compares them; harness/run/stages/localize.py asks for them).

Asked for by a logprobs workload's `record_modules` (only the localization step sets it:
goldens and scenario runs record nothing). The driver calls two worker RPCs around that
workload (evidence.py): `harness_record_start` installs forward hooks, `harness_record_stop`
removes them and writes what they saw. Hooks go on vLLM's own module objects in each worker:

  the decoder model's children beside its layer list   embed_tokens, norm (the final norm), ...
  every decoder layer this worker holds                layers.<i>  (the golden's index i: PP
                                                       keeps the whole list, PPMissingLayer
                                                       where another stage holds the layer)
  each layer's direct children                         layers.<i>.self_attn, .mlp, .input_layernorm, ...
  a MoE block's shared experts                         layers.<i>.mlp.shared_expert(s)

Each place is recorded at its first call after the start (the first step of the workload:
the prefill of its prompts): every tensor argument (`in0`, `in1`, ... : floats, and integer
ones such as token ids and positions, which say whether two runs saw the same batch) cloned
before the module runs (vLLM's fused add + norm writes its inputs in place), and every
tensor of its output (`out0`, `out1`, ...) cloned as it returns. Only the first `rows` token
rows are kept: memory is places x rows x hidden, whatever the model's length of run.

Each worker writes one safetensors file, `pp<P>-tp<T>.safetensors` (never pickle), whose
metadata says the order in which they ran (`<place>:in` as a place starts, `<place>:out`
as it returns), each place's module class with its source
file and line (relative to site-packages: `vllm/model_executor/models/llama.py:78`), and the
worker's ranks.

Inside a graph that torch.compile traced before the hooks existed, the modules are not called
as modules and no hook runs: the file then lists no places, and the localization says so and
uses the eager run of the same layout (docs/VLLM.md, "Localization").

Runs in vLLM's interpreter: standard library, torch and safetensors only.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import torch

# the rows a worker keeps of each recorded tensor (the first step's first token rows)
ROWS_MAX = 256
SHARED_EXPERTS = ("shared_expert", "shared_experts")
MISSING = "PPMissingLayer"


class Recorder:
    """The hooks of one worker and what they saw."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.tensors: dict[str, torch.Tensor] = {}
        self.order: list[str] = []
        self.started: set[str] = set()
        self.done: set[str] = set()
        self.classes: dict[str, str] = {}
        # each place's tensor arguments by their names in its forward's signature
        self.inputs: dict[str, list[str]] = {}
        self.handles: list = []

    def hook(self, place: str, module: torch.nn.Module) -> None:
        self.classes[place] = where_defined(type(module))
        self.handles.append(module.register_forward_pre_hook(self._before(place), with_kwargs=True))
        self.handles.append(module.register_forward_hook(self._after(place)))

    def _before(self, place: str):
        def pre_hook(module, args, kwargs):
            if place in self.started:
                return None  # its first call only
            self.started.add(place)
            self.order.append(f"{place}:in")
            self.inputs[place] = tensor_names(module, args, kwargs)
            self._keep(place, "in", [*args, *kwargs.values()])
            return None

        return pre_hook

    def _after(self, place: str):
        def hook(module, args, output):
            if place in self.done or place not in self.started:
                return None  # its first call only
            self.done.add(place)
            self.order.append(f"{place}:out")
            self._keep(place, "out", list(output) if isinstance(output, (tuple, list)) else [output])
            return None

        return hook

    def _keep(self, place: str, side: str, values: list) -> None:
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        for j, t in enumerate(tensors):
            # vLLM's own models hold tokens in the first dimension; its Transformers backend
            # (GPTBigCode, ...) gives the modules [1, tokens, hidden]: the batch of one dropped
            t = t[0] if t.dim() == 3 and t.shape[0] == 1 else t
            self.tensors[f"{place}:{side}{j}"] = t.detach()[: self.rows].to("cpu", copy=True).contiguous()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


# this worker's recorder while one is armed
_ARMED: dict[str, Recorder] = {}


def tensor_names(module: torch.nn.Module, args: tuple, kwargs: dict) -> list[str]:
    """The names of a call's tensor arguments, in the order they are recorded (`in0`, ...):
    positional ones by the forward's parameter names, then the keyword ones."""
    try:
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        params = [p.name for p in inspect.signature(module.forward).parameters.values() if p.kind in kinds]
    except (TypeError, ValueError):  # no signature to read
        params = []
    names = [params[i] if i < len(params) else f"arg{i}" for i in range(len(args))] + list(kwargs)
    return [name for name, value in zip(names, [*args, *kwargs.values()]) if isinstance(value, torch.Tensor)]


def where_defined(cls: type) -> str:
    """`LlamaMLP vllm/model_executor/models/llama.py:78`: the class and where its source starts,
    relative to the site-packages (or source checkout) it was imported from."""
    try:
        path = inspect.getsourcefile(cls) or "?"
        line = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return f"{cls.__name__} ?"
    return f"{cls.__name__} {_relative(path)}:{line}"


def _relative(path: str) -> str:
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in path:
        return path.rsplit(marker, 1)[1]
    parts = Path(path).parts
    # a source checkout: from the package directory on (vllm/..., torch/...)
    for name in ("vllm", "torch", "harness"):
        if name in parts:
            return "/".join(parts[len(parts) - 1 - parts[::-1].index(name) :])
    return path


def decoder(model: torch.nn.Module) -> tuple[torch.nn.Module | None, str]:
    """The module whose child is the decoder's layer list (layers.decoder_layers picks
    the list), and that child's name."""
    from harness.engines.vllm.layers import decoder_layers

    layers = decoder_layers(model)
    if not layers:
        return None, ""
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.ModuleList) and list(child) == layers:
                return parent, name
    return None, ""


def places(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Every place this worker records, by the name it has in every layout."""
    parent, list_name = decoder(model)
    if parent is None:
        return {}
    found: dict[str, torch.nn.Module] = {}
    for name, child in parent.named_children():
        if name != list_name and type(child).__name__ != MISSING:
            found[name] = child
    for i, layer in enumerate(getattr(parent, list_name)):
        if type(layer).__name__ == MISSING:
            continue
        found[f"layers.{i}"] = layer
        for name, child in layer.named_children():
            found[f"layers.{i}.{name}"] = child
            for inner, grandchild in child.named_children():
                if inner in SHARED_EXPERTS:
                    found[f"layers.{i}.{name}.{inner}"] = grandchild
    return found


def start(model: torch.nn.Module, rows: int = ROWS_MAX) -> dict:
    """Hooks on every place of this worker; what it hooked."""
    stop_hooks()
    recorder = Recorder(min(int(rows), ROWS_MAX))
    for place, module in places(model).items():
        recorder.hook(place, module)
    _ARMED["recorder"] = recorder
    return {"hooked": len(recorder.classes)}


def stop_hooks() -> Recorder | None:
    recorder = _ARMED.pop("recorder", None)
    if recorder is not None:
        recorder.remove()
    return recorder


def stop(directory: str, ranks: dict) -> dict:
    """Hooks removed; what they saw written to `directory`/pp<P>-tp<T>.safetensors with its
    metadata. Returns the file and how many of the hooked places ran."""
    from safetensors.torch import save_file

    recorder = stop_hooks()
    if recorder is None:
        raise RuntimeError("harness_record_stop without harness_record_start: nothing was recording")
    path = Path(directory) / f"pp{ranks['pp_rank']}-tp{ranks['tp_rank']}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "order": json.dumps(recorder.order),
        "classes": json.dumps({p: recorder.classes[p] for p in sorted(recorder.started)}),
        "inputs": json.dumps(recorder.inputs),
        "hooked": json.dumps(sorted(recorder.classes)),
        **{k: str(v) for k, v in ranks.items()},
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    save_file(recorder.tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    return {"file": str(path), "ran": len(recorder.started), "hooked": len(recorder.classes)}


def allocate_pp_buffer(worker) -> bool:
    """A later PP stage's buffer for the tensors it receives, allocated as vLLM's warm-up
    does (v1/worker/gpu_model_runner.py _dummy_run) where nothing allocated it: on CPU, vLLM
    0.27-0.32 skips the warm-up in eager mode and every eager PP run crashes on Worker_PP1
    (known bug eager-pp-intermediate-tensors). Only a recording run does this, so that the
    eager run of a compiled PP layout can be recorded; a scenario's own run never does.
    True when it allocated."""
    from vllm.distributed import get_pp_group

    runner = getattr(worker, "model_runner", None)
    if runner is None or get_pp_group().is_first_rank or getattr(runner, "intermediate_tensors", True) is not None:
        return False
    runner.intermediate_tensors = runner.model.make_empty_intermediate_tensors(
        batch_size=runner.max_num_tokens, dtype=runner.model_config.dtype, device=runner.device
    )
    return True
