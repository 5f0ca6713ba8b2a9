"""Goldens: the eager single-device outputs every scenario of a suite is held to.

A golden is an engine-outputs directory (harness/contract/outputs.py) plus manifest.json,
the record of what made it. Before a scenario is compared, the manifest is checked
against what is being tested; a golden made from another model, other workloads,
another dtype or other settings is an error that names each difference and the
command that regenerates it. Engine and torch versions are recorded and shown,
not enforced: comparing a new engine version against an old golden is the point
of a regression gate.

The manifest also records the sha256 of every file of the golden (`files_sha256`),
checked on every load: a damaged golden (flipped bytes, a truncated file, a bad
merge) is an error naming the file, never a `fail` that blames the engine for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.contract.axes import filled
from harness.contract.jsonfile import JSONObject, read_json
from harness.contract.outputs import EngineOutputs
from harness.contract.roots import builtin_golden, golden_dir, golden_root
from harness.contract.runbrief import MEDIA, entry_list

if TYPE_CHECKING:
    from harness.inputs.scenarios.schema import EvalDef

MANIFEST = "manifest.json"
# the per-item eval results, beside the outputs
EVALS_FILE = "evals.json"
# Manifest fields that must match for a golden to apply; the rest is information.
BINDING_FIELDS = ("model", "model_sha256", "workload_sha256", "engine", "dtype", "settings")
# manifest field: {file name: sha256} of every other file of the golden
DIGESTS = "files_sha256"
# manifest field: "torch==.. transformers==.. tokenizers==..", what built a tiny checkpoint
BUILDER = "model_builder"


class GoldenError(RuntimeError):
    """A golden that is missing or does not match what is being tested. `headline` is
    the one line a verdict shows (console, summary lists): what is wrong and what to do."""

    def __init__(self, message: str, headline: str | None = None):
        super().__init__(message)
        self.headline = headline or message.splitlines()[0]


def regenerate_hint(suite: str) -> str:
    return f"regenerate it with `harness golden {suite}` (or `make golden` for every suite)"


def leftover_hint(directory: Path) -> str | None:
    """What a `harness golden` stopped between its two renames left beside the golden's place:
    the finished new golden (.NAME.new) and/or the one it replaces (.NAME.old)."""
    new, old = _staging(directory), _previous(directory)
    if (new / MANIFEST).exists():
        return (
            f"a golden run finished but was not put in place: {new} holds it whole "
            f"(`mv {new} {directory}` installs it, or run `harness golden` again)"
        )
    if (old / MANIFEST).exists():
        return f"the previous golden is in {old} (`mv {old} {directory}` puts it back)"
    return None


def _staging(target: Path) -> Path:
    return target.with_name(f".{target.name}.new")


def _previous(target: Path) -> Path:
    return target.with_name(f".{target.name}.old")


def golden_place(key: str) -> Path:
    """Where the golden of `key` (a suite, or suite/arch) will be written, checked before its run
    so that a golden that cannot be stored is said before the run, not after: a symlinked
    golden is followed (its target is replaced, the link kept); the place must be writable."""
    target = golden_root() / key
    if target.is_symlink():
        resolved = target.resolve()
        if resolved.exists() and not resolved.is_dir():
            raise GoldenError(
                f"{target} is a symlink to {resolved}, which is not a directory: remove the link, or point it at a directory"
            )
        target = resolved
    existing = next(p for p in (target.parent, *target.parent.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise GoldenError(
            f"cannot write the golden of '{key}': {existing} is not a writable directory "
            "(make it writable, or set $HARNESS_GOLDEN_DIR to a writable place)"
        )
    if target.exists() and not os.access(target, os.W_OK | os.X_OK):
        raise GoldenError(f"cannot replace the golden of '{key}': {target} is read-only (make it writable)")
    return target


def damage_hint(suite: str) -> str:
    return f"restore it (`git checkout golden/{suite}` for a committed golden) or regenerate it with `harness golden {suite}`"


def make_manifest(
    *,
    suite: str,
    model: str,
    model_sha256: str,
    workload_sha256: str,
    engine: str,
    dtype: str,
    settings: JSONObject,
    versions: dict[str, str],
    model_builder: str | None = None,
) -> JSONObject:
    """`model_builder`: the libraries that built a tiny checkpoint (harness/inputs/models), recorded
    (not binding) so a checkpoint that differs says which libraries made which."""
    manifest: JSONObject = {
        "suite": suite,
        "model": model,
        "model_sha256": model_sha256,
        "workload_sha256": workload_sha256,
        "engine": engine,
        "dtype": dtype,
        "settings": settings,
        "versions": versions,
    }
    if model_builder:
        manifest[BUILDER] = model_builder
    return manifest


def workload_checksum(workloads: list[JSONObject]) -> str:
    """The manifest's `workload_sha256`: over the tokenized workloads (harness/inputs/workloads.py)
    with each image / video / audio file as its *contents'* digest (paths differ between
    machines)."""

    def digest(entry: str | list[str] | None) -> list[str] | str | None:
        digests = [_sha256(Path(p)) for p in entry_list(entry)]
        return digests if isinstance(entry, list) else digests[0] if digests else None

    portable = [{**w, **{f: [digest(e) for e in w[f]] for f in MEDIA if f in w}} for w in workloads]
    return hashlib.sha256(json.dumps(portable, sort_keys=True).encode()).hexdigest()


@dataclass
class Reference:
    """What a run is held to: a golden's outputs and per-item eval results, where it lives,
    and the versions that differ between the golden and this run (shown, not enforced)."""

    directory: Path
    manifest: JSONObject
    outputs: EngineOutputs
    evals: dict[str, JSONObject]
    version_drift: dict[str, dict[str, object]]


def load_reference(expected: JSONObject, eval_defs: Sequence[EvalDef] = (), builder_python: str | None = None) -> Reference:
    """The golden of `expected['suite']`, after checking that its files are intact, that its
    manifest matches what is being tested and that it scored every eval of `eval_defs`;
    else a GoldenError that says what is wrong and how to mend it. `builder_python`: the
    interpreter that built this run's tiny checkpoint (named when the checkpoints differ)."""
    suite = expected["suite"]
    directory = golden_dir(suite)
    if not (directory / MANIFEST).exists():
        raise GoldenError(f"no golden for suite '{suite}' in {directory}; {leftover_hint(directory) or regenerate_hint(suite)}")
    try:
        manifest = read_json(directory / MANIFEST)
    except (OSError, ValueError) as exc:
        # the ValueError names the file and what it holds
        detail = str(exc) if isinstance(exc, ValueError) else f"{directory / MANIFEST} ({exc.strerror or exc})"
        raise GoldenError(f"the golden of suite '{suite}' has an unreadable manifest: {detail}; {damage_hint(suite)}") from exc
    try:
        evals = read_json(directory / EVALS_FILE) if eval_defs and (directory / EVALS_FILE).exists() else {}
    except ValueError as exc:
        # damaged since it was stored (verify_files would name it too), or stored broken
        raise GoldenError(f"golden file {exc}; {damage_hint(suite)}") from exc
    verify_files(directory, manifest, suite)
    check_manifest(directory, manifest, expected, builder_python)
    check_evals(directory / EVALS_FILE, evals, suite, eval_defs)
    drift = version_drift(manifest, expected["versions"])
    try:
        outputs = EngineOutputs.load(directory)
    except Exception as exc:  # noqa: BLE001 - digests matched, yet unreadable: still the golden's fault
        raise GoldenError(
            f"the golden of suite '{suite}' cannot be read ({directory}: {type(exc).__name__}: {exc}); {damage_hint(suite)}"
        ) from exc
    return Reference(directory, manifest, outputs, evals, drift)


