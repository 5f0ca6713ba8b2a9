"""Whose code raised an exception in a rank: the harness's own, or the engine's.

A rank runs the harness's code (the vLLM driver, the outputs writer, the launcher's rank
side) around the engine's. When its exception's innermost frame of either kind is the
harness's, the harness failed there, whatever libraries lie under that frame (the
standard library's json meeting a value it cannot write, torch, safetensors): the
verdict is then `error` naming the harness's file and line, never an engine `crash`
(vLLM 0.21.0's speculative config handed the driver a ModelConfig to write, and
json/encoder.py, the innermost frame, said nothing of whose fault it was).

Frames are sorted three ways:
  harness  a file of the harness package, except the engine code the rank declares there
           (the reference engine, the hf engine, vLLM's fault switches)
  library  the standard library, torch, safetensors, numpy, interpreter internals
  engine   every other file (vLLM, a plugin engine's package, a test's rank script)

Standard library only: this module runs inside an engine's own environment.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path

HARNESS_DIR = str(Path(__file__).resolve().parents[2])  # .../harness
# Libraries the harness's rank-side code calls directly: their frames under a harness
# frame are the harness's call, not an engine's code
LIBRARIES = ("torch", "safetensors", "numpy", "PIL")
# Interpreter-made code objects: importlib's frozen modules, Dynamo's generated graphs
GENERATED = ("<frozen ", "<eval_with_key")


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)})


def module_dirs(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The files of loaded `modules` (a package's directory, a module's file); a module not
    loaded has no frame in a traceback and is left out."""
    found = []
    for name in modules:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            path = os.path.realpath(path)
            found.append(os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path)
    return tuple(found)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _is_library(path: str, stdlib: tuple[str, ...], libraries: tuple[str, ...]) -> bool:
    if path.startswith(GENERATED):
        return True
    parts = Path(path).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return _under(path, libraries)
    return _under(path, stdlib) or _under(path, libraries)


def owner(path: str, engine_code: tuple[str, ...] = (), *, _stdlib=None, _libraries=None) -> str:
    """ "harness", "library" or "engine" (the module doc) for a frame's file `path`;
    `engine_code`: files or directories of the engine's code inside the harness package."""
    if path.startswith("<") and not path.startswith(GENERATED):
        # `python -c` and exec'd code: the rank's own program
        return "engine"
    real = os.path.realpath(path)
    if _under(real, (HARNESS_DIR,)):
        return "engine" if _under(real, engine_code) else "harness"
    stdlib = _stdlib_dirs() if _stdlib is None else _stdlib
    libraries = module_dirs(LIBRARIES) if _libraries is None else _libraries
    return "library" if _is_library(real, stdlib, libraries) else "engine"


def harness_frame(frames: list[traceback.FrameSummary], engine_code: tuple[str, ...] = ()) -> int | None:
    """The index in `frames` (a traceback's, outermost first) of the innermost harness
    frame when no engine frame lies under it, else None (the engine's code was running
    when it raised)."""
    stdlib, libraries = _stdlib_dirs(), module_dirs(LIBRARIES)
    last = None
    for i, fs in enumerate(frames):
        kind = owner(fs.filename, engine_code, _stdlib=stdlib, _libraries=libraries)
        if kind != "library":
            last = (kind, i)
    return last[1] if last and last[0] == "harness" else None


def harness_path(filename: str) -> str:
    """`harness/contract/outputs.py` for a file of the harness package."""
    return os.path.relpath(os.path.realpath(filename), os.path.dirname(HARNESS_DIR))


def short(filename: str) -> str:
    """`json/encoder.py`: a file's last two path parts."""
    return "/".join(Path(filename).parts[-2:])


def harness_code_fault(exc: BaseException, engine_code: tuple[str, ...] = ()) -> str | None:
    """What the harness could not do (`could not ...`, the verdict's `error` reason), when
    `exc` was raised in its own code, naming the harness's file and line and, where a library
    raised under it, the library's; None when the engine's code raised it."""
    if not isinstance(exc, Exception):
        # SystemExit, KeyboardInterrupt: no fault of either
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    at = harness_frame(frames, engine_code)
    if at is None:
        return None
    frame, innermost = frames[at], frames[-1]
    first = str(exc).splitlines()[0] if str(exc) else ""
    text = (
        f"could not run the harness's own code in the rank (at {harness_path(frame.filename)}:{frame.lineno} in "
        f"{frame.name}): {type(exc).__name__}" + (f": {first}" if first else "")
    )
    if at != len(frames) - 1:
        text += f", raised in {short(innermost.filename)}:{innermost.lineno}"
    return text
