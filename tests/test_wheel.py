"""The harness as an engine's repository uses it: built as a wheel, installed into a
fresh venv, and run in an empty project that is not this checkout.

`harness init` writes the project config (its own suites only), a first scenario file and
the .gitignore; `harness golden` (saying what it does), `harness run` and `pytest` (the
plugin registered through pytest11, no conftest.py) then work there, `harness list --gate
pr` and `pytest -m pr` select the same scenarios, results name the commit the wheel was
built from, the docs read as from an engine's repository, the built-in suites, once asked
for, run against their shipped goldens, and the installed package is left exactly as it
was installed (nothing is written into site-packages).

The venv sees the site-packages of the interpreter running the tests (torch and the other
dependencies are installed there by `make install`, in a virtualenv or not; a second copy
of torch is several hundred MB), so the test checks that `import harness` in it is the
wheel's copy, not this checkout.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.plan.devices import LOCK_DIR_ENV
from tests.kit import run_process
from tests.kit.wheel import build_wheel, package_files, purelib

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    wheel, commit = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    _see_this_environment(venv)
    run_process(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        600,
        "pip install of the wheel",
        capture_output=True,
        text=True,
        check=True,
    )
    (venv / "built-from").write_text(commit)
    return venv


def _see_this_environment(venv: Path) -> None:
    """The dependencies of the interpreter running the tests, visible in the new venv. Its
    --system-site-packages are the BASE interpreter's: when the tests themselves run in a
    virtualenv (the README's install in a fresh venv), torch is not there. Plain path lines
    in a .pth file: the directories' own .pth files (an editable install of this checkout)
    stay unprocessed, so `import harness` is still the wheel's."""
    (purelib(venv / "bin" / "python") / "test-session-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def _in_project(venv: Path, project: Path, *cmd: str, timeout: float = 600, expect: int = 0) -> subprocess.CompletedProcess:
    """A command of the venv, run in the project as its user would: nothing of this
    checkout on PYTHONPATH, no HARNESS_* setting of the test session but its device
    lock directory (tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", **{LOCK_DIR_ENV: os.environ.get(LOCK_DIR_ENV, "")})
    env["HARNESS_CACHE"] = os.environ.get("HARNESS_CACHE", str(Path.home() / ".cache" / "harness"))  # the built models, shared
    done = run_process(
        list(cmd),
        timeout,
        " ".join(cmd[:3]),
        cwd=project,
        env={k: v for k, v in env.items() if v},
        capture_output=True,
        text=True,
    )
    assert done.returncode == expect, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_installed_wheel_works_in_an_empty_project(venv, tmp_path):
    python = str(venv / "bin" / "python")
    project = tmp_path / "engine-repo"
    project.mkdir()
    where = _in_project(
        venv, project, python, "-c", "import harness, sysconfig; print(harness.__file__); print(sysconfig.get_paths()['purelib'])"
    )
    package, site = where.stdout.split()
    assert Path(package).is_relative_to(venv), f"the venv imports {package}, not the wheel"
    installed = package_files(Path(site) / "harness")

    init = _in_project(venv, project, "harness", "init", "--model", "tiny-llama", "--suite", "mine")
    assert (project / "harness.toml").is_file() and (project / "scenarios" / "mine.yaml").is_file(), init.stdout
    assert "builtin_suites = false" in (project / "harness.toml").read_text()  # the project's own suites only
    assert "/reports/" in (project / ".gitignore").read_text().splitlines(), init.stdout  # run output stays out of git
    golden = _in_project(venv, project, "harness", "golden", "mine")
    assert (project / "golden" / "mine" / "manifest.json").is_file()
    assert golden.stdout.startswith("[1/1] golden mine: running reference at its golden setting"), golden.stdout

    # `harness run --gate pr` and `pytest -m pr` select the same scenarios
    listed = _in_project(venv, project, "harness", "list", "--gate", "pr", "--ids-only").stdout.split()
    collected = _in_project(venv, project, python, "-m", "pytest", "-m", "pr", "--collect-only", "-q", "-p", "no:cacheprovider")
    as_ids = [line.replace("scenarios/", "").replace(".yaml::", "/") for line in collected.stdout.splitlines() if "::" in line]
    assert sorted(listed) == sorted(as_ids) and {i.split("/")[0] for i in listed} == {"mine"}, (listed, collected.stdout)

    _in_project(venv, project, "harness", "run", "mine/tp1-pp1", "mine/tp2-pp1", "--run-id", "first")
    run = project / "reports" / "first"
    verdicts = {
        json.loads(p.read_text())["scenario"]: json.loads(p.read_text())["verdict"] for p in run.glob("scenarios/*/verdict.json")
    }
    assert verdicts == {"mine/tp1-pp1": "pass", "mine/tp2-pp1": "pass"}, verdicts  # against the project's new golden
    built = json.loads((run / "run.json").read_text())["versions"]
    assert built["harness_commit"] == (venv / "built-from").read_text(), built  # the wheel's commit, not "unknown"

    # the README's line as written: the pr gate through the plugin, two at a time (pytest-xdist, the engine-repo extra)
    gate = _in_project(venv, project, python, "-m", "pytest", "scenarios/", "-m", "pr", "-n", "2", "-p", "no:cacheprovider")
    assert f"{len(listed)} passed" in gate.stdout and "failed" not in gate.stdout, gate.stdout[-2000:]
    assert list((project / "reports").glob("pytest-*/summary.md")), "the pytest session wrote no report"

    # where the user stands: a model the engine cannot run is refused naming engines; the docs are in the wheel
    refused = _in_project(venv, project, "harness", "init", "--model", "tiny-qwen3", "--suite", "q", expect=2)
    assert "engine 'reference' runs llama" in refused.stderr and not (project / "scenarios" / "q.yaml").exists()
    docs = _in_project(venv, project, "harness", "docs", "engines")
    assert "engine" in docs.stdout.lower() and len(docs.stdout) > 1000
    reproduce = json.loads((run / "scenarios" / "mine__tp2-pp1" / "verdict.json").read_text())["reproduce"]
    assert reproduce == "harness run mine/tp2-pp1", reproduce  # make targets exist only in the harness's checkout
    readme = _in_project(venv, project, "harness", "docs", "readme").stdout
    assert "`make pr-gate`" not in readme and "harness run --gate pr" in readme  # the docs, read where the user is
    assert "bisect-step" not in _in_project(venv, project, "harness", "--help").stdout

    # the built-in suites, asked for: run against their shipped goldens
    config = project / "harness.toml"
    config.write_text(config.read_text().replace("builtin_suites = false", "builtin_suites = true"))
    _in_project(venv, project, "harness", "run", "llama-tiny/tp1-pp1", "--run-id", "builtin")
    assert (
        json.loads((project / "reports" / "builtin" / "scenarios" / "llama-tiny__tp1-pp1" / "verdict.json").read_text())[
            "verdict"
        ]
        == "pass"
    )

    assert package_files(Path(site) / "harness") == installed, "a run wrote into the installed package"
