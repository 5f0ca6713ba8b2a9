"""The wheel carries the built-in suites: this checkout's scenarios/ and golden/ are copied
to harness/builtin/ at build time, where an installed harness reads them (harness/roots.py).
Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SUITES = ("scenarios", "golden")


class BuildPyWithSuites(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout itself
        for name in SUITES:
            if Path(name).is_dir():
                shutil.copytree(name, Path(self.build_lib) / "harness" / "builtin" / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns(".*", "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithSuites})
