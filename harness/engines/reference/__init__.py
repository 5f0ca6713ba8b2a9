"""The built-in `reference` engine: a small Llama-style inference engine in plain PyTorch,
launched rank by rank with torch.distributed (gloo on CPU, NCCL on CUDA).

    model.py     the model math of one pipeline stage, no parallelism in it
    parallel.py  process groups, collectives, TP layers, parallelize()
    loader.py    reads only this rank's layers and weight slices from safetensors
    pipeline.py  KV cache, one step across PP stages, warm-up/compile, workloads
    kv_connector.py  prefix KV in an external store, reports carried between stages
    prefix_cache.py  automatic prefix caching: whole KV blocks of earlier prompts reused
    speculative.py   n-gram drafts and their verification (speculative decoding)
    worker.py    the rank entry point (python -m harness.engines.reference.worker BRIEF.json)
    faults.py    named fault switches (brief.faults)

This module stays import-light (no torch) because the CLI imports the engine registry.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.contract.axes import RunAxes, excludes, requires
from harness.contract.launchplan import LaunchPlan
from harness.contract.runbrief import RunBrief
from harness.engines import compile_cache
from harness.engines.base import Engine

# What every rank imports before its first step: torch, Dynamo (building the stage on
# the meta device imports it, eager too) and the engine. A rank forked from a process
# that imported them (the launcher's rank pool) skips the imports' cost (docs/BENCHMARKS.md
# has the times).
RANK_IMPORTS = (
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "harness.engines.reference.worker",
    "harness.engines.reference.pipeline",
    "harness.engines.reference.loader",
    "harness.engines.reference.evidence",
    "harness.contract.outputs",
    "harness.engines.launch.rankside",
)
# What a compile run's ranks import too: inductor's entry point (a large share of every
# compile warm-up; 1.2 CPU-s of a zygote's 4.4 where no rank compiles), imported by the
# zygote at the first compile rank (LaunchPlan.preload_on_request).
COMPILE_IMPORTS = ("torch._inductor.compile_fx",)


#: model_type (the families model.py implements) -> the keys a non-last stage sends and a non-first stage receives
INTERMEDIATE_KEYS = {
    "llama": ("hidden_states", "residual"),
    "llama-pli": ("hidden_states", "per_layer_inputs"),
    "llama-vl": ("hidden_states", "residual"),
    "llama-moe": ("hidden_states", "residual"),
}


class ReferenceEngine(Engine):
    name = "reference"
    # kvc: the KV connector (prefix KV saved to / loaded from an external store);
    # ep: expert parallelism (a mixture-of-experts model's experts split over the TP ranks);
    # chunked_prefill: a token budget per step (0: off), prompts longer than it are
    # prefilled in chunks; prefix_cache: whole KV blocks of earlier prompts reused;
    # batch: how a workload's prompts are submitted (harness/contract/batching.py);
    # spec: speculative decoding of greedy workloads (ngram drafts, speculative.py);
    # dp: data-parallel replicas, each a whole tp x pp engine serving every dp-th prompt;
    # block_size: the prefix cache's block (its KV cache is not paged)
    axes = {
        "tp": None,
        "pp": None,
        "sp": (False, True),
        "compile": (False, True),
        "kvc": (False, True),
        "ep": (False, True),
        "chunked_prefill": None,
        "prefix_cache": (False, True),
        "batch": ("all", "one", "mixed"),
        "spec": (False, "ngram"),
        "dp": None,
        "block_size": None,
    }

    def model_types(self) -> frozenset[str] | None:
        return frozenset(INTERMEDIATE_KEYS)

    # The engine's own limits between axes (beside the axes' general rules).
    rules = (
        requires("ep", "tp>=2", reason="expert parallelism splits the experts over the TP ranks"),
        excludes(
            "dp>=2",
            "ep",
            reason="the reference engine's expert-parallel group is the TP group of one replica; "
            "experts shared across DP replicas (lockstep MoE steps) are not implemented",
        ),
        excludes("dp>=2", "kvc", reason="the KV connector's scheduler of record is one replica's driver"),
        excludes("prefix_cache", "kvc", reason="both fill the KV cache from a store: the reference engine runs one at a time"),
        requires(
            "block_size",
            "prefix_cache",
            reason="the reference engine's KV cache is not paged: its only blocks are the prefix cache's",
        ),
    )

    def unsupported_reason(self, settings: dict, model_dir: str | Path | None = None) -> str | None:
        """The axes and rules (Engine's), then (given model_dir) the model's divisibility
        by tp, its layer count against pp, and what its family cannot take."""
        reason = super().unsupported_reason(settings)
        if reason:
            return reason
        if model_dir is None:
            return None
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        from harness.engines.reference.model import ModelConfig

        # the architectures this engine implements (a user's arch axis may name others)
        try:
            model = ModelConfig.from_dict(cfg)
        except (ValueError, KeyError) as exc:
            return str(exc) if isinstance(exc, ValueError) else f"reference engine needs config field {exc}"
        axes = RunAxes.of(settings)
        tp = axes.tp
        heads = cfg["num_attention_heads"]
        for key, value in (
            ("num_attention_heads", heads),
            ("num_key_value_heads", cfg.get("num_key_value_heads") or heads),
            ("intermediate_size", cfg["intermediate_size"]),
            ("vocab_size", cfg["vocab_size"]),
        ):
            if value % tp:
                return f"{key}={value} is not divisible by tp={tp}"
        # ModelConfig reads them for the MoE model type only
        experts = model.num_experts
        if axes.chunked_prefill and model.model_type == "llama-vl":
            return "chunked_prefill: the reference engine keeps an image's placeholder tokens in one step (no chunked images)"
        if axes.batch == "mixed" and model.model_type == "llama-vl":
            return "batch=mixed: filler prompts made from a prompt would carry its image placeholders"
        if axes.ep and not experts:
            return f"ep (expert parallelism) needs a mixture-of-experts model; model_type {model.model_type!r} has no experts"
        if axes.ep and experts % axes.tp:
            return f"num_local_experts={experts} is not divisible by tp={axes.tp} (ep gives each rank whole experts)"
        if axes.pp > cfg["num_hidden_layers"]:
            return f"pp={axes.pp} exceeds num_hidden_layers={cfg['num_hidden_layers']}"
        return None

    def fault_problem(self, faults: list[str], settings: dict | None = None) -> str | None:
        from harness.engines.reference import faults as switches  # stdlib only

        try:
            switches.parse(faults)
            problem = switches.target_problem(faults, self.devices_needed(settings)) if settings else None
        except ValueError as exc:
            return str(exc)
        return f"{problem}; the reference engine knows: {switches.known()}" if problem else None

    def launch_plan(self, brief: RunBrief, brief_path: str) -> LaunchPlan:
        world_size = self.devices_needed(brief.settings)
        # The same environment for every run, eager or compiled, of any size (the ranks'
        # thread count is set in the worker instead): one rank-pool zygote serves them all.
        # The ranks run in this interpreter: its torch is theirs.
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", **compile_cache.inductor_env(compile_cache.installed_torch_version())}
        return LaunchPlan(
            world_size=world_size,
            argv=[sys.executable, "-m", "harness.engines.reference.worker", brief_path],
            env=env,
            # CPU only: on CUDA, importing the compiler stack may query the driver
            # (cudaGetDeviceCount), after which a forked child could not use CUDA
            preload=list(RANK_IMPORTS) if brief.device == "cpu" else [],
            preload_on_request=list(COMPILE_IMPORTS) if brief.device == "cpu" and brief.axes.compile else [],
        )
