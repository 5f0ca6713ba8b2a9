"""Fault switches inside vLLM's worker processes, to prove the harness reports a real
worker death with the worker's name and its root-cause exception.

The driver names this module's FaultExtension as vLLM's `worker_extension_cls`
whenever a scenario has faults, and switches them on in its own process first (`arm`,
which also sets $HARNESS_VLLM_FAULTS): a worker vLLM forks (its default on GPUs, and on
CPU through forking.py) inherits them installed; a worker it spawns (HARNESS_VLLM_FORK=0
on CPU) imports this module afresh, and importing it installs the faults the variable
lists. The switches decide at call time, by the faults switched on and the PP rank of
the process they run in. Nothing here runs unless a fault is asked for.

  pp-drop-residual@R  the PP rank R worker's stage cannot find `residual` in the
                      intermediate tensors it received (the bug class of vLLM PR 37622):
                      a KeyError raised inside the model's forward, on that worker only
  worker-exit@R       the PP rank R worker process exits (code 3) in the same place,
                      without a Python exception: a hard worker death
  pp-step-raise@R     the PP rank R worker's model step raises (a RuntimeError from the model
                      runner's execute_model) before it sends anything: a stage that is not
                      the last crashing, whose answer vLLM's executor never reads (it waits for
                      the last stage's), as MiniCPM's first stage did under PP on CPU
  pp-zero-aux@R       the PP rank R worker's stage receives every tensor but the hidden
                      states as zeros (the residual, and what a model sends besides): the
                      silent form of the same bug class (vLLM PRs 37622, 40786), caught by
                      the numbers only
  pp-kv-layout@R      the PP rank R worker reports KV-cache layouts the other stages do not
                      (as Qwen3-Next's two PP stages did, each holding other layer kinds):
                      the engine core's own start-up assertion ("Workers disagree on
                      supported KV cache layouts"), after which vLLM lets every worker go
                      with exit code 0; the crash must name the core's exception, not those
                      exits. vLLM releases that negotiate a layout (0.32) only.
  tp-corrupt-mlp@R    the TP rank R worker's Llama MLP of layer CORRUPT_LAYER returns its output
                      scaled by (1 + CORRUPT_SCALE): one module on one TP rank, silent (no
                      exception), small (the logits move by about 1e-3), and the same eager
                      and compiled (Dynamo traces the scaling into the graph). What the
                      localization must name: that layer, LlamaMLP, TP rank R.
  compile-drop-deepstack
                      Qwen3-VL's language model loses its deepstack inputs (the vision
                      features added after its first text layers) in the graph torch.compile
                      traces, and keeps them when it runs eagerly: the bug class of vLLM PR
                      43617 (deepstack missing on the compiled path; an image task's score
                      collapses under compile only). Every rank, no PP rank to name.

The compile fault changes what Dynamo traces, so a run with faults never shares vLLM's
compile cache with clean runs (harness/engines/compile_cache.py gives it a root of its own).
"""

from __future__ import annotations

import os

from harness.contract.settings.variables import VLLM_FAULTS
from harness.engines.vllm.evidence import EvidenceExtension

# The fault switches of a run, comma-separated: what a worker vLLM spawns switches on
# when it imports this module.
FAULTS_ENV = VLLM_FAULTS.name

KINDS = ("pp-drop-residual", "worker-exit", "pp-zero-aux", "pp-kv-layout", "pp-step-raise")  # aimed at one PP rank: KIND@R
TP_KINDS = ("tp-corrupt-mlp",)  # aimed at one TP rank: KIND@R
EVERY_RANK = ("compile-drop-deepstack",)  # act wherever they run
# pp-zero-aux records each tensor it zeroes, in the worker; the driver logs them after this
# mark (which archs send tensors besides the hidden states)
ZEROED_MARK = "harness fault pp-zero-aux: received as zeros:"
ZEROED: list[str] = []


# tp-corrupt-mlp: the layer whose MLP it corrupts, and by how much
CORRUPT_LAYER = 1
CORRUPT_SCALE = 1e-3


def _known() -> str:
    return ", ".join([k + "@<pp rank>" for k in KINDS] + [k + "@<tp rank>" for k in TP_KINDS] + list(EVERY_RANK))


def parse(faults: list[str]) -> dict[str, int | None]:
    """{kind: PP rank, or None for a fault of every rank}; unknown names fail loudly (a typo
    must not run a clean engine)."""
    parsed: dict[str, int | None] = {}
    for fault in faults:
        kind, at, rank = fault.partition("@")
        if kind in EVERY_RANK and not at:
            parsed[kind] = None
        elif kind in KINDS + TP_KINDS and rank.isdigit():
            parsed[kind] = int(rank)
        else:
            raise ValueError(f"unknown vllm fault '{fault}' (known: {_known()})")
    return parsed


def target_problem(faults: list[str], pp: int, tp: int = 1) -> str | None:
    """A fault aimed at a PP (or TP) rank these settings do not have would never fire."""
    for kind, rank in parse(faults).items():
        axis, size = ("TP", tp) if kind in TP_KINDS else ("PP", pp)
        if rank is not None and rank >= size:
            return (
                f"vllm fault {kind}@{rank} targets {axis} rank {rank}, but these settings have {size} {axis} "
                f"rank{'s' if size > 1 else ''}; it would never fire (known: {_known()})"
            )
    return None


def _pp_rank() -> int:
    from vllm.distributed import get_pp_group

    return get_pp_group().rank_in_group


# The faults switched on in this process: the installed switches read it at call time.
_ON: dict[str, int | None] = {}
# what is patched into vLLM here: "deepstack", "pp"
_INSTALLED: set[str] = set()


