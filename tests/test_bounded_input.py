"""Scenario input has bounds (harness/contract/yamlfile.py, inputs/scenarios/scenario.py): a file that
is not a small regular YAML file, an alias bomb, a list nested past the interpreter's stack
and a matrix of 10^8 combinations are each refused with the file's name, before they can
take the machine's memory or time; through the CLI each is exit 2, never a traceback."""

from __future__ import annotations

import os

import pytest

from harness.cli import main
from harness.contract import yamlfile
from harness.inputs.scenarios.loading import load_catalog, load_suite
from harness.inputs.scenarios.schema import ScenarioError

GOOD = """suite: demo
model: tiny-llama
workloads: [{name: logits, kind: logprobs}]
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2], pp: [1, 2]}
"""


def _write(tmp_path, text, name="demo.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_alias_bomb_is_refused_by_its_expanded_size(tmp_path):
    levels = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    levels += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = _write(tmp_path, GOOD.replace("golden:", "engine_options: {}\ngolden:") + "\n".join(levels) + "\n")
    assert len(path.read_bytes()) < 1200
    with pytest.raises(ScenarioError, match=rf"{path}: more than 200000 values with its aliases expanded"):
        load_suite(path)


def test_a_deeply_nested_list_is_refused_with_the_file_name(tmp_path):
    path = _write(tmp_path, "suite: demo\nx: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ScenarioError, match=rf"{path}: nested more than {yamlfile.MAX_DEPTH} levels deep"):
        load_suite(path)


def test_only_small_regular_files_are_read(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer came
    with pytest.raises(ScenarioError, match="fifo.yaml: not a regular file \\(a FIFO\\)"):
        load_suite(fifo)
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    with pytest.raises(ScenarioError, match="zero.yaml: not a regular file \\(a character device\\)"):
        load_suite(tmp_path / "zero.yaml")
    big = _write(tmp_path, GOOD + "#" * yamlfile.MAX_BYTES, "big.yaml")
    with pytest.raises(ScenarioError, match="big.yaml: .* more than a scenario file may have"):
        load_suite(big)


def test_a_matrix_larger_than_the_limit_is_refused_before_expansion(tmp_path, monkeypatch):
    many = ", ".join(str(i) for i in range(1, 10_001))
    path = _write(tmp_path, GOOD.replace("matrix: {tp: [1, 2], pp: [1, 2]}", f"matrix: {{tp: [{many}], pp: [{many}]}}"))
    catalog = load_catalog([path])  # 10^8 combinations: refused from the lengths, none is made
    assert not catalog.scenarios and len(catalog.broken) == 1
    assert "matrix has 100000000 combinations, more than 10000" in catalog.broken[0].problem
    assert "HARNESS_MAX_SCENARIOS" in catalog.broken[0].problem
    monkeypatch.setenv("HARNESS_MAX_SCENARIOS", "3")
    assert "matrix has 4 combinations, more than 3" in load_catalog([_write(tmp_path, GOOD, "small.yaml")]).broken[0].problem


def test_the_cli_says_each_refusal_and_exits_2(tmp_path, capsys):
    path = _write(tmp_path, "suite: demo\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    assert main(["--scenarios", str(path), "list"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: nested more than" in err and "Traceback" not in err


def _outcome(parse, text):
    try:
        return ("ok", parse(text))
    except (yamlfile.YamlFileError, ValueError) as exc:
        return ("refused", str(exc))


def _pure_python(text):
    loader = yamlfile._BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@pytest.mark.skipif(yamlfile._FastLoader is None, reason="PyYAML without libyaml: only the pure-Python loader exists")
@pytest.mark.parametrize(
    "text",
    [
        *(("[" * d + "]" * d) for d in (63, 64, 65)),  # the depth bound, both sides
        *(("a: " + "[" * (d - 1) + "x" + "]" * (d - 1)) for d in (63, 64)),  # a scalar is a node of its own
        "a: &x [1, {b: 2}]\nc: *x\nd: 2026-11-27\ne: {1: yes}\n",  # aliases, dates, non-string keys
        "",
    ],
    ids=["depth63", "depth64", "depth65", "scalar63", "scalar64", "aliases", "empty"],
)
def test_libyamls_parse_gives_what_the_pure_python_loader_gives(text):
    assert _outcome(yamlfile._parse_fast, text) == _outcome(_pure_python, text)


@pytest.mark.skipif(yamlfile._FastLoader is None, reason="PyYAML without libyaml: only the pure-Python loader exists")
def test_every_shipped_scenario_file_parses_alike_with_libyaml():
    from harness.contract.roots import builtin_scenarios

    files = sorted(builtin_scenarios().glob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text()
        assert yamlfile._parse_fast(text) == _pure_python(text), path


@pytest.mark.skipif(yamlfile._FastLoader is None, reason="PyYAML without libyaml: only the pure-Python loader exists")
def test_a_valid_file_is_read_by_libyaml_alone(monkeypatch, tmp_path):
    """The pure-Python loader is for what libyaml cannot parse (its messages), not the
    common path: every command reads every suite file."""

    def slow(text):
        raise AssertionError("the pure-Python loader ran for a valid file")

    monkeypatch.setattr(yamlfile, "_BoundedLoader", slow)
    assert yamlfile.load_bounded(_write(tmp_path, GOOD))["suite"] == "demo"
