"""Engines and models of installed packages, found through entry points.

Every test installs a fake distribution the way pip leaves one on disk: a folder on
sys.path with `<name>-<version>.dist-info/` (METADATA, entry_points.txt) and the
package's module beside it. Discovery is the real importlib.metadata; nothing is mocked.
"""

from __future__ import annotations

import sys

import pytest

from harness import cli
from harness.contract import plugins
from harness.engines import EngineUnavailable, declared_axes, engine_names, get_engine, inventory
from harness.inputs import zoo
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.scenarios.schema import ScenarioError
from tests.kit.plugins import Site


@pytest.fixture
def site(tmp_path, monkeypatch):
    return Site(tmp_path / "site", monkeypatch)


def test_an_installed_packages_engine_is_found_by_its_entry_point_name(site):
    site.install("fake-engines", "1.2", {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine"}})
    assert "fake" in engine_names()
    engine = get_engine("fake")
    assert type(engine).__name__ == "FakeEngine" and engine.name == "fake"
    assert declared_axes("fake") == {"tp": (1, 2), "pp": (1,), "fast": (False, True)}
    assert engine.unsupported_reason({"tp": 4}) == "engine 'fake' does not support tp=4 (supported: [1, 2])"


def test_discovery_reads_metadata_only_and_imports_no_plugin(site):
    site.install("fake-engines", "1.2", {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine"}})
    assert "fake" in engine_names()
    get_engine("reference")  # a built-in never looks at the packages
    assert site.engines_mod not in sys.modules


def test_an_engine_without_a_name_takes_its_entry_point_name(site):
    site.install("fake-engines", "1.2", {"harness.engines": {"unnamed": f"{site.engines_mod}:Nameless"}})
    assert get_engine("unnamed").name == "unnamed"


@pytest.mark.parametrize(
    "value, said",
    [
        ("fake_module_that_is_not_there:Engine", "ModuleNotFoundError: No module named 'fake_module_that_is_not_there'"),
        ("{engines}:NoSuchClass", "AttributeError"),
        ("{engines}:NOT_AN_ENGINE", "is 42, not a subclass of harness.engines.base.Engine"),
    ],
)
def test_a_plugin_that_does_not_load_is_unavailable_naming_its_package(site, value, said):
    site.install("broken-engines", "0.3", {"harness.engines": {"broken": value.format(engines=site.engines_mod)}})
    assert "broken" in engine_names()  # listed: discovery does not import it
    with pytest.raises(EngineUnavailable) as err:
        get_engine("broken")
    assert "engine 'broken'" in str(err.value) and "broken-engines 0.3" in str(err.value)
    assert said in str(err.value)
    assert declared_axes("broken") is None  # a scenario file naming it is judged by any engine's axes


def test_a_plugin_that_raises_while_importing_is_unavailable_not_a_traceback(site):
    (site.root / f"explodes_{site.tag}.py").write_text("raise RuntimeError('no GPU driver here')\n")
    site.install("explosive", "1.0", {"harness.engines": {"boom": f"explodes_{site.tag}:Engine"}})
    with pytest.raises(EngineUnavailable, match=r"explosive 1.0 .*RuntimeError: no GPU driver here; reinstall it"):
        get_engine("boom")


def test_a_built_in_name_wins_over_a_package_that_registers_it(site):
    site.install("vllm-fork", "9.9", {"harness.engines": {"reference": f"{site.engines_mod}:FakeEngine"}})
    assert type(get_engine("reference")).__name__ == "ReferenceEngine"
    rows = [r for r in inventory() if r.name == "reference"]
    assert [r.status for r in rows] == ["ready", "shadowed"]
    assert "vllm-fork 9.9" in rows[1].origin and "built-in engine, which wins" in rows[1].detail


def test_two_packages_registering_one_name_is_an_error_naming_both(site):
    site.install("fake-engines", "1.2", {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine"}})
    site.install("other-engines", "0.1", {"harness.engines": {"fake": f"{site.engines_mod}:Nameless"}})
    with pytest.raises(EngineUnavailable) as err:
        get_engine("fake")
    assert "registered by 2 packages" in str(err.value)
    assert "fake-engines 1.2" in str(err.value) and "other-engines 0.1" in str(err.value)


def test_one_package_seen_twice_on_sys_path_counts_once(site, tmp_path, monkeypatch):
    site.install("fake-engines", "1.2", {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine"}})
    other = tmp_path / "again"
    site.install("fake-engines", "1.2", {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine"}}, where=other)
    monkeypatch.syspath_prepend(str(other))
    assert len(plugins.discover(plugins.ENGINES_GROUP)["fake"]) == 1
    assert get_engine("fake").name == "fake"


def test_harness_list_engines_says_where_each_comes_from_and_if_it_runs_here(site, capsys):
    site.install(
        "fake-engines",
        "1.2",
        {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine", "reference": f"{site.engines_mod}:FakeEngine"}},
    )
    site.install("broken-engines", "0.3", {"harness.engines": {"broken": "not_there_at_all:Engine"}})
    assert cli.main(["list", "--engines"]) == 0
    lines = {line.split()[0] + " " + line.split()[1]: line for line in capsys.readouterr().out.splitlines()}
    assert "built-in (harness.engines.reference:ReferenceEngine)" in lines["reference ready"]
    assert "axes: tp=any pp=any sp=false,true" in lines["reference ready"]
    fake = lines["fake ready"]
    assert f"fake-engines 1.2 ({site.engines_mod}:FakeEngine) [{site.root / site.engines_mod}.py]" in fake
    assert "axes: tp=1,2 pp=1 fast=false,true" in fake
    assert "No module named 'not_there_at_all'" in lines["broken does"]
    assert "pip install broken-engines" in lines["broken does"]
    assert "fake-engines 1.2" in lines["reference shadowed"]
    assert any(k.startswith("hf ") for k in lines) and any(k.startswith("vllm ") for k in lines)


def test_a_scenario_file_names_a_package_engine_and_is_checked_against_its_axes(site, tmp_path):
    site.install("fake-engines", "1.2", {"harness.engines": {"fake": f"{site.engines_mod}:FakeEngine"}})
    path = tmp_path / "s.yaml"
    base = "suite: s\nengine: fake\nmodel: tiny-llama\nworkloads: [{name: logits, kind: logprobs}]\ngolden: {tp: 1}\n"
    path.write_text(base + "matrix: {tp: [1, 2], fast: [false]}\n")
    with pytest.raises(ScenarioError, match="golden must set every matrix axis"):
        load_suite(path)
    path.write_text(base + "matrix: {tp: [1, 2]}\n")
    assert load_suite(path).engine == "fake"
    path.write_text(base + "matrix: {tp: [1], sp: [true]}\n")
    with pytest.raises(ScenarioError, match="axis 'sp' is not an axis of engine 'fake'"):
        load_suite(path)


def test_an_installed_packages_model_joins_the_zoo(site, tmp_path, capsys):
    site.install(
        "fake-models",
        "2.0",
        {
            "harness.models": {
                "tiny-fake": f"{site.models_mod}:TINY_FAKE",
                "tiny-made": f"{site.models_mod}:make_tiny_made",
                "tiny-wrong": f"{site.models_mod}:WRONG_NAME",
                "tiny-llama": f"{site.models_mod}:TINY_FAKE",
                "tiny-gone": "not_there_either:SPEC",
            }
        },
    )
    assert {"tiny-fake", "tiny-made", "tiny-gone"} <= set(zoo.model_names())
    assert site.models_mod not in sys.modules  # names only, until one is asked for
    assert zoo.has_model("tiny-fake") and zoo.get_recipe("tiny-fake").notes == "a package's tiny Llama"
    assert zoo.get_recipe("tiny-made").name == "tiny-made"  # a factory that returns the recipe
    assert zoo.get_recipe("tiny-llama") is zoo.ZOO["tiny-llama"]  # the table wins
    with pytest.raises(zoo.ModelUnavailable, match="entry point's name and the recipe's name must be the same"):
        zoo.get_recipe("tiny-wrong")
    with pytest.raises(zoo.ModelUnavailable, match="fake-models 2.0 .*No module named 'not_there_either'"):
        zoo.get_recipe("tiny-gone")
    path = tmp_path / "s.yaml"
    path.write_text(
        "suite: s\nmodel: tiny-fake\nworkloads: [{name: logits, kind: logprobs}]\ngolden: {tp: 1}\nmatrix: {tp: [1]}\n"
    )
    assert load_suite(path).model == "tiny-fake"

    from harness.inputs import models

    with pytest.raises(models.ModelError, match="fake-models 2.0"):
        models.resolve("tiny-gone", sys.executable)

    assert cli.main(["list", "--models"]) == 0
    out = capsys.readouterr().out
    assert f"fake-models 2.0 ({site.models_mod}:TINY_FAKE)" in out and "a package's tiny Llama" in out
    assert "shadowed" in out and "does not load" in out
