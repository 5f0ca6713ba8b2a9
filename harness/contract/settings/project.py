"""The project config: a `harness.toml`, or a `[tool.harness]` table in a pyproject.toml,
found as pytest finds its rootdir (the nearest directory, from the working directory
upward, that has one). Paths in it are relative to its directory. harness/contract/roots.py turns
it into the places the harness reads and writes; flags and HARNESS_* variables override it.
"""

from __future__ import annotations

import copy
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

CONFIG_FILE = "harness.toml"
PYPROJECT = "pyproject.toml"
# a parsed TOML table, as tomllib gives it: its values any TOML value
TomlTable = dict[str, Any]


class ProjectConfigError(ValueError):
    """A harness.toml or [tool.harness] table that cannot be used, with the file and key."""


class _Config(BaseModel):
    """The keys of a project config; every one optional."""

    model_config = ConfigDict(extra="forbid")
    scenarios: list[str] | str = "scenarios"  # scenario files or directories
    golden: str = "golden"
    reports: str = "reports"
    cache: str | None = None
    # list and run the harness's own suites beside the project's
    builtin_suites: bool = True


@dataclass(frozen=True)
class Project:
    # the config's directory, else the working directory
    root: Path
    config_file: Path | None  # None: no config found
    # the project's own scenario files and directories
    scenarios: tuple[Path, ...]
    golden: Path
    reports: Path
    cache: Path | None
    builtin_suites: bool = True
    # the config names them (else the default, which may not exist yet)
    scenarios_configured: bool = False


def working_directory() -> Path:
    """The working directory, which every default path starts from; one deleted under the
    shell (a build directory removed and made again) is the caller's to fix, not a traceback."""
    try:
        return Path.cwd()
    except FileNotFoundError:
        # a shell's $PWD names it, unless it is another directory's (a child started elsewhere)
        shell_pwd = os.environ.get("PWD", "")
        named = f" {shell_pwd}" if shell_pwd and not os.path.isdir(shell_pwd) else ""
        raise ProjectConfigError(
            f"the working directory{named} no longer exists (deleted or moved): cd into the project's directory and run again"
        ) from None


def find_config(start: Path | None = None) -> tuple[Path, TomlTable] | None:
    """(config file, its harness table) of the nearest project at or above `start`."""
    here = (start or working_directory()).resolve()
    for directory in (here, *here.parents):
        own = directory / CONFIG_FILE
        if own.is_file():
            return own, _read_toml(own)
        pyproject = directory / PYPROJECT
        if pyproject.is_file():
            table = _harness_table(pyproject)
            if table is not None:
                return pyproject, table
    return None


def _harness_table(pyproject: Path) -> TomlTable | None:
    """The [tool.harness] table of a pyproject.toml, or None; a `tool` or `tool.harness` that
    is not a table is that file's error (a user error: exit 2, never a traceback)."""
    tool = _read_toml(pyproject).get("tool", {})
    if not isinstance(tool, dict):
        raise ProjectConfigError(f"{pyproject}: `tool` is {type(tool).__name__}, not a table ([tool.NAME] sections)")
    table = tool.get("harness")
    if table is not None and not isinstance(table, dict):
        raise ProjectConfigError(f"{pyproject}: `tool.harness` is {type(table).__name__}, not a table: write [tool.harness]")
    return table


# Parsed config files by path, with the (mtime, size) they were read at: project() is asked
# for on every path the harness resolves, and the file changes only when someone edits it.
_parsed: dict[Path, tuple[tuple[int, int], TomlTable]] = {}


def _read_toml(path: Path) -> TomlTable:
    try:
        stat = path.stat()
        seen = (stat.st_mtime_ns, stat.st_size)
        cached = _parsed.get(path)
        if cached is None or cached[0] != seen:
            cached = _parsed[path] = (seen, tomllib.loads(path.read_text()))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:  # TOML is UTF-8 only
        raise ProjectConfigError(f"{path}: cannot read the project config: {exc}") from None
    # the caller's own: nobody edits the cached table
    return copy.deepcopy(cached[1])


def project(start: Path | None = None) -> Project:
    """The project the working directory (or `start`) belongs to."""
    found = find_config(start)
    raw: TomlTable
    config_file: Path | None
    if found is None:
        root, config_file, raw = (start or working_directory()).resolve(), None, {}
    else:
        config_file, raw = found
        root = config_file.parent
    try:
        config = _Config.model_validate(raw)
    except ValidationError as exc:
        where = f"{config_file}" + ("" if config_file and config_file.name == CONFIG_FILE else " [tool.harness]")
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(table)'}: {e['msg']}" for e in exc.errors())
        raise ProjectConfigError(f"{where}: {problems} (keys: {', '.join(_Config.model_fields)})") from None
    scenarios = [config.scenarios] if isinstance(config.scenarios, str) else config.scenarios
    return Project(
        root=root,
        config_file=config_file,
        scenarios=tuple(_under(root, p) for p in scenarios),
        golden=_under(root, config.golden),
        reports=_under(root, config.reports),
        cache=_under(root, config.cache) if config.cache else None,
        builtin_suites=config.builtin_suites,
        scenarios_configured="scenarios" in config.model_fields_set,
    )


def _under(root: Path, path: str) -> Path:
    given = Path(path).expanduser()
    return given if given.is_absolute() else root / given
