"""The wheel carries the built-in suites and the docs: this checkout's scenarios/, golden/
and docs/ are copied to harness/builtin/ at build time, where an installed harness reads
them (harness/contract/roots.py; `harness docs TOPIC`), and the commit it is built from, which an
installed harness records in its results (harness/contract/provenance.py). Everything else is in
pyproject.toml."""

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("scenarios", "golden", "docs")
BUILD_COMMIT = "BUILD_COMMIT"  # harness/contract/provenance.py reads it under harness/builtin/


def built_from() -> str | None:
    """The short commit of the checkout the wheel is built from, `-dirty` when tracked files
    had changes; None when the directory is not the top of a git work tree of its own."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, check=True).stdout.strip()

    try:
        toplevel, commit = git("rev-parse", "--show-toplevel", "--short", "HEAD").splitlines()
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if Path(toplevel).resolve() != Path.cwd().resolve():
        return None  # a copy inside another repository: that commit is not the harness's
    return commit + ("-dirty" if dirty else "")


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
        commit = built_from()
        if commit:
            (builtin / BUILD_COMMIT).write_text(commit + "\n")


setup(cmdclass={"build_py": BuildPyWithSuites})
