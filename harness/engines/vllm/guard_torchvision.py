"""Make a torchvision without its C extension importable (run by install.sh).

torchvision's __init__ imports `_meta_registrations` / `_autograd_registrations`,
which register fakes for its C ops and fail when the wheel's ops cannot load (a CUDA
wheel beside CPU torch). Guarding that import with `extension._has_ops()` leaves the
Python-only parts (transforms, io) working, which is all Qwen-VL's processor needs.
Idempotent: a guarded file is left alone.

Only for the environments the harness makes for itself (.venv-vllm, released vLLMs:
releases.py), where vLLM's processes and the standalone repro scripts import torchvision
without the harness. The harness's own environment is the user's and is never edited:
there harness/contract/torchvision_guard.py does the same at import time.
"""

import importlib.util
import sys
from pathlib import Path

OLD = """from torchvision import (
    _autograd_registrations,
    _meta_registrations,
    datasets,"""
NEW = """if extension._has_ops():  # guarded by harness install-vllm: no C ops in this wheel
    from torchvision import _autograd_registrations, _meta_registrations  # usort:skip
from torchvision import (
    datasets,"""


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        print("torchvision is not installed", file=sys.stderr)
        return 1
    init = Path(spec.origin)
    text = init.read_text()
    if NEW in text:
        return 0
    if OLD not in text:
        print(f"{init}: unexpected torchvision __init__ (not the 0.28 layout); not patched", file=sys.stderr)
        return 1
    init.write_text(text.replace(OLD, NEW))
    print(f"guarded torchvision C-op registrations in {init}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
