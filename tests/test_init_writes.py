"""`harness init` writes all of a project or none of it (harness/cli/project_init.py).

Every file init writes (the scenario file, the .gitignore additions, the project config) is
planned and checked before any of them is written: a pyproject.toml that cannot take an
appended [tool.harness] table, a read-only .gitignore, a scenarios path that is a file, or a
write that fails half-way leave the directory exactly as it was. The files it appends to keep
their own line endings and final-newline state."""

from __future__ import annotations

import errno
import tomllib
from pathlib import Path

import pytest

from harness.cli import main, project_init
from harness.cli.project_init import InitError, init_project
from harness.contract.settings.project import find_config
from tests.kit.present import present, raised


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_CACHE"):
        monkeypatch.delenv(name, raising=False)


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every path under `directory` with its bytes (None: a directory)."""
    return {str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None) for p in sorted(directory.rglob("*"))}


INLINE_TOOL = 'tool = {black = {line-length = 100}}\n\n[project]\nname = "engine"\n'


def test_a_pyproject_with_an_inline_tool_table_is_left_alone_and_the_config_goes_to_harness_toml(tmp_path, capsys):
    """init appended [tool.harness] after `tool = {...}`, which TOML forbids (pip broke too),
    exited 2 and left scenarios/ written. The pyproject.toml is now kept byte for byte and the
    config written as harness.toml, saying why."""
    (tmp_path / "pyproject.toml").write_text(INLINE_TOOL)
    assert main(["init", "--model", "tiny-llama", "--suite", "mine", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "pyproject.toml").read_text() == INLINE_TOOL
    assert present(find_config(tmp_path))[0] == tmp_path / "harness.toml"
    out = capsys.readouterr().out
    assert f"wrote the project config: {tmp_path / 'harness.toml'}" in out
    assert "`tool` is an inline table (`tool = {...}`), which no [tool.harness] section may extend" in out
    assert (tmp_path / "scenarios" / "mine.yaml").is_file()


def test_a_read_only_pyproject_is_left_alone_and_the_config_goes_to_harness_toml(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "engine"\n')
    pyproject.chmod(0o444)
    done = init_project(tmp_path, "tiny-llama", suite="mine")
    assert done.config == tmp_path / "harness.toml" and "pyproject.toml is left as it is: it is read-only" in str(done.config_why)
    assert pyproject.read_text() == '[project]\nname = "engine"\n'


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_the_table_appended_to_a_pyproject_keeps_its_data_line_endings_and_final_newline(tmp_path, eol, final_newline):
    before = eol.join(["[project]", 'name = "engine"', "", "[tool.black]", "line-length = 100"]) + (eol if final_newline else "")
    (tmp_path / "pyproject.toml").write_bytes(before.encode())
    done = init_project(tmp_path, "tiny-llama", suite="mine")
    assert done.config == tmp_path / "pyproject.toml"
    after = (tmp_path / "pyproject.toml").read_bytes().decode()
    assert after.startswith(before)
    assert after.count("\n") == after.count(eol)  # one kind of line ending, the file's own
    assert after.endswith("\n") == final_newline
    data = tomllib.loads(after)
    assert data["project"] == {"name": "engine"} and data["tool"]["black"] == {"line-length": 100}
    assert data["tool"]["harness"]["builtin_suites"] is False


def test_a_read_only_gitignore_is_refused_before_anything_is_written(tmp_path, capsys):
    """init wrote harness.toml and the scenario file, then died on the .gitignore with an
    OSError traceback (exit 1); a rerun refused because the scenario file existed."""
    gitignore = tmp_path / ".gitignore"
    gitignore.write_text("*.pyc\n")
    gitignore.chmod(0o444)
    before = snapshot(tmp_path)
    assert main(["init", "--model", "tiny-llama", "--suite", "mine", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"harness init: {gitignore} is read-only" in err and "add /reports/ to it yourself" in err, err
    assert "(nothing was written)" in err
    assert snapshot(tmp_path) == before
    gitignore.chmod(0o644)
    assert main(["init", "--model", "tiny-llama", "--suite", "mine", "--dir", str(tmp_path)]) == 0  # the rerun goes through


def test_a_crlf_gitignore_stays_crlf(tmp_path):
    (tmp_path / ".gitignore").write_bytes(b"*.pyc\r\nbuild/\r\n")
    done = init_project(tmp_path, "tiny-llama", suite="mine")
    after = (tmp_path / ".gitignore").read_bytes()
    assert done.ignored == ("/reports/",)
    assert after.startswith(b"*.pyc\r\nbuild/\r\n") and after.endswith(b"/reports/\r\n")
    assert after.count(b"\n") == after.count(b"\r\n")


def test_a_gitignore_without_a_final_newline_keeps_its_state_and_its_bytes(tmp_path):
    (tmp_path / ".gitignore").write_bytes(b"*.pyc\r\nbuild/")
    init_project(tmp_path, "tiny-llama", suite="mine")
    assert (tmp_path / ".gitignore").read_bytes().split(b"\r\n") == [
        b"*.pyc",
        b"build/",
        b"# written by `harness init`: run output and the engine's environment",
        b"/reports/",
    ]


def test_a_scenarios_path_that_is_a_file_is_exit_2_with_nothing_written(tmp_path, capsys):
    """The config was written first, then making scenarios/ failed: a traceback and a project
    config that names a directory that cannot exist."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "engine"\n')
    (tmp_path / "scenarios").write_text("not a directory")
    before = snapshot(tmp_path)
    assert main(["init", "--model", "tiny-llama", "--suite", "mine", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"harness init: cannot write {tmp_path / 'scenarios' / 'mine.yaml'}:" in err and "(nothing was written)" in err, err
    assert snapshot(tmp_path) == before


def test_a_write_that_fails_half_way_puts_back_what_was_written(tmp_path, monkeypatch):
    """A disk that fills while the last file is appended to: the files written before it are
    removed, the half-appended one cut back to its old bytes, the directories made removed."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "engine"\n')
    (tmp_path / ".gitignore").write_text("*.pyc\n")
    before = snapshot(tmp_path)
    appended: list[Path] = []

    def append(path: Path, addition: bytes) -> None:
        if appended:  # the second file appended to: half of it, then the disk is full
            with path.open("ab") as f:
                f.write(addition[: len(addition) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        appended.append(path)
        real_append(path, addition)

    real_append = project_init._append
    monkeypatch.setattr(project_init, "_append", append)
    error = raised(lambda: init_project(tmp_path, "tiny-llama", suite="mine"))
    assert isinstance(error, InitError) and "No space left on device" in str(error) and "(nothing was written)" in str(error)
    assert appended  # one file had been appended to in full when the other failed
    assert snapshot(tmp_path) == before
