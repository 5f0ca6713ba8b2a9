"""Where the harness keeps what it ships and what it builds.

`DATA_DIR` is the package's own data (vendored GSM8K, generated eval sets); the cache
root ($HARNESS_CACHE, default ~/.cache/harness) holds what is built on demand and safe
to delete: model checkpoints, checkpoint digests, engine probes, image files. Every
entry under it is content-addressed or keyed by what made it, so concurrent runs and
ranks may share it.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_REPORTS = Path(__file__).resolve().parent.parent / "reports"


def reports_dir(given: Path | str | None = None) -> Path:
    """Where runs are written: the given directory, else $HARNESS_REPORTS_DIR, else the
    project's reports/."""
    return Path(given or os.environ.get("HARNESS_REPORTS_DIR") or DEFAULT_REPORTS)


def cache_dir(kind: str) -> Path:
    """`<cache root>/<kind>`, e.g. cache_dir("models")."""
    return Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "harness")) / kind
