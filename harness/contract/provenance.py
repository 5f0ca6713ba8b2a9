"""Which harness made a result: its version and git commit, only when they are its own.

A copy of the project inside another git repository (vendored, unpacked from a
tarball into a monorepo) has no .git of its own, and `git rev-parse HEAD` run from
its directory answers with the enclosing repository's commit. That commit says
nothing about the harness, so it is recorded only when the git work tree's top
level is the project root itself; otherwise the commit is "unknown".
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import harness

PROJECT_ROOT = Path(harness.__file__).resolve().parent.parent
UNKNOWN = "unknown"


# The commit an installed wheel was built from, written by setup.py at build time
BUILD_COMMIT = Path(harness.__file__).resolve().parent / "builtin" / "BUILD_COMMIT"


def harness_provenance(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """{"harness_version": the package's own version, "harness_commit": its commit (a wheel's:
    the one it was built from) or "unknown"}."""
    commit = own_commit(root)
    if commit == UNKNOWN:
        commit = built_commit()
    return {"harness_version": getattr(harness, "__version__", UNKNOWN), "harness_commit": commit}


def built_commit() -> str:
    """The commit the installed wheel was built from, or "unknown" (built outside git)."""
    try:
        return BUILD_COMMIT.read_text().strip() or UNKNOWN
    except OSError:
        return UNKNOWN


def own_commit(root: Path = PROJECT_ROOT) -> str:
    """The short commit of HEAD, if `root` is the top level of its git work tree."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--short", "HEAD"],
            cwd=root,
            check=False,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != 2:
        return UNKNOWN
    toplevel, commit = lines
    return commit if Path(toplevel).resolve() == Path(root).resolve() else UNKNOWN


def tested_requirement(package: str) -> str:
    """The range of `package` the harness is tested with, as its own metadata declares it
    (the engine-repo extra, pyproject.toml): one place for the numbers."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    try:
        declared = requires("harness") or []
    except PackageNotFoundError:
        # run from a checkout that was never installed
        return package
    for line in declared:
        req = Requirement(line)
        if req.name == package:
            return f"{req.name}{req.specifier}"
    return package
