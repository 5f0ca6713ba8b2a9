"""Disk faults: a full, read-only or over-quota filesystem under the harness's own files.

When a rank cannot write its outputs because the disk is full, the engine did nothing
wrong: the verdict is `error` (the machine's fault, exit code 3), naming the path, never
a `crash` of the engine. The fault reaches the rank as an OSError from Python code, but
as plain text from native writers: safetensors raises
`SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull,
message: "No space left on device" })`, with no errno attribute and no path. So the
fault is recognised by errno where there is one and by the C library's own words for
those errnos where there is not, and the writers of the outputs format name their path
(`storage_error`).

Standard library only: this module runs inside an engine's own environment.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator, Mapping
from typing import TypedDict

STORAGE_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
# The words a native library prints for those errnos: strerror's text, Rust's "os error N".
_WORDS = re.compile(
    "|".join(
        [*(re.escape(os.strerror(e)) for e in STORAGE_ERRNOS), *(rf"\bos error {e}\b|\bcode: {e}\b" for e in STORAGE_ERRNOS)]
    ),
    re.IGNORECASE,
)


def _errno_in_text(text: str) -> int | None:
    match = _WORDS.search(text)
    if match is None:
        return None
    found = match.group(0).lower()
    for number in STORAGE_ERRNOS:
        if os.strerror(number).lower() == found or found.endswith(f" {number}"):
            return number
    return None  # pragma: no cover - every alternative of _WORDS names one of them


class StorageFault(TypedDict):
    errno: str  # its symbol: "ENOSPC"
    strerror: str
    path: str | None  # the file it was met on, where the error names one


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def storage_fault(exc: BaseException) -> StorageFault | None:
    """{"errno": "ENOSPC", "strerror": ..., "path": ... or None} when `exc` (or what it was
    raised from) is a full, read-only or over-quota filesystem; None for anything else."""
    for cur in _chain(exc):
        if isinstance(cur, OSError) and cur.errno in STORAGE_ERRNOS:
            return _fault(cur.errno, cur.filename)
    for cur in _chain(exc):
        number = _errno_in_text(str(cur))
        if number is not None:
            return _fault(number, None)
    return None


def _fault(number: int, path: object) -> StorageFault:
    return {"errno": errno.errorcode[number], "strerror": os.strerror(number), "path": str(path) if path else None}


def storage_error(exc: BaseException, path: str | os.PathLike[str]) -> OSError | None:
    """An OSError naming `path` for a disk fault met while writing it (to raise from
    `exc`), or None when `exc` is no disk fault."""
    fault = storage_fault(exc)
    if fault is None:
        return None
    number: int = getattr(errno, fault["errno"])
    return OSError(number, os.strerror(number), str(fault["path"] or path))


def describe(fault: Mapping[str, object]) -> str:
    """'cannot write PATH: No space left on device (ENOSPC)', for a verdict's reason."""
    where = f" {fault['path']}" if fault.get("path") else ""
    return f"cannot write{where}: {fault['strerror']} ({fault['errno']})"
