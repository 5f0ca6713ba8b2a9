"""Bad input gets an honest answer: exit 2 with a message that says what is wrong and what
to do, never a traceback, and nothing asked for is silently dropped (docs/RELIABILITY.md,
"Bad input and faults, second probe")."""

from __future__ import annotations

import pytest

from harness import api
from harness.cli import main
from harness.contract.roots import builtin_scenarios
from harness.engines import envdir
from harness.engines.vllm import _fix_for
from harness.inputs.scenarios.loading import load_catalog
from harness.run.plan.planning import plan_run
from harness.run.request import RunConfig


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_CACHE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('tool = "x"\n', "`tool` is str, not a table"),
        ('[tool]\nharness = "x"\n', "`tool.harness` is str, not a table: write [tool.harness]"),
    ],
)
def test_a_pyproject_whose_tool_is_not_a_table_is_exit_2(tmp_path, monkeypatch, capsys, text, said):
    (tmp_path / "pyproject.toml").write_text(text)
    deeper = tmp_path / "engine" / "src"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)  # the ancestor's file is the one found
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'pyproject.toml'}: {said}" in err and "Traceback" not in err


def test_init_into_a_missing_directory_is_exit_2_saying_so(tmp_path, capsys):
    missing = tmp_path / "missing" / "deeper"
    assert main(["init", "--model", "tiny-llama", "--dir", str(missing)]) == 2
    assert f"{missing} is not a directory: create it first" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


def test_init_refuses_the_name_of_a_built_in_suite(tmp_path, capsys):
    """The project's file would be refused beside the built-in suite of that name: no command
    would then load the project init had just written."""
    assert main(["init", "--model", "tiny-llama", "--suite", "llama-tiny", "--dir", str(tmp_path)]) == 2
    assert "'llama-tiny' is the name of a built-in suite" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_ids_named_with_changed_files_are_run_too(tmp_path):
    changed = tmp_path / "changed.txt"
    changed.write_text("harness/engines/reference/parallel.py\n")
    scenarios = load_catalog([builtin_scenarios() / "llama-tiny.yaml"]).scenarios
    named = [s for s in scenarios if s.id == "llama-tiny/tp1-pp2"]
    request = RunConfig(report_dir=tmp_path, gate="pr", ids=("llama-tiny/tp1-pp2",), changed_files=changed)
    plan = plan_run(request, scenarios, named, tmp_path)
    ids = [s.id for s in plan.scenarios]
    assert "llama-tiny/tp1-pp2" in ids and "llama-tiny/tp2-pp1" in ids  # named, and picked by the change
    assert plan.meta["selection"]["named"] == ["llama-tiny/tp1-pp2"]
    without = plan_run(
        RunConfig(report_dir=tmp_path, gate="pr", changed_files=changed),
        scenarios,
        [s for s in scenarios if "pr" in s.gates],
        tmp_path,
    )
    assert "llama-tiny/tp1-pp2" not in [s.id for s in without.scenarios]  # not named: the change rules alone


def test_assert_settings_agree_without_settings_is_a_value_error():
    with pytest.raises(ValueError, match="a must be a mapping of settings like {'tp': 2}, got NoneType"):
        api.assert_settings_agree("tiny-llama", a=None, b={"tp": 2})  # type: ignore[arg-type]


def test_a_built_environment_without_vllm_says_to_remove_it_not_to_install_vllm(tmp_path):
    venv = tmp_path / "envs" / "vllm-0.22.1"
    (venv / "bin").mkdir(parents=True)
    (venv / envdir.MARKER).write_text("{}")
    said = _fix_for(venv / "bin" / "python")
    assert f"remove {venv} and run again" in said and "install vllm" not in said
    assert "harness install vllm" in _fix_for(tmp_path / "elsewhere" / "bin" / "python")
