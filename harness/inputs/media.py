"""Synthetic videos and audio clips for multimodal workloads, written by the harness,
deterministically (the images' counterpart: harness/inputs/images.py).

A workload names them; the harness writes each into the cache as a .npy file, so every
engine reads the same numbers and a golden made on one machine applies on another.

  video  <noise|gradient>-<W>x<H>x<T>   T frames of the named image pattern, each frame
                                        shifted 4 px right of the one before (motion)
  audio  <tone|noise>-<MS>ms            mono float32 at AUDIO_RATE Hz: a 440 Hz tone with
                                        a slow rise, or seeded uniform noise
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# 16 kHz: what Whisper-style feature extractors take
from harness.contract.runbrief import AUDIO_RATE

VIDEO_NAME = re.compile(r"(noise|gradient)-(\d+)x(\d+)x(\d+)")
AUDIO_NAME = re.compile(r"(tone|noise)-(\d+)ms")


def parse_video(name: str) -> tuple[str, int, int, int]:
    m = VIDEO_NAME.fullmatch(name)
    if not m or int(m[4]) < 1:
        raise ValueError(f"video name {name!r} is not <noise|gradient>-<W>x<H>x<frames> (e.g. gradient-56x56x4)")
    return m[1], int(m[2]), int(m[3]), int(m[4])


def parse_audio(name: str) -> tuple[str, int]:
    m = AUDIO_NAME.fullmatch(name)
    if not m or int(m[2]) < 1:
        raise ValueError(f"audio name {name!r} is not <tone|noise>-<milliseconds>ms (e.g. tone-500ms)")
    return m[1], int(m[2])


def video_frames(name: str):
    """[T, H, W, 3] uint8 frames of the named video."""
    import numpy as np

    from harness.inputs.images import pixels

    pattern, width, height, frames = parse_video(name)
    first = pixels(f"{pattern}-{width}x{height}")
    return np.stack([np.roll(first, 4 * t, axis=1) for t in range(frames)])


def audio_samples(name: str):
    """[N] float32 samples in [-1, 1] of the named clip, at AUDIO_RATE."""
    import numpy as np

    kind, ms = parse_audio(name)
    n = AUDIO_RATE * ms // 1000
    if kind == "noise":
        seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).uniform(-0.5, 0.5, n).astype(np.float32)
    t = np.arange(n, dtype=np.float64) / AUDIO_RATE
    return (0.5 * np.minimum(1.0, t / 0.05) * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


def video_path(name: str) -> Path:
    return _cached("videos", name, lambda: video_frames(name))


def audio_path(name: str) -> Path:
    return _cached("audios", name, lambda: audio_samples(name))


def _cached(kind: str, name: str, make) -> Path:
    """The .npy of `name` in the cache, written on first use (atomically: concurrent runs)."""
    import io

    import numpy as np

    from harness.contract.roots import cache_dir
    from harness.contract.rundir import write_files

    target = cache_dir(kind) / f"{name}.npy"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.save(buffer, make(), allow_pickle=False)
        write_files({target: buffer.getvalue()})
    return target