def check_manifest(directory: Path, manifest: JSONObject, expected: JSONObject, builder_python: str | None = None) -> None:
    """A golden made for something else (another model, workloads, dtype, settings) is a
    GoldenError naming each difference. Where only the checkpoint differs, the error says
    which libraries built which and how to build the golden's, and never offers to remake a
    committed golden to make the difference go away (the golden is not what is wrong)."""
    suite = expected["suite"]
    fields = [key for key in BINDING_FIELDS if _differs(key, manifest, expected)]
    if not fields:
        return
    diffs = [f"{key}: golden has {manifest.get(key)!r}, this run has {expected[key]!r}" for key in fields]
    if fields == ["model_sha256"]:
        why, fix = model_difference(directory, manifest, expected, builder_python)
        raise GoldenError(
            f"the golden of suite '{suite}' ({directory}) was made on another checkpoint of the same model:\n  "
            + "\n  ".join(diffs)
            + f"\n{why}\n{fix}",
            headline=f"golden of '{suite}' does not match: {_diff_line(manifest, expected)}: {why}; {fix}",
        )
    raise GoldenError(
        f"the golden of suite '{suite}' ({directory}) was made for something else:\n  "
        + "\n  ".join(diffs)
        + f"\n{regenerate_hint(suite)}",
        headline=_mismatch_headline(suite, manifest, expected),
    )


