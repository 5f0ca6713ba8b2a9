"""What a scenario's `model:` names, and the checkpoint directory it resolves to.

    model: tiny-llama                                  a zoo model (harness/inputs/zoo): built here, checksummed
    model: {path: /ckpt/my-llama}                      a local HF checkpoint directory
    model: {hub: org/name, revision: 0123abcd...}      a hub model at a pinned revision (huggingface_hub cache)
    model: {arch: Qwen3ForCausalLM, seed: 0, overrides: {num_hidden_layers: 4}}
                                                       a tiny random checkpoint of a transformers architecture

Every source resolves to a directory in HF layout (config.json, safetensors, tokenizer)
and an identity: a label that says where it came from and the sha256 of its content
(harness/inputs/models/identity.py), which the golden's manifest records. A tiny checkpoint is
built by harness/inputs/models/tiny.py in ONE place whatever engine environment runs it: the
harness's own interpreter (`builder_python`), so a vLLM release with another transformers
(`--engine-env vllm==0.22.1`) meets the same bytes as the golden (another transformers
builds other random weights and writes another config.json). Only where the harness's own
interpreter lacks torch, transformers or tokenizers does the engine's build it. The
libraries that built it (`ResolvedModel.builder`) go into the golden's manifest
(`model_builder`), so a checkpoint that still differs says which libraries made which.
It is cached by everything that made it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from pydantic import BaseModel, ConfigDict, Field

from harness.contract import torchvision_guard
from harness.contract.provenance import tested_requirement
from harness.contract.roots import cache_dir
from harness.inputs.models.identity import checkpoint_digest

TINY_BUILDER = Path(__file__).with_name("tiny.py")
# tiny.py runs as a script (no harness import): the torchvision guard is loaded by its path first
TORCHVISION_GUARD = Path(torchvision_guard.__file__)
_BUILDER_BOOT = (
    "import importlib.util, runpy, sys\n"
    "spec = importlib.util.spec_from_file_location('torchvision_guard', sys.argv[1])\n"
    "guard = importlib.util.module_from_spec(spec); spec.loader.exec_module(guard); guard.install()\n"
    "sys.argv = sys.argv[2:]; sys.path.insert(0, sys.argv[0].rpartition('/')[0])\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
TINY_BUILDER_FILES = (TINY_BUILDER, *(Path(__file__).with_name(f) for f in ("tiny_mm.py", "tiny_vllm.py")))  # what the build runs
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# what tiny.py imports, and what decides its bytes
BUILDER_LIBRARIES = ("torch", "transformers", "tokenizers")


class ModelError(Exception):
    """The model a scenario names cannot be had: the message says why and what to do."""


class BuildTimedOut(ModelError):
    """A tiny build that did not end within the time it was given (build_tiny's timeout_s)."""


class _Ref(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PathModel(_Ref):
    path: str = Field(min_length=1)

    @property
    def label(self) -> str:
        return f"path:{self.path}"


class HubModel(_Ref):
    hub: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str = Field(min_length=1, description="a commit hash (or tag): what the golden was made on")

    @property
    def label(self) -> str:
        return f"hub:{self.hub}@{self.revision}"


class ArchModel(_Ref):
    arch: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    seed: int = 0
    overrides: dict = Field(default_factory=dict)  # fields the config class declares
    # Keys the config class does not declare but the engine reads (real config.json files
    # carry them, e.g. GLM-4.5's head_dim): written into config.json as they are.
    extra_config: dict = Field(default_factory=dict)

    @property
    def label(self) -> str:
        extra = f" {json.dumps(self.overrides, sort_keys=True)}" if self.overrides else ""
        if self.extra_config:
            extra += f" extra_config={json.dumps(self.extra_config, sort_keys=True)}"
        return f"arch:{self.arch} seed={self.seed}{extra}"


# A zoo model is named by a plain string.
ModelRef = Union[str, PathModel, HubModel, ArchModel]


def model_type_of(ref: ModelRef) -> str | None:
    """The config.json model type a model entry names, as far as it can be told without
    building or downloading anything: a zoo model's config, a checkpoint's config.json,
    an architecture class through transformers' own tables; None when it cannot (a hub
    model, transformers not installed, a class it does not list)."""
    if isinstance(ref, str):
        from harness.inputs import zoo

        try:
            return str(zoo.get_recipe(ref).config.get("model_type", "llama"))
        except KeyError:
            return None
    if isinstance(ref, PathModel):
        try:
            return json.loads((Path(ref.path) / "config.json").read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            return None
    if isinstance(ref, ArchModel):
        return _arch_model_type(ref.arch)
    return None


def _arch_model_type(arch: str) -> str | None:
    try:
        from transformers.models.auto import modeling_auto
    except ImportError:
        return None
    for name in dir(modeling_auto):
        table = getattr(modeling_auto, name)
        if name.endswith("_MAPPING_NAMES") and isinstance(table, dict):
            for model_type, classes in table.items():
                if arch == classes or (isinstance(classes, (tuple, list)) and arch in classes):
                    return str(model_type)
    return None


@dataclass(frozen=True)
class ResolvedModel:
    directory: Path
    label: str  # the golden manifest's `model`
    sha256: str  # the golden manifest's `model_sha256`
    # A tiny checkpoint's builder: the libraries that built it ("torch==2.13.0+cpu
    # transformers==5.19.0 tokenizers==0.23.3", the golden manifest's `model_builder`) and
    # the interpreter they are in; None for a checkpoint the harness did not build.
    builder: str | None = None
    builder_python: str | None = None


def builder_python(*fallbacks: str | None, arch: str | None = None) -> str:
    """The interpreter that builds tiny checkpoints: the harness's own, for every engine
    environment, so that a scenario run on vLLM 0.22.1 (transformers 5.5.4) and its golden
    made on 0.32.0 (5.19.0) hold the same checkpoint. Only where the harness's own lacks
    what tiny.py imports, or the arch is one only vLLM defines (tiny_vllm.py: its config
    class is vLLM's), the first of `fallbacks` (the engine's default environment, then
    the tested one) that exists; the checkpoint's digest then follows that interpreter's
    libraries, and a golden mismatch says so (golden.py)."""
    from harness.inputs.models import tiny_vllm

    if _harness_can_build() and not (arch and tiny_vllm.builds(arch)):
        return sys.executable
    for python in fallbacks:
        if python and os.access(python, os.X_OK):
            return python
    return sys.executable  # its build fails saying what it lacks


def _harness_can_build() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in BUILDER_LIBRARIES)


def resolve(ref: ModelRef, python: str, base_dir: Path | None = None) -> ResolvedModel:
    """The checkpoint of `ref`. `python` builds a tiny checkpoint (`builder_python()`: the
    harness's own interpreter, whatever engine environment runs it); `base_dir` anchors a
    relative `path:` (the scenario file's folder)."""
    if isinstance(ref, str):
        return _zoo(ref)
    if isinstance(ref, PathModel):
        path = Path(ref.path).expanduser()
        directory = path if path.is_absolute() or base_dir is None else base_dir / path
        return _checkpoint(directory.resolve(), ref.label, f"model path '{ref.path}'")
    if isinstance(ref, HubModel):
        from harness.inputs.models.hub import HubUnavailable, snapshot

        try:
            directory = snapshot(ref.hub, ref.revision)
        except HubUnavailable as exc:
            raise ModelError(str(exc)) from None
        return _checkpoint(directory, ref.label, f"hub model '{ref.hub}@{ref.revision}'")
    built = _checkpoint(build_tiny(ref, python), ref.label, f"tiny {ref.arch}")
    return ResolvedModel(built.directory, built.label, built.sha256, _library_versions(python), python)


def _zoo(name: str) -> ResolvedModel:
    from harness.inputs import zoo

    if not zoo.has_model(name):
        raise ModelError(
            f"unknown model '{name}': the zoo has {', '.join(zoo.model_names())}; for any other model "
            "write model: {path: DIR}, {hub: ORG/NAME, revision: REV} or {arch: CLASS} (harness/inputs/models)"
        )
    try:
        return ResolvedModel(zoo.model_dir(name), name, zoo.get_recipe(name).sha256)
    except zoo.ModelUnavailable as exc:  # a package's model that does not load
        raise ModelError(str(exc)) from None


def _checkpoint(directory: Path, label: str, what: str) -> ResolvedModel:
    problem = checkpoint_problem(directory)
    if problem:
        raise ModelError(
            f"{what}: {directory} is not a checkpoint: {problem}. A checkpoint directory holds "
            "config.json, model.safetensors (or its index) and a tokenizer (tokenizer.json)."
        )
    return ResolvedModel(directory, label, checkpoint_digest(directory))


def checkpoint_problem(directory: Path) -> str | None:
    if not directory.is_dir():
        return "no such directory"
    if not (directory / "config.json").is_file():
        return "no config.json"
    if not any((directory / f).is_file() for f in WEIGHT_FILES):
        return f"no {' or '.join(WEIGHT_FILES)}"
    if not any((directory / f).is_file() for f in TOKENIZER_FILES):
        return f"no tokenizer ({', '.join(TOKENIZER_FILES)})"
    return None


# ---------------------------------------------------------------------------------
# tiny random checkpoints


def build_tiny(ref: ArchModel, python: str, timeout_s: float | None = None) -> Path:
    """The cached tiny checkpoint of `ref` as `python` builds it; built on first use (the
    build stopped, and a ModelError, after `timeout_s`)."""
    target = tiny_target(ref, python)
    if checkpoint_problem(target) is None:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # concurrent scenarios: one builds, the others wait
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if checkpoint_problem(target) is not None:
            _run_builder(ref, python, target, timeout_s)
    return target


def tiny_target(ref: ArchModel, python: str) -> Path:
    """Where the tiny checkpoint of `ref`, as `python` builds it, is cached."""
    return cache_dir("models") / "tiny" / f"{ref.arch}-{tiny_key(ref, python)}"


def tiny_key(ref: ArchModel, python: str) -> str:
    """Everything that decides the bytes: the request, the builder, the corpus and the
    versions of the libraries in the interpreter that builds."""
    parts = [ref.label, *(f.read_text() for f in TINY_BUILDER_FILES), _corpus_digest(), _library_versions(python)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# once per interpreter per harness process, not per scenario
@functools.cache
def _library_versions(python: str) -> str:
    code = f"import importlib.metadata as m\nprint(' '.join(f'{{p}}=={{m.version(p)}}' for p in {BUILDER_LIBRARIES!r}))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(f"cannot run the engine's interpreter {python} to build a tiny model ({exc})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelError(
            f"the engine's interpreter {python} lacks what a tiny model needs "
            f"(torch, transformers, tokenizers): {last}; install them there: "
            f"`{python} -m pip install '{tested_requirement('transformers')}' tokenizers`"
        )
    return done.stdout.strip()


def _corpus() -> Path:
    """The tokenizer's training text (the vendored GSM8K train set), one text a line."""
    from harness.inputs.zoo import tokenizer_corpus

    path = cache_dir("models") / "tiny" / "corpus.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".corpus.{os.getpid()}")
        tmp.write_text("\n".join(text.replace("\n", " ") for text in tokenizer_corpus()))
        os.replace(tmp, path)
    return path


# the shipped corpus does not change under a running harness
@functools.cache
def _corpus_digest() -> str:
    return hashlib.sha256(_corpus().read_bytes()).hexdigest()


def builder_command(ref: ArchModel, python: str, out: Path) -> list[str]:
    """The tiny builder's command line, with the torchvision guard it needs wherever a
    torchvision whose C ops cannot load is installed (tests build by it too)."""
    return [
        python,
        "-c",
        _BUILDER_BOOT,
        str(TORCHVISION_GUARD),
        str(TINY_BUILDER),
        "--arch",
        ref.arch,
        "--seed",
        str(ref.seed),
        "--overrides",
        json.dumps(ref.overrides),
        "--extra-config",
        json.dumps(ref.extra_config),
        "--corpus",
        str(_corpus()),
        "--out",
        str(out),
    ]


def _run_builder(ref: ArchModel, python: str, target: Path, timeout_s: float | None = None) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{ref.arch}-", dir=target.parent))
    argv = builder_command(ref, python, staging)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TQDM_DISABLE": "1",
        "OMP_NUM_THREADS": "1",
    }
    try:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BuildTimedOut(f"building a tiny {ref.arch} did not finish within {timeout_s:g} s (stopped)") from None
        if done.returncode != 0:
            raise ModelError(_builder_error(ref, done))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _builder_error(ref: ArchModel, done: subprocess.CompletedProcess) -> str:
    said = [ln[len("tiny-model: ") :] for ln in done.stderr.splitlines() if ln.startswith("tiny-model: ")]
    if said:
        return " ".join(said)
    tail = "\n".join(done.stderr.strip().splitlines()[-15:])
    return f"building a tiny {ref.arch} failed (exit {done.returncode}):\n{tail}"
