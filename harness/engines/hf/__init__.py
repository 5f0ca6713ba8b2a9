"""The `hf` engine: Hugging Face transformers, eager, one process, no parallelism.

An independent golden: it shares no model code with vLLM or the reference engine,
so agreement with it says the golden itself is right (tests/test_vllm.py holds
vLLM's TP1 eager golden to it). Greedy decoding recomputes the whole sequence each
step (no KV cache): slow, but nothing cached can be wrong.

The interpreter: `engine_options: {python: PATH}`, else $HARNESS_HF_PYTHON, else the
harness's own Python (transformers is a test dependency of the harness).
This module stays import-light (stdlib only).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.contract import roots
from harness.contract.launchplan import LaunchPlan
from harness.contract.runbrief import RunBrief
from harness.contract.settings.variables import HF_PYTHON
from harness.engines.base import Capability, Engine

PYTHON_ENV = HF_PYTHON.name
# What the rank imports before its first line of work: torch and transformers' modeling
# code, about 13 CPU-seconds a rank. On CPU the launcher forks the rank from a rank-pool
# zygote that imported them once (harness/engines/launch/pool.py).
RANK_IMPORTS = (
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.processing_auto",
    "harness.engines.hf.worker",
    "harness.contract.outputs",
    "harness.engines.launch.rankside",
)
# The zygote forks no process that runs a thread beyond torch's pools, and transformers
# (through scikit-learn and pandas) imports two libraries that start one at import:
# SciPy's OpenBLAS (one thread: no pool; torch's own BLAS does not read this variable)
# and pyarrow's jemalloc (no background thread).
FORKABLE_ENV = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}


class HfEngine(Engine):
    name = "hf"
    axes = {"tp": (1,), "pp": (1,), "sp": (False,), "compile": (False,)}
    capabilities = frozenset({Capability.OWN_PYTHON})

    def python(self) -> Path:
        chosen = self.options.get("python") or HF_PYTHON.raw() or sys.executable
        return roots.project_path(chosen)

    def unavailable_reason(self) -> str | None:
        python = self.python()
        if str(python) != sys.executable:
            return None if os.access(python, os.X_OK) else f"no Python interpreter at {python} (${PYTHON_ENV})"
        import importlib.util

        if importlib.util.find_spec("transformers") is None:
            from harness.contract.provenance import tested_requirement

            return (
                f"transformers is not installed in this Python; install it: `pip install '{tested_requirement('transformers')}'` "
                "(or the harness's extra: `pip install 'harness[engine-repo]'`)"
            )
        return None

    def launch_plan(self, brief: RunBrief, brief_path: str) -> LaunchPlan:
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(roots.import_root()), os.environ.get("PYTHONPATH")])),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        # importing torch before CUDA_VISIBLE_DEVICES is set is left to a fresh rank
        if brief.device != "cpu":
            return LaunchPlan(world_size=1, argv=[str(self.python()), "-m", "harness.engines.hf.worker", brief_path], env=env)
        return LaunchPlan(
            world_size=1,
            argv=[str(self.python()), "-m", "harness.engines.hf.worker", brief_path],
            env={**env, **FORKABLE_ENV},
            preload=list(RANK_IMPORTS),
        )
