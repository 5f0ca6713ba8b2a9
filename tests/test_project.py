"""The project config (harness/contract/roots.py) and `harness init` (harness/cli/project_init.py),
in-process: a config is found upward from the working directory as pytest finds its
rootdir, its paths are relative to it, $HARNESS_* overrides it, a bad key is an error
naming the file and the keys there are, the built-in suites' goldens are read but never
written, and `harness init` writes a config and a valid first scenario file without
overwriting anything. tests/test_wheel.py runs all of it from an installed wheel."""

from __future__ import annotations

import pytest
import yaml

from harness.cli.project_init import InitError, init_project, model_entry
from harness.contract import roots
from harness.contract.settings.project import ProjectConfigError, find_config, project
from harness.inputs.scenarios.loading import load_scenarios, load_suite
from harness.inputs.scenarios.scenario import expand
from tests.kit.present import present


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_CACHE"):
        monkeypatch.delenv(name, raising=False)


def test_config_is_found_upward_and_its_paths_are_relative_to_it(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "engine"\n\n[tool.harness]\nscenarios = ["tests/harness"]\n'
        'golden = "tests/golden"\ncache = "cache"\nbuiltin_suites = false\n'
    )
    deep = tmp_path / "src" / "engine"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    here = project()
    assert here.root == tmp_path and here.config_file == tmp_path / "pyproject.toml"
    assert here.scenarios == (tmp_path / "tests" / "harness",)
    assert roots.golden_root() == tmp_path / "tests" / "golden"
    assert roots.reports_dir() == tmp_path / "reports"  # the default, under the project root
    assert roots.cache_dir("models") == tmp_path / "cache" / "models"
    with pytest.raises(ProjectConfigError, match="harness' cannot be read"):  # configured, so it must exist
        roots.scenario_paths()
    (tmp_path / "tests" / "harness").mkdir(parents=True)
    assert roots.scenario_paths() == [tmp_path / "tests" / "harness"]  # no built-in suites