def libraries(text: str) -> dict[str, str]:
    """`torch==2.13.0+cpu transformers==5.19.0 ...` -> {name: version}."""
    return dict(part.split("==", 1) for part in text.split() if "==" in part)


def golden_builder(manifest: JSONObject) -> tuple[dict[str, str], bool]:
    """The libraries that built the golden's checkpoint, and whether the manifest recorded
    them. A golden made before `model_builder` was recorded had its tiny checkpoint built by
    its own engine environment: the torch and transformers of its `versions`."""
    if manifest.get(BUILDER):
        return libraries(manifest[BUILDER]), True
    versions = manifest.get("versions") or {}
    return {k: versions[k] for k in ("torch", "transformers") if versions.get(k)}, False


def model_difference(directory: Path, manifest: JSONObject, expected: JSONObject, builder_python: str | None) -> tuple[str, str]:
    """Why this run's checkpoint is not the golden's, and what to do: (why, fix)."""
    suite = expected["suite"]
    committed = is_committed(directory)
    remake = (
        f"`harness golden {suite}` remakes the golden with this run's checkpoint"
        if not committed
        else f"the golden is committed: remake it (`harness golden {suite}`, and commit it) only for a model changed on purpose"
    )
    run_libs = libraries(expected.get(BUILDER) or "")
    # not a checkpoint the harness built: the files themselves differ
    if not run_libs:
        return (
            "this run's checkpoint is not the one the golden was made on",
            f"restore the checkpoint the golden was made on; {remake}",
        )
    golden_libs, recorded = golden_builder(manifest)
    differ = {k: (golden_libs[k], v) for k, v in run_libs.items() if k in golden_libs and golden_libs[k] != v}
    by = builder_python or "?"
    native = engine_defined_arch(str(expected.get("model", "")))
    where = (
        "the harness's own environment"
        if by == sys.executable
        else f"{by} ({native} is an architecture only the engine defines: the engine's config class builds it)"
        if native
        else f"{by} (the harness's own environment lacks torch, transformers or tokenizers)"
    )
    if not differ:
        said = "recorded" if recorded else "inferred from the golden's engine versions"
        return (
            f"the tiny checkpoint was built with the golden's libraries ({expected[BUILDER]}; the golden's {said}), "
            "so the model's request or the builder's code (harness/inputs/models/tiny*.py) changed",
            f"undo that change, or, for a model changed on purpose, {remake}",
        )
    this = ", ".join(f"{k} {new}" for k, (_, new) in differ.items())
    theirs = ", ".join(f"{k} {old}" for k, (old, _) in differ.items())
    note = "" if recorded else " (not recorded in its manifest: its engine environment's, which built tiny checkpoints then)"
    pins = " ".join(f"'{k}=={old}'" for k, (old, _) in differ.items())
    fix = (
        "the checkpoint must be built as the golden's was: by the engine's default environment, the tested release "
        "that made the golden (`harness install vllm`), which the harness uses for this architecture whenever it exists"
        if native
        else f"the checkpoint must be built as the golden's was: install {pins} into the harness's environment "
        f"(`{sys.executable} -m pip install {pins}`), which builds tiny checkpoints for every engine environment"
    )
    if not committed:
        fix += f"; or, for a golden of your own, {remake}"
    return (
        f"this run's tiny checkpoint was built with {this} by {where}, the golden's with {theirs}{note}: "
        "other libraries build other bytes",
        fix,
    )


