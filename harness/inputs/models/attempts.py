"""Whether the tiny builder builds an architecture as it stands (no overrides), asked once.

`harness archs --try-build` (the census of the engine's registry) attempts the tiny checkpoint of every
text-generating architecture no suite runs, through the builder a scenario's `{arch: X}`
goes through (build_tiny, in the interpreter builder_python picks), bounded in time. The
outcome is kept so that a second census is instant: a build that worked is its cached
checkpoint (tiny_target); a refusal is a record under `<cache root>/arch-builds/`. Both are
keyed as the checkpoint is (tiny_key: the architecture, the builder's source, the
tokenizer corpus and the torch / transformers / tokenizers versions of the building
interpreter), so a new transformers or a changed builder asks again.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.contract.roots import cache_dir
from harness.inputs.models import ArchModel, BuildTimedOut, ModelError, build_tiny, checkpoint_problem, tiny_key, tiny_target

# per architecture: a tiny build takes seconds to about a minute on a loaded 2-core machine; one
# that takes longer than this is stopped and said (and tried again by the next --try-build)
BUILD_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BuildAttempt:
    arch: str
    built: bool
    said: str  # the checkpoint's directory, or the builder's complaint
    timed_out: bool = False


def known_attempt(arch: str, python: str) -> BuildAttempt | None:
    """What an earlier attempt found for `arch` as `python` builds it now; None: none was made."""
    ref = ArchModel(arch=arch)
    try:
        target = tiny_target(ref, python)
    except ModelError as exc:  # the building interpreter cannot build at all: that is the answer
        return BuildAttempt(arch, False, " ".join(str(exc).split()))
    if checkpoint_problem(target) is None:
        return BuildAttempt(arch, True, str(target))
    record = _record_file(ref, python)
    try:
        return BuildAttempt(**json.loads(record.read_text()))
    except (OSError, ValueError, TypeError):
        return None  # none, or unreadable: attempted again


def attempt_build(arch: str, python: str, timeout_s: float = BUILD_TIMEOUT_S) -> BuildAttempt:
    """Build the tiny `arch` (the builder's own defaults), within `timeout_s`; a refusal is recorded."""
    ref = ArchModel(arch=arch)
    try:
        return BuildAttempt(arch, True, str(build_tiny(ref, python, timeout_s)))
    except ModelError as exc:
        attempt = BuildAttempt(arch, False, " ".join(str(exc).split()), timed_out=isinstance(exc, BuildTimedOut))
    record = _record_file(ref, python)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(f".{record.name}.{os.getpid()}.{time.monotonic_ns()}")
    tmp.write_text(json.dumps(asdict(attempt)))
    os.replace(tmp, record)
    return attempt


def _record_file(ref: ArchModel, python: str) -> Path:
    return cache_dir("arch-builds") / f"{ref.arch}-{tiny_key(ref, python)}.json"


@functools.cache
def transformers_classes(python: str) -> frozenset[str] | None:
    """The model classes transformers in `python` exports (its lazy module's names: nothing is
    imported), None where it has no transformers: tiny.py builds only these."""
    code = "import json, transformers\nprint(json.dumps([n for n in dir(transformers) if n[:1].isupper()]))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return frozenset(json.loads(done.stdout.strip().splitlines()[-1]))


def record_load(directory: str, engine_version: str, said: str | None) -> None:
    """What the engine said loading the tiny checkpoint in `directory` (None: it loaded and
    generated): bench/vllm_only_builds.py's proof, kept so the census says it without loading."""
    record = _load_file(directory, engine_version)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(f".{record.name}.{os.getpid()}.{time.monotonic_ns()}")
    tmp.write_text(json.dumps({"loaded": said is None, "said": said or ""}))
    os.replace(tmp, record)


def recorded_load(directory: str, engine_version: str) -> tuple[bool, str] | None:
    """(loaded, the engine's words) of an earlier load of the checkpoint in `directory` by this
    engine version; None where none was recorded."""
    try:
        found = json.loads(_load_file(directory, engine_version).read_text())
        return bool(found["loaded"]), str(found["said"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _load_file(directory: str, engine_version: str) -> Path:
    # the checkpoint's directory name is the arch and its build key: a new build is a new record
    return cache_dir("arch-builds") / f"{Path(directory).name}.load-{engine_version}.json"
