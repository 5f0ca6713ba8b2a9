"""Compile artefacts that outlive a run: one directory per torch version under the cache root.

    <cache root>/compile/torch-<version>/inductor   TORCHINDUCTOR_CACHE_DIR (reference engine)
    <cache root>/compile/torch-<version>/triton     TRITON_CACHE_DIR (GPU kernels)
    <cache root>/compile/torch-<version>/vllm-<v>   VLLM_CACHE_ROOT (vLLM's own compile cache)

Without this, inductor writes to /tmp/torchinductor_<user>: lost with the machine, so
every fresh CI agent paid for every compile. With it, a second run loads
the compiled graphs (inductor's FX graph cache and AOT-autograd cache, both on by
default in torch 2.13; set explicitly here so a torch default change cannot turn
them off silently) and CI can carry the directory between runs (ci-examples/).

Why it cannot serve a stale entry: torch keys every FX-graph / AOT-autograd entry by
the graph itself (ops, shapes, dtypes, strides), the inductor config, the device and
torch's own version and source hash, so a changed model misses and compiles afresh.
vLLM keys its `torch_compile_cache/<hash>` by its config, the model's code and the
compiler's hash. The directory is per torch version on top of that, so an upgrade
starts clean and the old version's directory can simply be deleted (CI keys its
cache on the torch version and the lockfile for the same reason).

Safe to share: inductor writes every entry with an atomic rename and builds C++
kernels under a file lock, so concurrent ranks and runs may share the directory.

A variable the user already set wins (their own cache, or TORCHINDUCTOR_FX_GRAPH_CACHE=0
to turn it off); HARNESS_COMPILE_CACHE=0 leaves torch's and vLLM's defaults alone.
Standard library only: the engine registry imports this.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.contract.roots import cache_dir
from harness.contract.settings.variables import COMPILE_CACHE

OFF_ENV = COMPILE_CACHE.name


def torch_cache_root(torch_version: str) -> Path:
    """The compile cache of one torch version (`2.13.0+cpu` -> .../compile/torch-2.13.0-cpu)."""
    # absolute: a relative HARNESS_CACHE (CI workspaces) must mean the same for every rank
    return cache_dir("compile").absolute() / f"torch-{re.sub(r'[^A-Za-z0-9._-]', '-', torch_version)}"


def installed_torch_version() -> str:
    """The harness interpreter's torch version, without importing torch."""
    from importlib.metadata import version

    return version("torch")


def _unless_set(env: dict[str, str]) -> dict[str, str]:
    if not COMPILE_CACHE.on():
        return {}
    return {k: v for k, v in env.items() if k not in os.environ}


def inductor_env(torch_version: str) -> dict[str, str]:
    """Rank env for an engine that runs torch.compile itself (the reference engine)."""
    root = torch_cache_root(torch_version)
    return _unless_set(
        {
            "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "TRITON_CACHE_DIR": str(root / "triton"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        }
    )


def vllm_env(torch_version: str, vllm_version: str, faults: list[str] | None = None) -> dict[str, str]:
    """vLLM puts its inductor and triton caches under VLLM_CACHE_ROOT itself
    (torch_compile_cache/<hash>/inductor_cache): the root is all it needs.

    A run with fault switches gets a root of its own per set of faults, always (a user's
    VLLM_CACHE_ROOT included): a fault can change the graph Dynamo traces
    (compile-drop-deepstack), and vLLM's cache key covers its config and the model's
    code, not a patched forward, so a clean run must never find those artifacts."""
    root = torch_cache_root(torch_version) / f"vllm-{re.sub(r'[^A-Za-z0-9._-]', '-', vllm_version)}"
    if faults:
        return {
            "VLLM_CACHE_ROOT": str(
                root.parent / f"{root.name}-faults-{re.sub(r'[^A-Za-z0-9._-]', '-', '+'.join(sorted(faults)))}"
            )
        }
    return _unless_set({"VLLM_CACHE_ROOT": str(root)})