def engine_defined_arch(model_label: str) -> str | None:
    """The architecture of a tiny checkpoint's label (`arch:Step3TextForCausalLM seed=0 ...`)
    where only an engine defines it (models/tiny_vllm.py), else None."""
    from harness.inputs.models import tiny_vllm

    arch = model_label.removeprefix("arch:").split(" ", 1)[0] if model_label.startswith("arch:") else ""
    return arch if arch and tiny_vllm.builds(arch) else None


def is_committed(directory: Path) -> bool:
    """Whether a golden is part of a repository or of the installed package (its manifest
    tracked by git, or shipped): what nobody should remake to make a mismatch go away."""
    directory = Path(directory)
    if directory.resolve().is_relative_to(builtin_golden().resolve()):
        return True
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), "ls-files", "--error-unmatch", MANIFEST], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def file_digests(directory: Path) -> dict[str, str]:
    """sha256 of every file of a golden directory but its manifest (goldens are small:
    one pass over each file, once per load)."""
    return {
        p.name: _sha256(p)
        for p in sorted(Path(directory).iterdir())
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_digests(directory: Path) -> JSONObject:
    """Write the digests of a golden's files into its manifest (store_golden; also how the
    goldens committed before digests existed got theirs, without regenerating them)."""
    path = Path(directory) / MANIFEST
    manifest: JSONObject = json.loads(path.read_text())
    manifest[DIGESTS] = file_digests(Path(directory))
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def verify_files(directory: Path, manifest: JSONObject, suite: str) -> None:
    """Every file the manifest lists must be there with the recorded sha256, and every
    file the harness reads must be listed; else a GoldenError naming the file."""
    recorded = manifest.get(DIGESTS)
    if not isinstance(recorded, dict):
        raise GoldenError(
            f"the golden of suite '{suite}' ({directory}) records no digests of its files "
            f"(made before goldens carried them), so damage cannot be told apart from an engine bug; "
            f"{regenerate_hint(suite)}"
        )
    present = file_digests(directory)
    for name, digest in sorted(recorded.items()):
        path = Path(directory) / name
        if name not in present:
            raise GoldenError(f"golden file {path} is missing (its manifest lists it); {damage_hint(suite)}")
        if present[name] != digest:
            raise GoldenError(
                f"golden file {path} is damaged: its sha256 is not the one its manifest recorded "
                f"when the golden was stored; {damage_hint(suite)}"
            )
    unlisted = sorted(set(present) - set(recorded))
    if unlisted:
        raise GoldenError(
            f"golden file {Path(directory) / unlisted[0]} is not in its manifest's digests "
            f"(added or renamed after the golden was stored); {damage_hint(suite)}"
        )


def _short(key: str, value: object) -> str:
    """A manifest value for one line: a checksum cut to its first 8 hex digits."""
    if key.endswith("_sha256") and isinstance(value, str) and len(value) > 16:
        return repr(value[:8] + "..")
    return repr(value)


def _mismatch_headline(suite: str, manifest: JSONObject, expected: JSONObject) -> str:
    """The fix, then every differing field, short: what a console line can carry (the
    report's lists cut a verdict's line at 200 characters)."""
    return f"golden of '{suite}' does not match (remake: `harness golden {suite}`): {_diff_line(manifest, expected)}"


def _diff_line(manifest: JSONObject, expected: JSONObject) -> str:
    return "; ".join(
        f"{key} golden {_short(key, manifest.get(key))} run {_short(key, expected[key])}"
        for key in BINDING_FIELDS
        if _differs(key, manifest, expected)
    )


def _differs(key: str, manifest: JSONObject, expected: JSONObject) -> bool:
    """Whether a binding field differs. Settings are compared with every axis they leave out
    at its default: a suite that adds an axis to its matrix, its golden at the axis's default,
    asks for the run its golden already is."""
    if key == "settings" and isinstance(manifest.get(key), dict) and isinstance(expected[key], dict):
        return filled(manifest[key]) != filled(expected[key])
    golden: object = manifest.get(key)
    run: object = expected[key]
    return golden != run


def version_drift(manifest: JSONObject, versions: Mapping[str, str]) -> dict[str, dict[str, object]]:
    """Versions that differ between the golden and this run (reported, not enforced)."""
    old: dict[str, object] = manifest.get("versions", {})
    return {k: {"golden": old.get(k), "now": v} for k, v in versions.items() if old.get(k) != v}


def save_evals(directory: Path, results: dict[str, JSONObject]) -> None:
    """The golden's per-item eval results (response, answers, correctness per item)."""
    (Path(directory) / EVALS_FILE).write_text(json.dumps(results, indent=1, sort_keys=True))


def check_evals(path: Path, stored: JSONObject, key: str, eval_defs: Sequence[EvalDef]) -> None:
    """The golden's per-item eval results (`stored`, read from `path`) must hold every eval
    of `eval_defs`, scored on the task the suite names; else a GoldenError."""
    missing = [e.name for e in eval_defs if e.name not in stored]
    if missing:
        raise GoldenError(
            f"the golden of suite '{key}' has no results for eval(s) {', '.join(missing)} ({path}); {regenerate_hint(key)}"
        )
    for e in eval_defs:
        if stored[e.name].get("task") not in (None, e.task):
            raise GoldenError(
                f"the golden of suite '{key}' scored eval '{e.name}' on task "
                f"'{stored[e.name]['task']}', the suite now says '{e.task}'; {regenerate_hint(key)}"
            )


def store_golden(
    outputs_dir: Path, manifest: JSONObject, evals: dict[str, JSONObject] | None = None, drop: Sequence[str] = ()
) -> Path:
    """Install a finished golden run as the suite's golden (replacing the old one whole).
    `evals`: the per-item eval results (evals.json); `drop`: workloads whose tensors are
    not kept (eval generations: their per-item results are what the golden holds)."""
    # the project's, never the shipped suites' (read-only)
    target = golden_place(manifest["suite"])
    staging = _staging(target)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    outputs = EngineOutputs.load(outputs_dir)
    # keep the stored golden stable across regenerations
    outputs.meta.pop("timings", None)
    outputs.tensors = {k: v for k, v in outputs.tensors.items() if k.split(".", 1)[0] not in drop}
    outputs.save(staging)
    if evals:
        save_evals(staging, evals)
    (staging / MANIFEST).write_text(
        json.dumps({**manifest, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1, sort_keys=True)
    )
    record_digests(staging)
    _swap_in(staging, target)
    return target


def _swap_in(staging: Path, target: Path) -> None:
    """The old golden stays whole until the new one is in place: old -> .old, new -> target,
    then the old is removed. A kill between the renames leaves both, named by leftover_hint."""
    previous = _previous(target)
    shutil.rmtree(previous, ignore_errors=True)
    if target.exists():
        os.replace(target, previous)
    os.replace(staging, target)
    shutil.rmtree(previous, ignore_errors=True)
