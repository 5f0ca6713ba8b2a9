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
import time
from pathlib import Path

from harness.contract.outputs import EngineOutputs
from harness.jsonfile import read_json
from harness.roots import golden_dir, golden_root

MANIFEST = "manifest.json"
EVALS_FILE = "evals.json"  # the per-item eval results, beside the outputs
# Manifest fields that must match for a golden to apply; the rest is information.
BINDING_FIELDS = ("model", "model_sha256", "workload_sha256", "engine", "dtype", "settings")
DIGESTS = "files_sha256"  # manifest field: {file name: sha256} of every other file of the golden


class GoldenError(RuntimeError):
    """A golden that is missing or does not match what is being tested. `headline` is
    the one line a verdict shows (console, summary lists): what is wrong and what to do."""

    def __init__(self, message: str, headline: str | None = None):
        super().__init__(message)
        self.headline = headline or message.splitlines()[0]


def regenerate_hint(suite: str) -> str:
    return f"regenerate it with `harness golden {suite}` (or `make golden` for every suite)"


def damage_hint(suite: str) -> str:
    return (f"restore it (`git checkout golden/{suite}` for a committed golden) or "
            f"regenerate it with `harness golden {suite}`")


def make_manifest(*, suite: str, model: str, model_sha256: str, workload_sha256: str, engine: str, dtype: str, settings: dict, versions: dict) -> dict:
    return {
        "suite": suite,
        "model": model,
        "model_sha256": model_sha256,
        "workload_sha256": workload_sha256,
        "engine": engine,
        "dtype": dtype,
        "settings": settings,
        "versions": versions,
    }


def load_golden(expected: dict) -> tuple[EngineOutputs, dict]:
    """The golden of `expected['suite']`, after checking its files are intact and its
    manifest matches what is being tested."""
    suite = expected["suite"]
    directory = golden_dir(suite)
    manifest_path = directory / MANIFEST
    if not manifest_path.exists() or not EngineOutputs.exists(directory):
        raise GoldenError(f"no golden for suite '{suite}' in {directory}; {regenerate_hint(suite)}")
    manifest = _read_manifest(manifest_path, suite)
    verify_files(directory, manifest, suite)
    diffs = [
        f"{key}: golden has {manifest.get(key)!r}, this run has {expected[key]!r}"
        for key in BINDING_FIELDS
        if manifest.get(key) != expected[key]
    ]
    if diffs:
        raise GoldenError(
            f"the golden of suite '{suite}' ({directory}) was made for something else:\n  "
            + "\n  ".join(diffs)
            + f"\n{regenerate_hint(suite)}",
            headline=_mismatch_headline(suite, manifest, expected),
        )
    try:
        return EngineOutputs.load(directory), manifest
    except Exception as exc:  # noqa: BLE001 - digests matched, yet unreadable: still the golden's fault
        raise GoldenError(f"the golden of suite '{suite}' cannot be read ({directory}: {type(exc).__name__}: "
                          f"{exc}); {damage_hint(suite)}") from exc


def _read_manifest(path: Path, suite: str) -> dict:
    try:
        return read_json(path)
    except (OSError, ValueError) as exc:  # the ValueError names the file and what it holds
        detail = str(exc) if isinstance(exc, ValueError) else f"{path} ({exc.strerror or exc})"
        raise GoldenError(f"the golden of suite '{suite}' has an unreadable manifest: {detail}; {damage_hint(suite)}") from exc


