"""A configured scenarios path that cannot be read is an error naming it (exit 2), never a
silent skip: with `scenarios = ["scenarios", "scenario-gpu"]` (a typo) a PR gate used to
pass having run none of the misspelt directory's suites. The project config a command used
is said and kept (a config in a parent directory is easy to miss)."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.contract import roots
from harness.contract.settings.project import ProjectConfigError


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_CACHE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("builtin", ["false", "true"])
def test_a_misspelt_scenarios_directory_is_an_error_naming_it(tmp_path, monkeypatch, capsys, builtin):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "harness.toml").write_text(f'scenarios = ["scenarios", "scenario-gpu"]\nbuiltin_suites = {builtin}\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProjectConfigError, match="scenarios entry '.*scenario-gpu' cannot be read: No such file"):
        roots.scenario_paths()
    assert main(["run", "--gate", "pr"]) == 2
    err = capsys.readouterr().err
    assert "scenario-gpu' cannot be read" in err and str(tmp_path / "harness.toml") in err


def test_a_symlink_loop_is_an_error_too(tmp_path, monkeypatch):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "harness.toml").write_text('scenarios = "loop"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProjectConfigError, match="'.*loop' cannot be read: Too many levels of symbolic links"):
        roots.scenario_paths()


def test_the_default_scenarios_dir_of_a_new_project_may_not_exist_yet(tmp_path, monkeypatch):
    (tmp_path / "harness.toml").write_text('golden = "g"\n')  # scenarios not configured: the default
    monkeypatch.chdir(tmp_path)
    assert roots.scenario_paths() == [roots.builtin_scenarios()]
