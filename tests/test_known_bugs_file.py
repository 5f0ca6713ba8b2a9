"""An engine's known-bugs file as an input (harness/contract/known_bugs.py): every file the
engines ship loads; a bad one (a malformed range, an id used twice, a bad regex, a list that
is not one, a missing or binary file, a `where` that misspells an axis or a value) is refused
with the file, the entry and the field and what is allowed, never a traceback. A bad file makes
its engine's suites unusable as a broken scenario file is (inputs/scenarios/binding.py): `harness
list` exits 2 naming it, `harness run` records each asked-for suite as `error`, pytest reports a
collection error; every other engine's suites list and run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract.axes import filled
from harness.contract.known_bugs import ARCH, ARCH_NAME, KnownBug, KnownBugsError, load_known_bugs
from harness.contract.roots import builtin_scenarios
from harness.contract.yamlfile import MAX_BYTES, MAX_DEPTH, MAX_NODES
from harness.engines import BUILTIN, get_engine
from harness.engines.vllm import VllmEngine
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import model_facts
from harness.inputs.scenarios.schema import ARCH_AXIS, ID_PART
from harness.pytest_plugin import RUN_ID_ENV
from tests.kit import ROOT

pytest_plugins = ["pytester"]

SEEN = "    seen: [{release: 0.32.0, scenario: s/x, verdict: crash}]\n"


def bug(bug_id: str = "a", **fields: str) -> str:
    """One entry of a known-bugs file, `fields` (YAML text) replacing or adding to a good one."""
    entry = {"id": bug_id, "reason": "x", "engine_version": '"vllm>=0.32"', "verdict": "crash", **fields}
    return "  - " + "\n    ".join(f"{k}: {v}" for k, v in entry.items()) + "\n" + SEEN


def entries(*bugs: str) -> str:
    return "known_bugs:\n" + "".join(bugs)


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


# ---- every shipped file loads ------------------------------------------------------------


def test_every_known_bugs_file_shipped_loads_with_its_engine_s_axes():
    files = {get_engine(name).known_bugs_file for name in BUILTIN} - {None}
    shipped = set(ROOT.glob("harness/**/known_bugs*.yaml")) | set(ROOT.glob("examples/**/known_bugs*.yaml"))
    assert shipped and shipped <= files, f"a known-bugs file no engine loads: {sorted(shipped - files)}"
    for name in BUILTIN:
        engine = get_engine(name)
        if engine.known_bugs_file:
            assert engine.known_bugs(), name


def test_each_shipped_bug_shows_in_every_scenario_it_was_seen_in():
    """The real check of a `where` (and of `model_arch`, whose class names only vLLM's own
    registry could list): a sighting is a run of a shipped scenario that showed the bug, so
    the bug must show there. A misspelt value would leave it out, and the failure it describes
    would end `fail` without naming the bug."""
    bugs = VllmEngine().known_bugs()
    scenarios = {s.id: s for s in load_scenarios(sorted((ROOT / "scenarios").glob("vllm-*.yaml")))}
    assert unmatched_sightings(bugs, scenarios) == []
    # the check can fail: a class name misspelt (the shape is a class name's) never shows
    qwen3_vl = next(b for b in bugs if b.where.get("model_arch") == "Qwen3VLForConditionalGeneration")
    misspelt = qwen3_vl.model_copy(update={"where": {"model_arch": "Qwen3VLForConditionalGenerationn"}})
    assert KnownBug.model_validate(misspelt.model_dump()).where == misspelt.where
    assert unmatched_sightings((misspelt,), scenarios) == [
        f"{misspelt.id}: seen in {s.scenario}, where it does not show" for s in misspelt.seen
    ]


def unmatched_sightings(bugs, scenarios: dict) -> list[str]:
    """`bug: seen in SCENARIO, where it does not show` for each sighting its `where` misses
    (a known bug's sightings are the engine's shipped scenarios: checked in another test)."""
    found = []
    for known in bugs:
        for seen in known.seen:
            s = scenarios[seen.scenario]
            # what the scenario's expansion holds a bug's `where` to (inputs/scenarios/scenario.py)
            if not known.shows_in({**filled(s.settings), **model_facts(s.suite, s.settings, s.source)}):
                found.append(f"{known.id}: seen in {seen.scenario}, where it does not show")
    return found


def test_where_s_own_keys_are_the_scenario_side_s():
    assert ARCH == ARCH_AXIS and ARCH_NAME.pattern == f"^{ID_PART.pattern}$"


# ---- item 8: a bad file names the file, the entry and the field ----------------------------


BAD_FILES = {
    "malformed range": (entries(bug(engine_version='"vllm>=2.0,<<3"')), ["known bug a (entry 0): engine_version:", "PEP 440"]),
    "id used twice": (entries(bug("a"), bug("b"), bug("a")), ["known bug ids used twice: a (entries 0, 2)"]),
    "bad regex": (entries(bug(traceback='"(("')), ["known bug a (entry 0): traceback: not a regular expression"]),
    "bad rank regex": (entries(bug(rank='"Worker_PP[1"')), ["known bug a (entry 0): rank: not a regular expression"]),
    "known_bugs not a list": ("known_bugs: 5\n", ["known_bugs: a list of known bugs", "got int 5"]),
    "entry not a mapping": ("known_bugs: [5]\n", ["known bug entry 0: entry: Input should be a valid dictionary"]),
    "no known_bugs": ("releases: [0.32.0]\n", ["known_bugs: a list of known bugs", "got nothing"]),
    "empty file": ("", ["a known-bugs file is a mapping with a `known_bugs:` list, got nothing"]),
    "a list at the top": ("- id: a\n", ["a known-bugs file is a mapping with a `known_bugs:` list, got list"]),
    "top-level typo": (
        "known_bug: []\n",
        ["known_bug: not a field of a known-bugs file (fields: releases, known_bugs)"],
    ),
    "unknown field": (
        entries(bug(verdcit="crash")),
        ["known bug a (entry 0): verdcit: not a field of a known bug (fields: ", "verdict"],
    ),
    "bad verdict": (entries(bug(verdict="crahs")), ["known bug a (entry 0): verdict: Input should be 'fail', 'crash' or 'hang'"]),
    "bad release": ("releases: [0.32.0, latest]\n" + entries(bug()), ["releases: 'latest' is not a release"]),
    "binary bytes": (b"\x00\xff\xfeknown_bugs", ["not UTF-8 text"]),
    "not YAML": ("known_bugs: [unclosed\n", ["not valid YAML"]),
    "an alias bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, n in zip("abcdef", "bcdefg"))
        + "known_bugs: *g\n",
        [f"more than {MAX_NODES} values with its aliases expanded"],
    ),
    "nested deep": ("known_bugs: " + "[" * 10_000 + "]" * 10_000 + "\n", [f"nested more than {MAX_DEPTH} levels deep (line 1)"]),
    "too big": ("#" * (MAX_BYTES + 1), [f"more than a known-bugs file may have ({MAX_BYTES})"]),
}


@pytest.mark.parametrize("content, says", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_bad_known_bugs_file_is_refused_naming_file_entry_and_field(tmp_path, content, says):
    path = write(tmp_path / "known_bugs.yaml", content)
    with pytest.raises(KnownBugsError) as refused:
        load_known_bugs(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: ")
    for words in says:
        assert words in message


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda p: p, "cannot read: No such file or directory"),
        (lambda p: (p.mkdir(), p)[1], "not a regular file"),
    ],
    ids=["missing", "a directory"],
)
def test_a_known_bugs_file_that_is_not_a_file_is_refused(tmp_path, make, says):
    path = make(tmp_path / "known_bugs.yaml")
    with pytest.raises(KnownBugsError, match=f"^{path}: {says}"):
        load_known_bugs(path)


# ---- item 9: `where` against the axes' declarations and the engine's ------------------------


@pytest.mark.parametrize(
    "where, says",
    [
        ("{prefix_cach: true}", "where: 'prefix_cach' is not an axis of engine 'vllm' (where takes: batch, "),
        ("{spec: ngarm}", "where: axis 'spec' value 'ngarm': spec takes false, ngram, draft"),
        ("{spec: [ngram, ngarm]}", "where: axis 'spec' value 'ngarm': spec takes false, ngram, draft"),
        ('{prefix_cache: "true"}', "where: axis 'prefix_cache' value 'true': prefix_cache is a switch, true or false"),
        ("{pp: true}", "where: axis 'pp' value True: pp is a parallel size, an integer >= 1"),
        ("{compile: 1}", "where: axis 'compile' value 1: compile is a switch, true or false"),
        ("{kvc: true}", "where: 'kvc' is not an axis of engine 'vllm'"),  # declared, but vLLM has no KV connector axis
        ("{spec: []}", "where: spec: an empty list"),
        ("{model_arch: llama}", "where: model_arch: 'llama' is not a model class, e.g. Qwen3VLForConditionalGeneration"),
        ("{model_arch: [LlamaForCausalLM, 3]}", "where: model_arch: 3 is not a model class"),
        ("{arch: Qwen3-MoE}", "where: arch: 'Qwen3-MoE' is not a suite's arch name, e.g. qwen3-moe"),
    ],
)
def test_a_where_that_could_never_hold_is_refused_with_what_is_allowed(tmp_path, monkeypatch, where, says):
    path = write(tmp_path / "known_bugs.yaml", entries(bug("typo", where=where)))
    monkeypatch.setattr(VllmEngine, "known_bugs_file", path)
    with pytest.raises(KnownBugsError) as refused:
        VllmEngine().known_bugs()
    assert str(refused.value).startswith(f"{path}: known bug typo (entry 0): ")
    assert says in str(refused.value)


def test_a_where_the_engine_can_hold_loads():
    where = {"spec": ["ngram", "draft"], "pp": 2, "compile": False, "arch": ["qwen3-moe"], "model_arch": "Qwen3MoeForCausalLM"}
    path_free = KnownBug.model_validate(
        {"id": "a", "reason": "x", "engine_version": "vllm>=0.32", "verdict": "crash", "where": where, "seen": [SIGHTING]}
    )
    assert path_free.where == where
    assert path_free.shows_in({**where, "spec": "draft", "arch": "qwen3-moe", "tp": 1})


SIGHTING = {"release": "0.32.0", "scenario": "s/x", "verdict": "crash"}


def test_without_an_engine_where_takes_every_declared_axis_and_no_other():
    """KnownBug alone (no engine's axes given): any declared axis (`kvc` is the reference
    engine's), never a misspelt one."""
    entry = {"id": "a", "reason": "x", "engine_version": "vllm>=0.32", "verdict": "crash", "seen": [SIGHTING]}
    assert KnownBug.model_validate({**entry, "where": {"kvc": True}}).where == {"kvc": True}
    with pytest.raises(ValueError, match="'kvcc' is not an axis of any engine"):
        KnownBug.model_validate({**entry, "where": {"kvcc": True}})


# ---- one way for every command: the engine's suites unusable, the others run ----------------


BAD = entries(bug("typo", where="{prefix_cach: true}"))
SAYS = "known bug typo (entry 0): where: 'prefix_cach' is not an axis of engine 'vllm'"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project of llama-tiny (the reference engine) and vllm-llama, vLLM's known bugs a bad file."""
    for name in ("HARNESS_GOLDEN_DIR", "HARNESS_REPORTS_DIR", "HARNESS_HISTORY_DIR"):
        monkeypatch.delenv(name, raising=False)
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in ("llama-tiny.yaml", "vllm-llama.yaml"):
        shutil.copy(builtin_scenarios() / name, scenarios)
    (tmp_path / "harness.toml").write_text('scenarios = "scenarios"\nbuiltin_suites = false\n')
    bad = write(tmp_path / "known_bugs.yaml", BAD)
    monkeypatch.setattr(VllmEngine, "known_bugs_file", bad)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_list_names_the_bad_file_and_still_lists_the_other_engine_s_suites(project, capsys):
    assert main(["list", "--ids-only"]) == 2
    out, err = capsys.readouterr()
    assert "llama-tiny/tp1-pp1" in out.split() and "vllm-llama" not in out
    assert f"vllm-llama.yaml: engine 'vllm': its known-bugs file cannot be used: {project / 'known_bugs.yaml'}: {SAYS}" in err
    assert "Traceback" not in err
    assert main(["list", "llama-tiny/*", "--ids-only"]) == 0  # vLLM's suites not asked for


def test_run_of_the_engine_s_suite_is_an_error_naming_the_file_and_starts_nothing(project, capsys, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("a scenario was started")

    monkeypatch.setattr("harness.run.runner.run_scenario", no_launch)
    main(["run", "vllm-llama/tp1-pp1", "--run-id", "kb"])
    assert "Traceback" not in capsys.readouterr().err
    (found,) = (project / "reports" / "kb").rglob("verdict.json")
    error = json.loads(found.read_text())
    assert error["scenario"] == "vllm-llama/scenario-file" and error["verdict"] == "error"
    assert SAYS in error["reason"]


def test_pytest_collection_of_the_engine_s_suite_is_an_error_naming_the_file(project, pytester, monkeypatch):
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini("[pytest]\n")
    shutil.copytree(project / "scenarios", pytester.path / "scenarios")
    result = pytester.runpytest_inprocess(
        "-p", "harness.pytest_plugin", "-p", "no:cacheprovider", "--collect-only", "-q", f"--harness-report-dir={project}"
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting scenarios/vllm-llama.yaml*", f"*{SAYS}*"])
    result.stdout.fnmatch_lines(["scenarios/llama-tiny.yaml::tp1-pp1"])
    assert "Traceback" not in result.stdout.str()
