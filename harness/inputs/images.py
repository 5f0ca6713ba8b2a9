"""Synthetic test images for vision workloads, written by the harness, deterministically.

A workload names its images (`noise-56x84`: a pattern and WIDTHxHEIGHT); the harness
renders each into the cache as a PNG (standard library only: zlib + struct), so every
engine reads the same bytes and a golden made on one machine applies on another. The
workload checksum (golden.workload_checksum) covers each image's content hash, not its
machine-specific path.

Patterns:
  noise     seeded uniform RGB noise (numpy PCG64, seeded by the name)
  gradient  horizontal red, vertical green, checkered blue: smooth with structure
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import zlib
from pathlib import Path

NAME = re.compile(r"(noise|gradient)-(\d+)x(\d+)")  # fullmatch: `$` lets a final newline in


def parse(name: str) -> tuple[str, int, int]:
    m = NAME.fullmatch(name)
    if not m:
        raise ValueError(f"image name {name!r} is not <noise|gradient>-<W>x<H> (e.g. noise-56x84)")
    return m[1], int(m[2]), int(m[3])


def pixels(name: str):
    """[H, W, 3] uint8 array of the named image."""
    import numpy as np

    pattern, width, height = parse(name)
    if pattern == "noise":
        seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    y, x = np.mgrid[0:height, 0:width]
    red = x * 255 // max(1, width - 1)
    green = y * 255 // max(1, height - 1)
    blue = ((x // 7 + y // 7) % 2) * 255
    return np.stack([red, green, blue], axis=-1).astype(np.uint8)


def encode_png(rgb) -> bytes:
    """A truecolor 8-bit PNG of an [H, W, 3] uint8 array (filter 0 on every row)."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def image_path(name: str) -> Path:
    """The PNG of `name` in the cache, written on first use (atomically: concurrent runs)."""
    from harness.contract.roots import cache_dir

    target = cache_dir("images") / f"{name}.png"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        tmp.write_bytes(encode_png(pixels(name)))
        os.replace(tmp, target)
    return target
