"""Files between the driver and a node as bytes through Ray (no shared filesystem).

A scenario's directory is packed on the node (an uncompressed tar: outputs are tensors
that barely compress, and the object store moves bytes without a copy) and unpacked into
the driver's run directory. Paths inside its JSON files named the node's directory; they
are rewritten to the driver's, the verdict through its own loader and saver, so its
digest is checked on arrival and remade over the new paths.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from harness.contract.jsonfile import from_fields
from harness.contract.rundir import VERDICT
from harness.contract.verdict import Verdict


def pack(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if directory.exists():
            tar.add(directory, arcname=".")
    return buffer.getvalue()


def unpack(data: bytes, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(directory, filter="data")  # no absolute paths, links out or devices


def unpack_scenario(data: bytes, directory: Path, node_dir: str) -> Verdict:
    """The node's scenario directory, unpacked into `directory` with the node's paths made
    local; returns its verdict (one whose digest did not survive the trip is `error`)."""
    unpack(data, directory)
    local = str(directory)
    for path in directory.rglob("*.json"):
        if path.name != VERDICT:
            text = path.read_text(errors="surrogateescape")
            if node_dir in text:
                path.write_text(text.replace(node_dir, local), errors="surrogateescape")
    verdict = Verdict.load(directory / VERDICT)
    if verdict.verdict != "error" or not verdict.reason.startswith("TAMPERED"):
        fields = _replace_in(json.loads(json.dumps(verdict.to_dict())), node_dir, local)
        fields.pop("as_expected", None)
        fields.pop("digest", None)
        verdict = from_fields(Verdict, fields, f"{directory / VERDICT} is not a verdict")
        verdict.save(directory / VERDICT)
    return verdict


def _replace_in(value, old: str, new: str):
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_in(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_in(v, old, new) for k, v in value.items()}
    return value