def arm(faults: list[str]) -> None:
    """Switch `faults` on in this process and in every process vLLM starts from it: the
    variable for a worker it spawns, the switches installed here for a worker it forks
    (a forked worker does not import this module again). A typo fails here, before an
    engine start."""
    VLLM_FAULTS.set(",".join(faults))
    _switch_on(parse(faults))


def _switch_on(faults: dict[str, int | None]) -> None:
    _ON.clear()
    _ON.update(faults)
    if "compile-drop-deepstack" in faults and "deepstack" not in _INSTALLED:
        _drop_deepstack_when_compiled()
        _INSTALLED.add("deepstack")
    if set(faults) & set(KINDS) and "pp-stages" not in _INSTALLED:
        _install_pp_faults(_ON)
        _INSTALLED.add("pp-stages")
    if "tp-corrupt-mlp" in faults and "mlp" not in _INSTALLED:
        _install_mlp_fault()
        _INSTALLED.add("mlp")
    if "pp-kv-layout" in faults and "layouts" not in _INSTALLED:
        _install_layout_fault()
        _INSTALLED.add("layouts")
    if "pp-step-raise" in faults and "step" not in _INSTALLED:
        _install_step_fault()
        _INSTALLED.add("step")


def _drop_deepstack_when_compiled() -> None:
    """Qwen3-VL's (and Qwen3-VL-MoE's) language model forward without its deepstack inputs
    while Dynamo traces it; untouched when it runs eagerly. functools.wraps keeps the
    signature vLLM's compile decorator binds the arguments to."""
    import functools
    import importlib

    import torch

    for module, name in (("qwen3_vl", "Qwen3LLMModel"), ("qwen3_vl_moe", "Qwen3MoeLLMModel")):
        cls = getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), name)
        original = cls.forward

        @functools.wraps(original)
        def forward(self, *args, _original=original, **kwargs):
            if "compile-drop-deepstack" in _ON and torch.compiler.is_compiling():
                kwargs["deepstack_input_embeds"] = None
            return _original(self, *args, **kwargs)

        cls.forward = forward


def _install_pp_faults(faults: dict[str, int | None]) -> None:
    import torch
    from vllm.sequence import IntermediateTensors

    original = IntermediateTensors.__getitem__

    def getitem(self, key):
        if key == "residual" and _pp_rank() == faults.get("pp-drop-residual"):
            raise KeyError("residual")
        if _pp_rank() == faults.get("worker-exit"):
            os._exit(3)
        if key != "hidden_states" and _pp_rank() == faults.get("pp-zero-aux"):
            # the fault's own evidence; a list: Dynamo replays its mutation (print it cannot trace)
            if key not in ZEROED:
                ZEROED.append(key)
            return torch.zeros_like(original(self, key))
        return original(self, key)

    IntermediateTensors.__getitem__ = getitem


def _install_mlp_fault() -> None:
    """LlamaMLP decides as it is built (from the prefix vLLM gives it and its worker's TP rank)
    whether it is the one to corrupt, and that one returns its output scaled: decided once,
    so Dynamo traces a plain attribute, not a process-group lookup."""
    import functools
    import inspect

    from vllm.distributed import get_tp_group
    from vllm.model_executor.models import llama
    from vllm.model_executor.models.utils import extract_layer_index

    init, forward = llama.LlamaMLP.__init__, llama.LlamaMLP.forward

    @functools.wraps(init)
    def aim(self, *args, **kwargs):
        init(self, *args, **kwargs)
        prefix = inspect.signature(init).bind(self, *args, **kwargs).arguments.get("prefix", "")
        layer = extract_layer_index(prefix) if "layers." in prefix else None
        self._harness_corrupt = layer == CORRUPT_LAYER and get_tp_group().rank_in_group == _ON.get("tp-corrupt-mlp")

    @functools.wraps(forward)
    def corrupted(self, x):
        out = forward(self, x)
        return out * (1 + CORRUPT_SCALE) if getattr(self, "_harness_corrupt", False) else out

    llama.LlamaMLP.__init__, llama.LlamaMLP.forward = aim, corrupted


def _install_layout_fault() -> None:
    """The aimed worker answers the engine core's layout question with its layouts in
    reverse and one more name: a list no other stage reports."""
    from vllm.v1.worker import worker_base

    original = getattr(worker_base.WorkerBase, "get_supported_kv_cache_layouts", None)
    if original is None:
        raise ValueError("vllm fault pp-kv-layout: this vLLM's workers report no KV-cache layouts (vLLM 0.32 and later do)")

    def get_supported_kv_cache_layouts(self) -> list[str]:
        layouts = original(self)
        return [*reversed(layouts), "HARNESS_FAULT"] if _pp_rank() == _ON.get("pp-kv-layout") else layouts

    worker_base.WorkerBase.get_supported_kv_cache_layouts = get_supported_kv_cache_layouts


def _install_step_fault() -> None:
    """The model runner's step (which the CPU runner inherits), inside the worker's: the
    worker's own step sees the exception as it would a model's."""
    import functools

    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner.execute_model

    @functools.wraps(original)
    def execute_model(self, *args, **kwargs):
        if _pp_rank() == _ON.get("pp-step-raise"):
            raise RuntimeError(f"harness fault pp-step-raise: PP rank {_pp_rank()}'s model step raised")
        return original(self, *args, **kwargs)

    GPUModelRunner.execute_model = execute_model


class FaultExtension(EvidenceExtension):
    """vLLM mixes this class into its worker class; the faults are installed on import.
    It is the evidence extension too (vLLM takes one extension class), and adds what the
    faults did in this worker."""

    def harness_evidence(self) -> dict:
        return {**super().harness_evidence(), "zeroed": list(ZEROED)}


_switch_on(parse([f for f in (VLLM_FAULTS.raw() or "").split(",") if f]))
