"""A suite's archs taken from the engine's model registry: `archs: {from: registry, ...}`.

Instead of a hand-written `archs:` table, the suite asks the installed engine which
architectures it serves (the engine's `model_registry`, cached per install) and puts each
text generator of the kinds it names on the arch axis, under a name derived from the class
(`Qwen3NextForCausalLM` -> `qwen3-next`). A new architecture in a new engine release then
joins the suite with nobody editing it; the covering planner gives it rows and the lock
keeps the old rows' ids. The lock file also records which architectures the registry gave
when it was written, so that

- a machine without the engine installed (the harness's own CI, `harness list`) still
  lists the suite: the lock's architectures, said as such;
- an architecture that left the registry is said (`notices`), not silently dropped.

This is resolved on the raw YAML, before the schema validates it: the rest of the harness
sees an ordinary `archs:` table.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.inputs.scenarios.schema import ScenarioError

# the class name endings of each kind (vLLM's registry: *ForCausalLM, *LMHeadModel are text
# models, *ForConditionalGeneration the ones that also take images, audio or video)
KIND_SUFFIXES = {"text": ("ForCausalLM", "LMHeadModel"), "multimodal": ("ForConditionalGeneration",)}
LOCK_KEY = "registry"


class LeftOut(BaseModel):
    """Why a registry suite leaves an architecture out, as the census's state: exactly one field."""

    model_config = ConfigDict(extra="forbid")

    refused: str | None = None
    cannot_build: str | None = None

    @model_validator(mode="after")
    def _one(self) -> LeftOut:
        if (self.refused is None) == (self.cannot_build is None):
            raise ValueError("give exactly one of refused, cannot_build, with its reason")
        return self

    @property
    def reason(self) -> str:
        return self.refused if self.refused is not None else str(self.cannot_build)


class RegistrySpec(BaseModel):
    """What `archs: {from: registry}` may say."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: Literal["registry"] = Field(alias="from")
    kinds: list[Literal["text", "multimodal"]] = Field(["text"], min_length=1)
    # how the tiny builder makes the checkpoint: from the transformers class (tiny.py), or,
    # for an architecture transformers has no class for, from vLLM's own model class
    # (tiny_vllm.py). One suite per route keeps each route's refusals in its own exclude
    routes: list[Literal["transformers", "vllm"]] = Field(["transformers"], min_length=1)
    # leave out what a suite beside this file (same engine) already runs: one sweep per arch
    skip_swept: bool = False
    # architecture class (or a glob of classes: `Eagle3*`) -> why this suite leaves it out: a
    # sentence, or the census state it
    # is in with the reason ({refused: ...}: the engine cannot run it here, or not as a model of
    # its own; {cannot_build: ...}: the tiny builder cannot make it), so that `harness archs`
    # puts it there instead of "buildable, not swept"
    exclude: dict[str, str | LeftOut] = {}
    # architecture class -> model entry fields for it ({overrides: ...}, {extra_config: ...})
    models: dict[str, dict] = {}


@dataclass
class Resolution:
    """The archs a registry suite got, where they came from, and what is worth saying."""

    archs: dict[str, str]  # name on the arch axis -> architecture class
    source: str  # "vllm 0.32.0" or "the lock (vllm 0.32.0): vllm is not installed here"
    notices: list[str] = field(default_factory=list)
    # asked of the installed engine (False: read back from the lock)
    live: bool = True
    # the arch classes the suites beside it ran when it was resolved (skip_swept's input)
    swept_beside: frozenset[str] = frozenset()
    # its exclude: arch class -> why it is left out (the census says it)
    left_out: dict[str, str | LeftOut] = field(default_factory=dict)

    def lock_record(self) -> dict:
        """What the lock keeps of it (locked_archs reads it back)."""
        return {"engine": self.source, "archs": self.archs}


def is_registry(archs: object) -> bool:
    return isinstance(archs, dict) and "from" in archs


def axis_name(arch: str) -> str:
    """`Qwen3NextForCausalLM` -> `qwen3-next`, `GPT2LMHeadModel` -> `gpt2`,
    `Qwen3_5MoeForConditionalGeneration` -> `qwen3-5-moe` (an id part: [a-z0-9.-])."""
    stem = arch
    for suffix in (s for kind in KIND_SUFFIXES.values() for s in kind):
        if stem.endswith(suffix) and stem != suffix:
            stem = stem[: -len(suffix)]
            break
    stem = stem.replace("MoE", "Moe")  # one word: HunYuanMoEV1 -> hun-yuan-moe-v1
    stem = re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[a-z])(?=[A-Z])", "-", stem)
    stem = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "-", stem)
    name = re.sub(r"[^a-z0-9.]+", "-", stem.lower()).strip("-.")
    return name or "arch"


def names_for(archs: list[str]) -> dict[str, str]:
    """A distinct axis name per architecture, in the registry's order: a name two classes
    would share (Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration) gets the kind's mark."""
    counts: dict[str, int] = {}
    for arch in archs:
        counts[axis_name(arch)] = counts.get(axis_name(arch), 0) + 1
    named: dict[str, str] = {}
    for arch in archs:
        name = axis_name(arch)
        if counts[name] > 1:
            name += "-mm" if arch.endswith(KIND_SUFFIXES["multimodal"]) else ""
        while name in named:
            name += "-2"
        named[name] = arch
    return named


