"""The identity of a checkpoint: one digest over its config, tokenizer and weights.

A golden records it, so a golden made on other weights is refused. Hashing a multi-GB
checkpoint on every run would cost minutes, so a digest is computed once and kept in
the cache, keyed by what the files look like on disk (path, size, mtime of each): a
file rewritten in place changes its key and is hashed again.

Files of a huggingface_hub cache snapshot are links to blobs named by their content
hash (sha256 for LFS weights, the git blob id otherwise); for those the blob name is
the file's digest and nothing is read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from harness.contract.roots import cache_dir
from harness.contract.rundir import write_files

# What makes a checkpoint what it is; README, .gitattributes and the like do not count.
IDENTITY_SUFFIXES = (".json", ".safetensors", ".model", ".txt", ".jinja", ".tiktoken")
CHUNK = 1 << 20


def checkpoint_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(IDENTITY_SUFFIXES))


def checkpoint_digest(directory: Path) -> str:
    """sha256 over (name, content digest) of every identity file of `directory`."""
    directory = Path(directory).resolve()
    files = checkpoint_files(directory)
    key = _stat_key(directory, files)
    cached = cache_dir("identities") / f"{key}.json"
    if cached.exists():
        return json.loads(cached.read_text())["sha256"]
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{_file_digest(path)}\n".encode())
    value = digest.hexdigest()
    # a temporary file of its own (rundir.write_files): scenarios of one harness run resolve
    # the same checkpoint at once, in threads of one process
    cached.parent.mkdir(parents=True, exist_ok=True)
    write_files({cached: json.dumps({"directory": str(directory), "sha256": value})})
    return value


def _stat_key(directory: Path, files: list[Path]) -> str:
    parts = [str(directory)]
    for path in files:
        st = path.stat()  # follows a snapshot's link to its blob
        parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _file_digest(path: Path) -> str:
    if path.is_symlink():
        blob = Path(os.path.realpath(path))
        # huggingface_hub cache: the name is the content hash
        if blob.parent.name == "blobs":
            return f"blob:{blob.name}"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
