"""harness/contract/torchvision_guard.py: a torchvision whose C ops cannot load (PyPI's CUDA build
beside the CPU torch) imports under the harness, and under the tiny-model builder (a plain
script), with no file of it edited; a torchvision whose ops load is left to itself."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engines.vllm import guard_torchvision
from harness.inputs.models import _BUILDER_BOOT, TORCHVISION_GUARD
from tests.kit import ROOT

pytestmark = pytest.mark.slow  # two interpreters importing torch, and a copy of torchvision


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory) -> Path:
    """A copy of this environment's torchvision with its __init__ as the wheel ships it (the
    environment's own may be guarded on disk, as make install did before)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        pytest.skip("no torchvision in this environment")
    root = tmp_path_factory.mktemp("tv")
    shutil.copytree(Path(spec.origin).parent, root / "torchvision", ignore=shutil.ignore_patterns("__pycache__"))
    init = root / "torchvision" / "__init__.py"
    init.write_text(init.read_text().replace(guard_torchvision.NEW, guard_torchvision.OLD))
    if guard_torchvision.OLD not in init.read_text():
        pytest.skip("not torchvision 0.28's layout")
    return root


def _python(code: str, path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": f"{path}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )


def test_the_harness_imports_a_torchvision_without_ops_unedited(unguarded):
    plain = _python("import torchvision", unguarded)
    if plain.returncode == 0:
        pytest.skip("this torchvision's C ops load here: nothing to guard")
    assert "torchvision::" in plain.stderr  # the fakes registered for ops that are not there
    before = (unguarded / "torchvision" / "__init__.py").read_bytes()
    done = _python("import harness, torchvision, torchvision.transforms.v2; print(torchvision.__file__)", unguarded)
    assert done.returncode == 0 and done.stdout.startswith(str(unguarded)), done.stderr[-2000:]
    assert (unguarded / "torchvision" / "__init__.py").read_bytes() == before


def test_the_tiny_builder_script_gets_the_guard_by_path(unguarded, tmp_path):
    """The builder runs as a script (no harness import, its folder on sys.path): the boot
    loads the guard from its file, then runs the script with its own arguments."""
    script = tmp_path / "builder.py"
    (tmp_path / "sibling.py").write_text("NAME = 'sibling'\n")
    script.write_text(
        "import sys, sibling, torchvision\nassert 'harness' not in sys.modules\nprint(sibling.NAME, sys.argv[1:])\n"
    )
    done = _python(_BUILDER_BOOT, unguarded, str(TORCHVISION_GUARD), str(script), "--arch", "X")
    if _python("import torchvision", unguarded).returncode == 0:
        pytest.skip("this torchvision's C ops load here: nothing to guard")
    assert done.returncode == 0 and done.stdout.strip() == "sibling ['--arch', 'X']", done.stderr[-2000:]
