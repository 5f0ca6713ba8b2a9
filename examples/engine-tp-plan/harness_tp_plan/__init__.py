"""The `tp-plan` engine: Hugging Face transformers' own tensor parallelism, as a harness plugin.

An example of an engine that lives outside the harness: an installable package that
declares itself under the `harness.engines` entry-point group (pyproject.toml), so a
scenario file names it (`engine: tp-plan`) without the harness being edited.

What it runs is a second, independent implementation of tensor parallelism: each of
the tp ranks loads the checkpoint with
`from_pretrained(path, distributed_config=DistributedConfig(tp_size=tp))`, which shards
the weights as DTensors by the model's own `base_model_tp_plan` (colwise q/k/v, gate and
up projections, rowwise o and down projections, a gathered lm_head) and all-reduces
over torch.distributed: gloo on CPU, NCCL on CUDA. tp=1 is a plain single-process
`from_pretrained`, the golden. Pipeline and sequence parallelism are not offered.

    worker.py  the rank entry point: python -m harness_tp_plan.worker BRIEF.json

This module stays import-light (stdlib and the harness's plugin API): the harness
imports it to list axes and build launch plans; torch and transformers load in the ranks.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from harness.contract.launchplan import LaunchPlan
from harness.contract.roots import cache_dir
from harness.contract.runbrief import RunBrief
from harness.engines import compile_cache
from harness.engines.base import Engine

__version__ = "0.1.0"
__all__ = ["TpPlanEngine", "__version__"]

# Config fields a column/row split must divide (a head is never cut in two: transformers
# would not refuse it, the attention would silently mix half-heads), with their aliases.
DIVISIBLE_FIELDS = {
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads",),
    "intermediate_size": ("intermediate_size", "ffn_dim", "n_inner"),
    "vocab_size": ("vocab_size",),  # the lm_head is split by rows and gathered
}


# What every rank imports before it loads a model, imported once by the rank pool's zygote
# (harness/engines/launch/pool.py) and forked, instead of once per rank: torch, DTensor and the
# parts of transformers that start no thread (its modelling code imports scikit-learn and
# SciPy, whose thread pools the zygote rightly refuses to fork). Not this package: a rank
# runs the worker of the checkout on its PYTHONPATH (harness bisect --git).
RANK_IMPORTS = (
    "torch",
    "torch.distributed",
    "torch.distributed.tensor",
    "transformers",
    "transformers.configuration_utils",
    "transformers.cache_utils",
    "transformers.masking_utils",
    "transformers.integrations.tensor_parallel",
    "transformers.distributed",
    "harness.contract.outputs",
    "harness.contract.phases",
    "harness.engines.launch.rankside",
)


class TpPlanEngine(Engine):
    name = "tp-plan"
    axes = {"tp": None, "pp": (1,), "sp": (False,), "compile": (False, True)}

    def unsupported_reason(self, settings: dict, model_dir: str | Path | None = None) -> str | None:
        """The base axis checks, then (given the model) whether its heads and widths split
        into tp equal parts and whether transformers has a TP plan for its architecture."""
        reason = super().unsupported_reason(settings)
        if reason or model_dir is None:
            return reason
        tp = int(settings.get("tp", 1))
        if tp == 1:
            return None
        config = json.loads((Path(model_dir) / "config.json").read_text())
        config = config.get("text_config") or config
        for name, aliases in DIVISIBLE_FIELDS.items():
            value = next((config[a] for a in aliases if config.get(a) is not None), None)
            if name == "num_key_value_heads" and value is None:
                continue  # no GQA: the attention heads were checked
            if value is not None and value % tp:
                return f"{name}={value} is not divisible by tp={tp}"
        return _tp_plan_problem(model_dir)

    def launch_plan(self, brief: RunBrief, brief_path: str) -> LaunchPlan:
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        if brief.axes.compile:  # the harness's compile cache: a second run loads the graphs
            env.update(compile_cache.inductor_env(compile_cache.installed_torch_version()))
        if brief.device == "cpu":
            # transformers builds its device mesh on whatever accelerator it sees: on CPU, none
            env["CUDA_VISIBLE_DEVICES"] = ""
            if "OMP_NUM_THREADS" not in os.environ:  # ranks share the cores
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // brief.axes.tp))
        return LaunchPlan(
            world_size=brief.axes.tp,
            argv=[sys.executable, "-m", "harness_tp_plan.worker", brief_path],
            env=env,
            preload=list(RANK_IMPORTS) if brief.device == "cpu" else [],
        )

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        found = {}
        for package in ("torch", "transformers"):
            try:
                found[package] = version(package)
            except PackageNotFoundError:
                found[package] = "not installed"
        return {"engine": self.name, "harness-tp-plan": __version__, **found, "python": sys.version.split()[0]}


def _tp_plan_problem(model_dir: str | Path) -> str | None:
    """Why transformers cannot split this model (no TP plan for its architecture), or None.
    Without a plan every rank would hold the whole model and tp>1 would pass for nothing.

    The answer is kept in the harness cache (engine-probes/), keyed by what decides it: the
    model's config.json, the installed transformers (version, where it is, when its files
    last changed) and this module's own source. Reading a config class imports most of
    transformers' modelling code (its docstrings pull in the auto model classes), several
    seconds of CPU in the harness process of every run; the ranks import it anyway."""
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    try:
        found = find_spec("transformers")  # where it is, without importing it
        installed = version("transformers")
    except (ImportError, ValueError, PackageNotFoundError):
        found = None
    if found is None or not found.origin:
        return _tp_plan_problem_now(model_dir)  # says transformers is missing
    package = Path(found.origin).parent
    key = hashlib.sha256(
        "\n".join(
            [
                (Path(model_dir) / "config.json").read_text(),
                installed,
                str(package),
                str(package.stat().st_mtime_ns),
                str(package.parent.stat().st_mtime_ns),
                Path(__file__).read_text(),
            ]
        ).encode()
    ).hexdigest()[:16]
    cache = cache_dir("engine-probes") / f"tp-plan-{key}.json"
    try:
        return json.loads(cache.read_text())["problem"]
    except (OSError, ValueError, KeyError):
        pass
    problem = _tp_plan_problem_now(model_dir)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"problem": problem}))
        os.replace(tmp, cache)
    except OSError:
        pass  # an unwritable cache costs the next run the import, nothing else
    return problem


def _tp_plan_problem_now(model_dir: str | Path) -> str | None:
    """_tp_plan_problem, asked of transformers itself."""
    try:
        from transformers import AutoConfig
    except ImportError as exc:
        return f"the tp-plan engine needs transformers ({exc})"
    config = AutoConfig.from_pretrained(str(model_dir))
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not getattr(text, "base_model_tp_plan", None):
        arch = (config.architectures or [type(config).__name__])[0]
        return f"transformers has no tensor-parallel plan (base_model_tp_plan) for {arch}"
    return None
