"""torchvision's Python parts importable when its C ops cannot load, without editing it.

A torchvision wheel built for another torch than the one installed (PyPI's CUDA build beside
the CPU torch) cannot load its C extension, and its __init__ then fails importing
`_meta_registrations` / `_autograd_registrations`, which register fakes for those C ops.
Transformers' image and video processors need only the Python parts (transforms, io).
install() puts a finder first on sys.meta_path that answers those two modules with empty
ones when `torchvision.extension._has_ops()` is false, and leaves every other import, and a
torchvision whose ops load, to the usual finders: the installed package stays byte for byte
as it was installed (the environment the harness runs in is the user's).

Standard library only, and loaded by path where no harness import is wanted
(harness/inputs/models/tiny.py runs as a script in an engine's interpreter); `import harness`
installs it. The environments the harness builds for itself (.venv-vllm, released vLLMs)
have their torchvision's __init__ guarded on disk instead (engines/vllm/guard_torchvision.py):
vLLM's own processes and the standalone repro scripts import torchvision there without the
harness.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

GUARDED = ("torchvision._meta_registrations", "torchvision._autograd_registrations")


class _EmptyLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:  # the default module object
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = "left empty by harness/contract/torchvision_guard.py: this torchvision's C ops do not load"


class TorchvisionOpsGuard(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in GUARDED:
            return None
        extension = sys.modules.get("torchvision.extension")
        has_ops = getattr(extension, "_has_ops", None)
        if has_ops is None or has_ops():
            return None  # not torchvision's own import order, or its ops load: the real module
        return importlib.machinery.ModuleSpec(fullname, _EmptyLoader())


def install() -> None:
    """Idempotent: one guard first on sys.meta_path."""
    if not any(type(finder).__name__ == TorchvisionOpsGuard.__name__ for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchvisionOpsGuard())
