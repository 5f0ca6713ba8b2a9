"""The wheel carries the built-in suites and the docs: this checkout's scenarios/, golden/
and docs/ are copied to harness/builtin/ at build time, where an installed harness reads
them (harness/roots.py; `harness docs TOPIC`). Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("scenarios", "golden", "docs")


class BuildPyWithSuites(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout itself
        builtin = Path(self.build_lib) / "harness" / "builtin"
        for name in SHIPPED:
            if Path(name).is_dir():
                shutil.copytree(name, builtin / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*", "__pycache__"))
        if Path("README.md").is_file():
            shutil.copy("README.md", builtin / "README.md")


setup(cmdclass={"build_py": BuildPyWithSuites})