def file_digests(directory: Path) -> dict[str, str]:
    """sha256 of every file of a golden directory but its manifest (goldens are small:
    one pass over each file, once per load)."""
    return {p.name: _sha256(p) for p in sorted(Path(directory).iterdir())
            if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_digests(directory: Path) -> dict:
    """Write the digests of a golden's files into its manifest (store_golden; also how the
    goldens committed before digests existed got theirs, without regenerating them)."""
    path = Path(directory) / MANIFEST
    manifest = json.loads(path.read_text())
    manifest[DIGESTS] = file_digests(Path(directory))
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def verify_files(directory: Path, manifest: dict, suite: str) -> None:
    """Every file the manifest lists must be there with the recorded sha256, and every
    file the harness reads must be listed; else a GoldenError naming the file."""
    recorded = manifest.get(DIGESTS)
    if not isinstance(recorded, dict):
        raise GoldenError(f"the golden of suite '{suite}' ({directory}) records no digests of its files "
                          f"(made before goldens carried them), so damage cannot be told apart from an engine bug; "
                          f"{regenerate_hint(suite)}")
    present = file_digests(directory)
    for name, digest in sorted(recorded.items()):
        path = Path(directory) / name
        if name not in present:
            raise GoldenError(f"golden file {path} is missing (its manifest lists it); {damage_hint(suite)}")
        if present[name] != digest:
            raise GoldenError(f"golden file {path} is damaged: its sha256 is not the one its manifest recorded "
                              f"when the golden was stored; {damage_hint(suite)}")
    unlisted = sorted(set(present) - set(recorded))
    if unlisted:
        raise GoldenError(f"golden file {Path(directory) / unlisted[0]} is not in its manifest's digests "
                          f"(added or renamed after the golden was stored); {damage_hint(suite)}")


def _short(key: str, value) -> str:
    """A manifest value for one line: a checksum cut to its first 8 hex digits."""
    if key.endswith("_sha256") and isinstance(value, str) and len(value) > 16:
        return repr(value[:8] + "..")
    return repr(value)


def _mismatch_headline(suite: str, manifest: dict, expected: dict) -> str:
    """The fix, then every differing field, short: what a console line can carry (the
    report's lists cut a verdict's line at 200 characters)."""
    diffs = "; ".join(f"{key} golden {_short(key, manifest.get(key))} run {_short(key, expected[key])}"
                      for key in BINDING_FIELDS if manifest.get(key) != expected[key])
    return f"golden of '{suite}' does not match (remake: `harness golden {suite}`): {diffs}"


def version_drift(manifest: dict, versions: dict) -> dict:
    """Versions that differ between the golden and this run (reported, not enforced)."""
    old = manifest.get("versions", {})
    return {k: {"golden": old.get(k), "now": v} for k, v in versions.items() if old.get(k) != v}


def save_evals(directory: Path, results: dict[str, dict]) -> None:
    """The golden's per-item eval results (response, answers, correctness per item)."""
    (Path(directory) / EVALS_FILE).write_text(json.dumps(results, indent=1, sort_keys=True))


def load_evals(key: str, eval_defs) -> dict[str, dict]:
    """The per-item eval results of the golden `key`; a GoldenError when any eval is missing."""
    path = golden_dir(key) / EVALS_FILE
    try:
        stored = read_json(path) if path.exists() else {}
    except ValueError as exc:  # load_golden checked its digest: damaged since, or stored broken
        raise GoldenError(f"golden file {exc}; {damage_hint(key)}") from exc
    missing = [e.name for e in eval_defs if e.name not in stored]
    if missing:
        raise GoldenError(f"the golden of suite '{key}' has no results for eval(s) {', '.join(missing)} "
                          f"({path}); {regenerate_hint(key)}")
    for e in eval_defs:
        if stored[e.name].get("task") not in (None, e.task):
            raise GoldenError(f"the golden of suite '{key}' scored eval '{e.name}' on task "
                              f"'{stored[e.name]['task']}', the suite now says '{e.task}'; {regenerate_hint(key)}")
    return stored


def store_golden(outputs_dir: Path, manifest: dict, evals: dict | None = None, drop: list[str] = ()) -> Path:
    """Install a finished golden run as the suite's golden (replacing the old one whole).
    `evals`: the per-item eval results (evals.json); `drop`: workloads whose tensors are
    not kept (eval generations: their per-item results are what the golden holds)."""
    target = golden_root() / manifest["suite"]  # the project's, never the shipped suites' (read-only)
    staging = target.with_name(f".{target.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    outputs = EngineOutputs.load(outputs_dir)
    outputs.meta.pop("timings", None)  # keep the stored golden stable across regenerations
    outputs.tensors = {k: v for k, v in outputs.tensors.items() if k.split(".", 1)[0] not in drop}
    outputs.save(staging)
    if evals:
        save_evals(staging, evals)
    (staging / MANIFEST).write_text(json.dumps({**manifest, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1, sort_keys=True))
    record_digests(staging)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return target