def test_a_config_that_is_not_utf8_is_refused_naming_it(tmp_path, monkeypatch):
    """TOML is UTF-8: a byte that is not (0xff) was a UnicodeDecodeError traceback in every command."""
    (tmp_path / "pyproject.toml").write_bytes(b'[tool.harness]\nscenarios = ["s\xff"]\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProjectConfigError, match=r"pyproject.toml: cannot read the project config: .*utf-8"):
        project()


def test_the_config_is_parsed_once_and_again_after_an_edit(tmp_path, monkeypatch):
    """project() is asked for on every path the harness resolves: the file is parsed once,
    and again only when it changed (its size or modification time)."""
    import tomllib

    parsed = []
    real_loads = tomllib.loads

    def loads(text):
        parsed.append(text)
        return real_loads(text)

    monkeypatch.setattr(tomllib, "loads", loads)
    config = tmp_path / "harness.toml"
    config.write_text('golden = "g"\n')
    monkeypatch.chdir(tmp_path)
    assert [project().golden for _ in range(3)] == [tmp_path / "g"] * 3
    assert len(parsed) == 1
    config.write_text('golden = "other"\n')
    assert project().golden == tmp_path / "other" and len(parsed) == 2


def test_environment_overrides_the_config(tmp_path, monkeypatch):
    (tmp_path / "harness.toml").write_text('golden = "g"\nreports = "r"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HARNESS_REPORTS_DIR", str(tmp_path / "runs"))
    assert roots.golden_root() == tmp_path / "elsewhere"
    assert roots.reports_dir() == tmp_path / "runs"
    assert roots.reports_dir(tmp_path / "flag") == tmp_path / "flag"  # a flag beats both


def test_a_pyproject_without_a_harness_table_is_not_a_project(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "y"\n')
    monkeypatch.chdir(inner)
    here = project()
    assert here.config_file is None and here.root == inner  # no config: the working directory is the root


def test_a_bad_key_names_the_file_and_the_keys(tmp_path, monkeypatch):
    (tmp_path / "harness.toml").write_text('scenario = "typo"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProjectConfigError, match=r"harness.toml: scenario: .*keys: scenarios, golden"):
        project()


def test_builtin_goldens_are_read_but_written_to_the_project(tmp_path, monkeypatch):
    (tmp_path / "harness.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    assert roots.golden_dir("llama-tiny") == roots.builtin_golden() / "llama-tiny"
    assert roots.golden_root() == tmp_path / "golden"  # where `harness golden llama-tiny` would write
    (tmp_path / "golden" / "llama-tiny").mkdir(parents=True)
    assert roots.golden_dir("llama-tiny") == tmp_path / "golden" / "llama-tiny"  # the project's own wins
    suites = {s.suite.suite for s in load_scenarios()}
    assert "llama-tiny" in suites  # the built-in suites are listed in any project by default


def test_import_root_holds_only_the_harness():
    root = roots.import_root()
    assert (root / "harness" / "__init__.py").is_file()
    assert not (root / "torch").exists()  # never site-packages: it would shadow an engine's own torch


def test_init_writes_a_config_and_a_valid_scenario_file(tmp_path):
    done = init_project(tmp_path, "tiny-llama", suite="mine")
    assert done.config == tmp_path / "harness.toml"
    suite = load_suite(done.scenario_file)
    scenarios = {s.name: s for s in expand(suite, done.scenario_file)}
    assert suite.model == "tiny-llama" and suite.engine == "reference"
    assert {"tp1-pp1", "tp2-pp1", "tp1-pp2", "tp2-pp2-sp"} <= set(scenarios)
    pr = yaml.safe_load(done.scenario_file.read_text())["gates"]["pr"]
    assert "tp1-pp1" in pr and "tp2-pp1" in pr and "tp2-pp2" not in pr  # one change from the golden at a time
    with pytest.raises(InitError, match="exists"):
        init_project(tmp_path, "tiny-llama", suite="mine")
    again = init_project(tmp_path, "tiny-qwen3", engine="hf")  # the reference engine runs llama models only
    assert again.config is None  # the config already there is kept as it was


def test_init_appends_to_an_existing_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "engine"\n')
    done = init_project(tmp_path, "arch:Qwen3ForCausalLM", engine="hf")
    assert done.config == tmp_path / "pyproject.toml"
    assert present(find_config(tmp_path))[0] == tmp_path / "pyproject.toml"
    assert yaml.safe_load(done.scenario_file.read_text())["matrix"] == {"tp": [1], "pp": [1]}  # what hf allows


def test_model_entries(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert model_entry(str(tmp_path)) == {"path": str(tmp_path.resolve())}
    assert model_entry("arch:LlamaForCausalLM") == {"arch": "LlamaForCausalLM", "seed": 0}
    assert model_entry("org/name@abc123") == {"hub": "org/name", "revision": "abc123"}
    with pytest.raises(InitError, match="pin the hub model's revision"):
        model_entry("org/name")
    with pytest.raises(InitError, match="no config.json"):
        model_entry(str(tmp_path / ".."))
    with pytest.raises(InitError, match="zoo model"):
        model_entry("nonsense")


def test_harness_golden_makes_the_projects_own_goldens_only(tmp_path, monkeypatch, capsys):
    """`harness golden` in an engine's project: its own suites, never every built-in suite
    (those ship with their goldens); a built-in suite named is regenerated into the project."""
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    init_project(tmp_path, "tiny-llama", suite="mine")
    made = []

    def make_golden(scenario, work_dir, opts):
        made.append(scenario.golden_key)
        return tmp_path

    monkeypatch.setattr("harness.run.runner.make_golden", make_golden)
    assert main(["golden"]) == 0
    assert made == ["mine"]
    assert not roots.shipped_only(tmp_path / "scenarios" / "mine.yaml")
    assert roots.shipped_only(roots.builtin_scenarios() / "llama-tiny.yaml")


def test_init_keeps_run_output_and_the_engines_environment_out_of_git(tmp_path):
    """`git add .` after init took reports/ and the 3.5 GB .venv-vllm beside the goldens."""
    (tmp_path / ".gitignore").write_text("*.pyc\nreports/")  # one entry there already, no final newline
    done = init_project(tmp_path, "arch:Qwen3ForCausalLM", engine="vllm")
    lines = (tmp_path / ".gitignore").read_text().splitlines()
    assert done.gitignore == tmp_path / ".gitignore" and done.ignored == ("/.venv-vllm/",)
    assert lines[:2] == ["*.pyc", "reports/"] and lines[-1] == "/.venv-vllm/" and "/reports/" not in lines
    assert init_project(tmp_path, "arch:Qwen3ForCausalLM", engine="vllm", suite="again").gitignore is None  # nothing to add
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert init_project(fresh, "tiny-llama").ignored == ("/reports/",)  # the reference engine has no environment of its own


def test_a_project_made_by_init_runs_its_own_suites_only(tmp_path, monkeypatch):
    """init's config leaves the built-in suites out (`builtin_suites = false`): an engine's gate
    is its own suites; a project asks for the built-in ones by turning it on."""
    init_project(tmp_path, "tiny-llama", suite="mine")
    monkeypatch.chdir(tmp_path)
    assert {s.suite.suite for s in load_scenarios(roots.scenario_paths())} == {"mine"}
    config = tmp_path / "harness.toml"
    config.write_text(config.read_text().replace("builtin_suites = false", "builtin_suites = true"))
    assert "llama-tiny" in {s.suite.suite for s in load_scenarios(roots.scenario_paths())}


def test_harness_golden_says_what_it_does_while_it_runs(tmp_path, monkeypatch, capsys):
    """`harness golden` printed nothing for 162 s while vLLM compiled: it now says which golden
    it makes, and every beat how long it has run and what the ranks are doing (their phase marks)."""
    import time

    from harness.cli import main
    from harness.contract.phases import PhaseMarks
    from harness.contract.rundir import OUTPUTS
    from harness.run.runner import golden_work_dir

    monkeypatch.chdir(tmp_path)
    init_project(tmp_path, "tiny-llama", suite="mine")
    monkeypatch.setattr("harness.run.report.progress.BEAT_S", 0.05)

    def slow_golden(scenario, work_dir, opts):
        PhaseMarks(golden_work_dir(work_dir, scenario.golden_key) / OUTPUTS, rank=0).mark("load")
        time.sleep(0.5)
        return tmp_path / "golden" / "mine"

    monkeypatch.setattr("harness.run.runner.make_golden", slow_golden)
    assert main(["golden"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "[1/1] golden mine: running reference at its golden setting (tp=1 pp=1 sp=false compile=false)", said
    assert "[1/1] golden mine: still running (0:00): warming up / compiling, or running its workloads" in said, said
    assert said[-1].startswith(f"[1/1] golden mine: {tmp_path / 'golden' / 'mine'} ("), said


def test_init_writes_only_what_the_installed_engine_runs_and_says_what_it_left_out(tmp_path, monkeypatch):
    from harness.engines.reference import ReferenceEngine

    def installed(self, say=lambda line: None):
        return {**self.axes, "sp": (False,)}, {"sp": "this install has no sequence-parallel pass"}

    monkeypatch.setattr(ReferenceEngine, "installed_axes", installed)
    done = init_project(tmp_path, "tiny-llama", suite="mine")
    raw = yaml.safe_load(done.scenario_file.read_text())
    assert "sp" not in raw["matrix"] and "sp" not in raw["golden"] and raw["matrix"]["tp"] == [1, 2]
    assert done.left_out == {"sp": "this install has no sequence-parallel pass"}
    assert not [s for s in load_scenarios([done.scenario_file]) if s.settings.get("sp")]


def test_init_with_an_engine_that_cannot_be_asked_writes_its_declaration_and_says_so(tmp_path, monkeypatch):
    from harness.engines.reference import ReferenceEngine

    def broken(self, say=lambda line: None):
        raise RuntimeError("probe interpreter missing")

    monkeypatch.setattr(ReferenceEngine, "installed_axes", broken)
    said: list[str] = []
    done = init_project(tmp_path, "tiny-llama", suite="mine", say=said.append)
    assert "sp" in yaml.safe_load(done.scenario_file.read_text())["matrix"] and not done.left_out
    assert said == [
        "the installed reference could not be asked what it runs (RuntimeError: probe interpreter missing); "
        "writing every value it declares"
    ]
