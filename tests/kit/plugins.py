"""Fake installed distributions for the plugin tests: a folder on sys.path with
`<name>-<version>.dist-info/` (METADATA, entry_points.txt) and modules beside it, the
way pip leaves a package on disk. Discovery stays the real importlib.metadata."""

from __future__ import annotations

import uuid
from pathlib import Path

ENGINE_MODULE = """
from harness.contract.launchplan import LaunchPlan
from harness.engines.base import Engine


class FakeEngine(Engine):
    name = "fake"
    axes = {"tp": (1, 2), "pp": (1,), "fast": (False, True)}

    def launch_plan(self, brief, brief_path):
        return LaunchPlan(world_size=brief.axes.tp, argv=["true"])


class Nameless(FakeEngine):
    name = ""


NOT_AN_ENGINE = 42
"""

MODEL_MODULE = """
import dataclasses

from harness.inputs.zoo.llama import TINY_LLAMA

TINY_FAKE = dataclasses.replace(TINY_LLAMA, name="tiny-fake", notes="a package's tiny Llama")


def make_tiny_made():
    return dataclasses.replace(TINY_LLAMA, name="tiny-made")


WRONG_NAME = dataclasses.replace(TINY_LLAMA, name="not-its-name")
"""


class Site:
    """A folder on sys.path that fake distributions are installed into."""

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        self.tag = uuid.uuid4().hex[:8]  # module names of their own: nothing cached in sys.modules
        self.engines_mod = f"fake_engines_{self.tag}"
        self.models_mod = f"fake_models_{self.tag}"
        root.mkdir(parents=True, exist_ok=True)
        (root / f"{self.engines_mod}.py").write_text(ENGINE_MODULE)
        (root / f"{self.models_mod}.py").write_text(MODEL_MODULE)
        monkeypatch.syspath_prepend(str(root))

    def install(self, dist: str, version: str, entry_points: dict[str, dict[str, str]], where: Path | None = None) -> None:
        info = (where or self.root) / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(
            "".join(
                f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n"
                for group, eps in entry_points.items()
            )
        )
