"""Goldens: the eager single-device outputs every scenario of a suite is held to.

A golden is an engine-outputs directory (harness/contract/outputs.py) plus manifest.json,
the record of what made it. Before a scenario is compared, the manifest is checked
against what is being tested; a golden made from another model, other workloads,
another dtype or other settings is an error that names each difference and the
command that regenerates it. Engine and torch versions are recorded and shown,
not enforced: comparing a new engine version against an old golden is the point
of a regression gate.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from harness.contract.outputs import EngineOutputs

DEFAULT_GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
MANIFEST = "manifest.json"
# Manifest fields that must match for a golden to apply; the rest is information.
BINDING_FIELDS = ("model", "model_sha256", "workload_sha256", "engine", "dtype", "settings")


class GoldenError(RuntimeError):
    """A golden that is missing or does not match what is being tested. `headline` is
    the one line a verdict shows (console, summary lists): what is wrong and what to do."""

    def __init__(self, message: str, headline: str | None = None):
        super().__init__(message)
        self.headline = headline or message.splitlines()[0]


def golden_root() -> Path:
    return Path(os.environ.get("HARNESS_GOLDEN_DIR", DEFAULT_GOLDEN_DIR))


def golden_dir(suite: str) -> Path:
    return golden_root() / suite


def regenerate_hint(suite: str) -> str:
    return f"regenerate it with `harness golden {suite}` (or `make golden` for every suite)"


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
    """The golden of `expected['suite']`, after checking its manifest matches."""
    directory = golden_dir(expected["suite"])
    manifest_path = directory / MANIFEST
    if not manifest_path.exists() or not EngineOutputs.exists(directory):
        raise GoldenError(f"no golden for suite '{expected['suite']}' in {directory}; {regenerate_hint(expected['suite'])}")
    manifest = json.loads(manifest_path.read_text())
    diffs = [
        f"{key}: golden has {manifest.get(key)!r}, this run has {expected[key]!r}"
        for key in BINDING_FIELDS
        if manifest.get(key) != expected[key]
    ]
    if diffs:
        raise GoldenError(
            f"the golden of suite '{expected['suite']}' ({directory}) was made for something else:\n  "
            + "\n  ".join(diffs)
            + f"\n{regenerate_hint(expected['suite'])}",
            headline=_mismatch_headline(expected["suite"], manifest, expected),
        )
    return EngineOutputs.load(directory), manifest


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


def store_golden(outputs_dir: Path, manifest: dict, evals: dict | None = None, drop: list[str] = ()) -> Path:
    """Install a finished golden run as the suite's golden (replacing the old one whole).
    `evals`: the per-item eval results (evals.json); `drop`: workloads whose tensors are
    not kept (eval generations: their per-item results are what the golden holds)."""
    from harness.evals.check import save_golden_evals

    target = golden_dir(manifest["suite"])
    staging = target.with_name(f".{target.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    outputs = EngineOutputs.load(outputs_dir)
    outputs.meta.pop("timings", None)  # keep the stored golden stable across regenerations
    outputs.tensors = {k: v for k, v in outputs.tensors.items() if k.split(".", 1)[0] not in drop}
    outputs.save(staging)
    if evals:
        save_golden_evals(staging, evals)
    (staging / MANIFEST).write_text(json.dumps({**manifest, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1, sort_keys=True))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return target
