"""This machine's CPU, as far as a known bug's code path depends on it (a kernel library
built for AVX-512 or not, AMX): its flags, read once. Stdlib only."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def cpu_flags() -> frozenset[str] | None:
    """This machine's CPU flags as /proc/cpuinfo lists them (None where it has none: not Linux).
    The ranks of a run share this machine's CPU (a Ray node's may differ: not read there)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None
