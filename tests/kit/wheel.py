"""The harness as a user installs it: the checkout's files built into a wheel from a commit
of their own, and what an environment holds, for the wheel tests (tests/test_wheel.py on
the reference engine, tests/test_wheel_vllm.py on real vLLM)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.kit import ROOT, run_process


def source_copy(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked and new, not ignored): what a
    clean clone would build, without this checkout's build/ or reports/."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    return dest


def commit_source(src: Path) -> str:
    """The copy as a git work tree of its own, committed: the wheel records the commit."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=src, capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "the harness as built")
    return git("rev-parse", "--short", "HEAD")


def build_wheel(work: Path) -> tuple[Path, str]:
    """(the wheel, the commit it records), built from a copy of the checkout under `work`."""
    src = source_copy(work / "src")
    commit = commit_source(src)
    run_process(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(src)],
        600,
        "pip wheel of the harness",
        capture_output=True,
        text=True,
        check=True,
    )
    (wheel,) = (work / "dist").glob("harness-*.whl")
    return wheel, commit


def purelib(python: Path) -> Path:
    """Where `python` installs pure-Python packages (its site-packages)."""
    asked = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(asked.stdout.strip())


def package_files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` (compiled bytecode aside): its size and mtime, so that a
    command that writes into an installed package shows."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
