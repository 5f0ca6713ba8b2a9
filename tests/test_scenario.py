"""Scenario files: expansion into stable ids, gates, expected failures, and errors
that name the file and the field."""

from pathlib import Path

import pytest

from harness.inputs.models import PathModel
from harness.inputs.scenarios.loading import load_scenarios, load_suite
from harness.inputs.scenarios.scenario import select, settings_label
from harness.inputs.scenarios.schema import ScenarioError
from tests.kit import harness_cli

BASE = """
suite: demo
model: tiny-llama
workloads: [{name: logits, kind: logprobs}]
golden: {tp: 1, pp: 1, sp: false, compile: false}
matrix: {tp: [1, 2], pp: [1, 2], sp: [false, true], compile: [false, true]}
exclude: [{tp: 1, sp: true}]
gates: {pr: [tp1-pp1, "tp2-pp2*"]}
expected_failures:
  - match: {tp: 2, pp: 2, sp: true, compile: true}
    reason: engine bug 123
"""


def write(tmp_path: Path, text: str, name: str = "demo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_expansion_ids_gates_and_expected_failures(tmp_path):
    scenarios = load_scenarios([write(tmp_path, BASE)])
    ids = [s.id for s in scenarios]
    assert len(ids) == 12  # tp1: 2 pp x 2 compile; tp2: 2 pp x 2 sp x 2 compile
    assert "demo/tp2-pp2-sp-compile" in ids and "demo/tp1-pp1" in ids
    assert not any(s.settings["tp"] == 1 and s.settings["sp"] for s in scenarios)
    pr = [s.id for s in select(scenarios, gate="pr")]
    assert pr == ["demo/tp1-pp1", "demo/tp2-pp2", "demo/tp2-pp2-compile", "demo/tp2-pp2-sp", "demo/tp2-pp2-sp-compile"]
    assert all("nightly" in s.gates for s in scenarios)  # nightly defaults to everything
    xfail = [s for s in scenarios if s.expected_failure]
    assert [s.id for s in xfail] == ["demo/tp2-pp2-sp-compile"] and xfail[0].expected_failure == "engine bug 123"


def test_ids_are_valid_make_targets_and_node_ids(tmp_path):
    for s in load_scenarios([write(tmp_path, BASE)]):
        assert all(c.isalnum() and c.islower() or c.isdigit() or c in "./-" for c in s.id), s.id


def test_settings_label():
    assert settings_label({"tp": 2, "pp": 1, "sp": True, "compile": False}, ["tp", "pp", "sp", "compile"]) == "tp2-pp1-sp"
    assert settings_label({"kv": "fp8"}, ["kv"]) == "kv-fp8"
    # one data-parallel replica is no data parallelism: a suite that adds dp keeps its other ids
    axes = ["tp", "pp", "dp", "ep"]
    assert settings_label({"tp": 2, "pp": 1, "dp": 1, "ep": True}, axes) == "tp2-pp1-ep"
    assert settings_label({"tp": 1, "pp": 1, "dp": 2, "ep": True}, axes) == "tp1-pp1-dp2-ep"


def test_select_by_suite_glob_and_unknown(tmp_path):
    scenarios = load_scenarios([write(tmp_path, BASE)])
    assert len(select(scenarios, ["demo"])) == 12
    assert [s.id for s in select(scenarios, ["demo/tp1-*"])] == [
        "demo/tp1-pp1",
        "demo/tp1-pp1-compile",
        "demo/tp1-pp2",
        "demo/tp1-pp2-compile",
    ]
    with pytest.raises(ScenarioError, match="no scenario matches 'demo/tp9'"):
        select(scenarios, ["demo/tp9"])


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            ("golden: {tp: 1, pp: 1, sp: false, compile: false}", "golden: {tp: 1, pp: 1, sp: false, compile: false, ep: 2}"),
            "golden names axes not in the matrix: ['ep']",
        ),
        (("golden: {tp: 1, pp: 1, sp: false, compile: false}", "golden: {tp: 1}"), "golden must set every matrix axis"),
        (("kind: logprobs", "kind: logits"), "workloads.0.kind"),
        (("model: tiny-llama", "model: tiny-llama\ncolour: blue"), "colour: Extra inputs are not permitted"),
        (("suite: demo", "suite: Demo_Suite"), "suite: 'Demo_Suite' is not a valid suite name"),
        (("tp: [1, 2]", "tp: []"), "axis 'tp' has no values"),
        (("reason: engine bug 123", "reason: ''"), "expected_failures.0.reason"),
        (("model: tiny-llama", "model: tiny-llama\ntimeout_s: .inf"), "timeout_s: Input should be a finite number"),
        (("model: tiny-llama", "model: tiny-llama\ntimeout_s: 0"), "timeout_s: Input should be greater than 0"),
        # `$` matches before a trailing newline: an id part ending in one split summary rows and make lines
        (("suite: demo", 'suite: "demo\\n"'), "suite: 'demo\\n' is not a valid suite name"),
        (("model: tiny-llama", 'archs: {"tiny\\n": LlamaForCausalLM}'), "archs names ['tiny\\n'] must use [a-z0-9.-]"),
        # a gate's name ends the default run id, a directory name
        (("gates: {pr:", 'gates: {"pr/x":'), "gates: gate name 'pr/x' must use [a-z0-9.-]"),
        # what the OS refuses in an environment: a rank given it died before its log opened
        (("model: tiny-llama", 'model: tiny-llama\nenv: {"": x}'), "env: the name is empty"),
        (("model: tiny-llama", 'model: tiny-llama\nenv: {"A=B": x}'), "env: the name 'A=B' contains '='"),
    ],
)
def test_validation_names_file_and_field(tmp_path, change, expected):
    path = write(tmp_path, BASE.replace(*change))
    with pytest.raises(ScenarioError) as err:
        load_suite(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_bad_yaml_and_non_mapping(tmp_path):
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_suite(write(tmp_path, "suite: [unclosed"))
    with pytest.raises(ScenarioError, match="a scenario file is a mapping"):
        load_suite(write(tmp_path, "- just a list"))
    with pytest.raises(ScenarioError, match="cannot read"):
        load_suite(tmp_path / "missing.yaml")


def test_duplicate_suite_names_across_files(tmp_path):
    a, b = write(tmp_path, BASE, "a.yaml"), write(tmp_path, BASE, "b.yaml")
    with pytest.raises(ScenarioError, match="suite 'demo' is already defined"):
        load_scenarios([a, b])


def test_shipped_scenarios_are_valid_and_cover_the_pr_gate():
    scenarios = load_scenarios()
    pr = {s.id for s in select(scenarios, gate="pr")}
    assert len(pr) >= 6
    assert "llama-tiny/tp2-pp2" in pr
    assert any(s.settings.get("sp") for s in scenarios if s.id in pr)
    assert any(s.settings.get("compile") for s in scenarios if s.id in pr)


@pytest.mark.parametrize(
    "change, expected",
    [
        (("tp: [1, 2]", 'tp: [1, "two"]'), "matrix: axis 'tp' value 'two': tp is a parallel size, an integer >= 1"),
        (("tp: [1, 2]", "tp: [1, -2]"), "axis 'tp' value -2: tp is a parallel size, an integer >= 1"),
        (("tp: [1, 2]", "tp: [1, true]"), "axis 'tp' value True: tp is a parallel size, an integer >= 1"),
        (("pp: [1, 2]", "pp: [0, 1]"), "axis 'pp' value 0: pp is a parallel size"),
        (("sp: [false, true]", "sp: [0, 1]"), "axis 'sp' value 0: sp is a switch, true or false"),
        (("golden: {tp: 1,", "golden: {tp: 0,"), "golden: axis 'tp' value 0: tp is a parallel size"),
        (("exclude: [{tp: 1, sp: true}]", "exclude: [{tp: 1, sp: yes please}]"), "exclude.0: axis 'sp' value 'yes please'"),
        (("match: {tp: 2,", "match: {tp: -2,"), "expected_failures.0.match: axis 'tp' value -2"),
    ],
)
def test_axis_values_are_checked_by_type_and_range(tmp_path, change, expected):
    """A value that cannot be a setting is an error of the file, not a traceback or an
    `unsupported` scenario at run time."""
    assert change[0] in BASE
    path = write(tmp_path, BASE.replace(*change))
    with pytest.raises(ScenarioError) as err:
        load_suite(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_an_axis_the_engine_does_not_know_is_an_error_naming_the_known_axes(tmp_path):
    """A typo in an axis name made every scenario `unsupported`: a green suite that ran nothing."""
    text = BASE.replace("compile: [false, true]}", "compile: [false, true], foo: [1]}").replace(
        "compile: false}", "compile: false, foo: 1}"
    )
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_suite(path)
    message = str(err.value)
    assert str(path) in message and "matrix: axis 'foo' is not an axis of engine 'reference'" in message
    assert "known axes: arch, batch, block_size, chunked_prefill, compile, dp, ep, kvc, pp, prefix_cache, sp, spec, tp" in message


def test_axes_of_an_engine_that_cannot_be_loaded_are_checked_against_every_engine(tmp_path):
    """An unknown engine is reported when its scenarios run (with the known engines);
    its axes must still be axes of some engine."""
    assert load_suite(write(tmp_path, BASE.replace("suite: demo", "suite: demo\nengine: nosuch"))).engine == "nosuch"
    text = BASE.replace("suite: demo", "suite: demo\nengine: nosuch").replace("sp:", "spp:")
    with pytest.raises(ScenarioError, match="axis 'spp' is not an axis of any engine"):
        load_suite(write(tmp_path, text))


def test_an_unknown_model_is_an_error_of_the_file_naming_the_zoo(tmp_path):
    """It used to load, then end every scenario as "harness error: KeyError ..."."""
    path = write(tmp_path, BASE.replace("model: tiny-llama", "model: tiny-lama"))
    with pytest.raises(ScenarioError) as err:
        load_suite(path)
    message = str(err.value)
    assert str(path) in message and "model: unknown model 'tiny-lama'" in message
    assert "tiny-llama" in message and "{path: DIR}" in message


def test_a_model_that_is_not_a_zoo_name_is_left_to_its_source(tmp_path):
    suite = load_suite(write(tmp_path, BASE.replace("model: tiny-llama", "model: {path: ckpt/my-llama}")))
    assert isinstance(suite.model, PathModel)
    assert suite.model.path == "ckpt/my-llama"


@pytest.mark.e2e
@pytest.mark.parametrize(
    "change, problem",
    [
        (("suite: demo", 'suite: "demo\\n"'), "'demo\\n' is not a valid suite name"),
        (("model: tiny-llama", 'archs: {"tiny\\n": LlamaForCausalLM}'), "archs names ['tiny\\n'] must use [a-z0-9.-]"),
    ],
)
def test_a_name_ending_in_a_newline_is_a_usage_error_of_the_cli(tmp_path, change, problem):
    """It used to pass (`$` matches before a final newline): `harness list --ids-only` printed
    ids split over two lines, and the run directories and make lines split with them."""
    (tmp_path / "scenarios").mkdir()
    write(tmp_path / "scenarios", BASE.replace(*change))
    done = harness_cli("list", "--ids-only", scenarios=tmp_path / "scenarios", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert problem in done.stderr and done.stdout == ""