def parse_spec(raw: object, path: Path) -> RegistrySpec:
    try:
        return RegistrySpec.model_validate(raw)
    except ValidationError as exc:
        problems = [f"  archs.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ScenarioError(f"{path}: invalid scenario file:\n" + "\n".join(problems)) from None


def resolve(raw: dict, path: Path, swept_beside: set[str], engine_python: str | None = None) -> tuple[dict, Resolution]:
    """The raw suite with its `archs:` table filled from the registry (or, without the
    engine, from the lock), and how it was resolved. `engine_python`: the registry of the
    engine in that interpreter (another release's, --engine-env), not the suite's own."""
    spec = parse_spec(raw["archs"], path)
    engine = raw.get("engine", "reference")
    options = {**(raw.get("engine_options") or {}), **({"python": engine_python} if engine_python else {})}
    found, source = _registry(engine, options)
    locked = locked_archs(path)
    notices: list[str] = []
    if found is None:
        if not locked:
            raise ScenarioError(
                f"{path}: archs: from registry needs engine '{engine}' installed ({source}), or the lock file "
                f"that `harness list --coverage --lock {raw.get('suite', path.stem)}` writes where it is"
            )
        table = {name: {"arch": arch, **spec.models.get(arch, {})} for name, arch in locked["archs"].items()}
        resolution = Resolution(
            dict(locked["archs"]), str(locked.get("engine", "?")), live=False, swept_beside=frozenset(swept_beside)
        )
        return {**raw, "archs": table}, resolution
    left_out = {a: why for a in found if (why := excluded(a, spec)) is not None}
    routes = set(spec.routes)
    wanted = [a for a in found if _kind_of(a) in spec.kinds and a not in left_out and build_route(a) in routes]
    if spec.skip_swept:
        wanted = [a for a in wanted if a not in swept_beside]
    chosen = names_for(wanted)
    gone = sorted(set((locked or {}).get("archs", {}).values()) - set(found))
    if gone:
        notices.append(f"suite '{raw.get('suite')}': not in {source}'s model registry, their rows left out: {', '.join(gone)}")
    unknown = sorted(key for key in spec.exclude if not any(fnmatch.fnmatchcase(a, key) for a in found))
    if unknown:
        notices.append(f"suite '{raw.get('suite')}': exclude names {', '.join(unknown)}, which {source}'s registry does not have")
    table = {name: {"arch": arch, **spec.models.get(arch, {})} for name, arch in chosen.items()}
    return {**raw, "archs": table}, Resolution(chosen, source, notices, swept_beside=frozenset(swept_beside), left_out=left_out)


def excluded(arch: str, spec: RegistrySpec) -> str | LeftOut | None:
    """Why the suite leaves `arch` out: its own exclude entry, else the first glob that matches it."""
    if arch in spec.exclude:
        return spec.exclude[arch]
    return next((why for key, why in spec.exclude.items() if fnmatch.fnmatchcase(arch, key)), None)


def build_route(arch: str) -> Literal["transformers", "vllm"] | None:
    """How the tiny builder makes `arch`: from its transformers class, or from vLLM's model
    class (tiny_vllm.py: a class transformers lacks, Step3's table among them); None where the
    builder's interpreter cannot say which classes transformers has."""
    from harness.inputs import models
    from harness.inputs.models import attempts

    classes = attempts.transformers_classes(models.builder_python(arch=arch))
    if classes is None:
        return None
    return "transformers" if arch in classes else "vllm"


def _kind_of(arch: str) -> str | None:
    return next((kind for kind, suffixes in KIND_SUFFIXES.items() if arch.endswith(suffixes)), None)


def _registry(engine: str, options: dict) -> tuple[list[str] | None, str]:
    """The generator architectures of the installed engine's registry (configured with the
    suite's engine options) and its label ("vllm 0.32.0"), or None and why not."""
    from harness.engines import EngineUnavailable, get_engine

    try:
        chosen = get_engine(engine)
    except (KeyError, LookupError, EngineUnavailable) as exc:
        return None, str(exc)
    chosen.configure(options)
    reason = chosen.unavailable_reason()
    if reason:
        return None, f"{engine} is not installed here"
    try:
        registry = chosen.model_registry(say=lambda line: print(f"harness: {line}", file=sys.stderr, flush=True))
        versions = chosen.versions()
    except (EngineUnavailable, OSError, RuntimeError) as exc:
        return None, f"its model registry could not be asked: {exc}"
    if registry is None:
        return None, f"engine '{engine}' has no model registry"
    label = f"{engine} {versions.get(engine, '')}".strip()
    return sorted(a for a in registry if _kind_of(a)), label


def locked_archs(source: Path) -> dict | None:
    """The lock's record of the registry ({"engine": "vllm 0.32.0", "archs": {name: class}}), or None."""
    from harness.inputs.scenarios.covering import lock_path

    path = lock_path(source)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text()).get(LOCK_KEY)
    except (OSError, ValueError, AttributeError):
        return None  # the covering planner says what is wrong with the lock
    ok = isinstance(record, dict) and isinstance(record.get("archs"), dict)
    return record if ok and all(isinstance(v, str) for v in record["archs"].values()) else None


def suite_archs(suite, source: Path | None = None) -> set[str]:
    """The architecture classes a loaded suite runs: its `archs:` entries and `model:` as
    tiny checkpoints ({arch:}), zoo models (their recipe's config) and local checkpoints
    (their config.json, next to `source`); what `skip_swept` leaves to it."""
    from harness.contract.known_bugs import MODEL_ARCH
    from harness.inputs.scenarios.scenario import model_facts
    from harness.inputs.scenarios.schema import ARCH_AXIS
    from harness.inputs.zoo import get_recipe

    found: set[str] = set()
    for name in suite.archs or [None]:
        model = suite.archs[name] if name else suite.model
        facts = model_facts(suite, {ARCH_AXIS: name} if name else {}, source or Path("."))
        if facts:
            found.add(facts[MODEL_ARCH])
        elif isinstance(model, str):
            try:
                found.update((get_recipe(model).config.get("architectures") or [])[:1])
            except KeyError:
                pass  # not a zoo name: the run says so
    return found
