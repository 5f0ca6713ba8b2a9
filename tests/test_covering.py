"""Covering arrays in scenario files (harness/inputs/scenarios/covering.py): every t-way combination of
axis values in few scenarios, never a known refusal, the same rows for the same file, kept
ids when a value is added (the lock), and `harness list --coverage`."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.contract.axes import RULES
from harness.inputs.scenarios.binding import engine_rules
from harness.inputs.scenarios.covering import coverage, lock_path, write_lock
from harness.inputs.scenarios.loading import load_scenarios, load_suite
from harness.inputs.scenarios.scenario import planned_settings
from harness.inputs.scenarios.schema import ScenarioError

SUITE = """
suite: cover
engine: reference
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 16}]
golden: {tp: 1, pp: 1, sp: false, compile: false, prefix_cache: false, chunked_prefill: 0, batch: all, spec: false}
matrix:
  tp: [1, 2]
  pp: [1, 2]
  sp: [false, true]
  compile: [false, true]
  prefix_cache: [false, true]
  chunked_prefill: [0, 16]
  batch: [all, one, mixed]
  spec: [false, ngram]
covering: 2
exclude: [{tp: 2, pp: 2, batch: one}]
"""
FULL = math.prod([2, 2, 2, 2, 2, 2, 3, 2])


def write(tmp_path: Path, text: str = SUITE) -> Path:
    path = tmp_path / "cover.yaml"
    path.write_text(text)
    return path


def pairs(rows: list[dict]) -> set:
    return {frozenset(p) for r in rows for p in itertools.combinations(((k, repr(v)) for k, v in r.items()), 2)}


def test_every_feasible_pair_in_a_few_rows_and_none_a_known_refusal(tmp_path):
    path = write(tmp_path)
    suite = load_suite(path)
    rows = planned_settings(suite, path)
    assert len(rows) <= 12 < FULL
    rules = engine_rules("reference")
    assert not [r for r in rows for rule in rules if rule.broken(r)]  # sp never with tp1
    assert not [r for r in rows if r["tp"] == 2 and r["pp"] == 2 and r["batch"] == "one"]
    got = coverage(suite, rows, rules, 2)
    assert got.missed == [] and got.covered == got.feasible
    assert got.excluded == {RULES[0].message(): ["tp=1 sp=true"]}


def test_the_same_file_gives_the_same_ids(tmp_path):
    path = write(tmp_path)
    first = [s.id for s in load_scenarios([path])]
    assert first == [s.id for s in load_scenarios([path])]
    assert len(set(first)) == len(first)


def test_a_group_holds_every_triple_of_its_axes(tmp_path):
    text = SUITE.replace("covering: 2", "covering: {strength: 2, groups: [{axes: [tp, pp, compile, spec], strength: 3}]}")
    path = write(tmp_path, text)
    suite = load_suite(path)
    rows = planned_settings(suite, path)
    for axes in itertools.combinations(("tp", "pp", "compile", "spec"), 3):
        assert len({tuple(r[a] for a in axes) for r in rows}) == 8, axes
    assert coverage(suite, rows, engine_rules("reference"), 2).missed == []


def test_the_lock_keeps_every_id_when_a_value_is_added(tmp_path):
    path = write(tmp_path)
    before = [s.id for s in load_scenarios([path])]
    write_lock(load_suite(path), path, planned_settings(load_suite(path), path))
    assert lock_path(path).is_file()
    path.write_text(SUITE.replace("chunked_prefill: [0, 16]", "chunked_prefill: [0, 16, 32]"))
    after = [s.id for s in load_scenarios([path])]
    assert set(before) <= set(after) and any("chunked_prefill32" in i for i in after)
    suite = load_suite(path)
    assert coverage(suite, planned_settings(suite, path), engine_rules("reference"), 2).missed == []


def test_the_lock_keeps_every_id_when_an_axis_is_added(tmp_path):
    path = write(tmp_path)
    before = [s.id for s in load_scenarios([path])]
    write_lock(load_suite(path), path, planned_settings(load_suite(path), path))
    path.write_text(
        SUITE.replace("  spec: [false, ngram]\n", "  spec: [false, ngram]\n  dp: [1, 2]\n").replace(
            "spec: false}", "spec: false, dp: 1}"
        )
    )
    after = [s.id for s in load_scenarios([path])]
    assert set(before) <= set(after) and any("dp2" in i for i in after)


def test_a_damaged_lock_is_an_error_that_says_how_to_mend_it(tmp_path):
    path = write(tmp_path)
    lock_path(path).write_text("{not json")
    with pytest.raises(ScenarioError, match=r"not a covering-array lock file .*harness list --coverage --lock cover"):
        load_scenarios([path])


def test_a_group_naming_an_axis_outside_the_matrix_is_refused(tmp_path):
    path = write(tmp_path, SUITE.replace("covering: 2", "covering: {strength: 2, groups: [{axes: [tp, ep], strength: 2}]}"))
    with pytest.raises(ScenarioError, match=r"covering.groups\[0\] names axes not in the matrix: \['ep'\]"):
        load_suite(path)


def test_without_covering_the_matrix_is_its_full_product(tmp_path):
    path = write(tmp_path, SUITE.replace("covering: 2\n", ""))
    assert len(planned_settings(load_suite(path), path)) == FULL - 2**5  # the exclude: tp2 pp2 batch-one


def test_list_coverage_names_the_rule_of_each_excluded_combination(tmp_path):
    path = write(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "harness", "--scenarios", str(path), "list", "--coverage"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "cover: " in out and "(covering array); 2-way:" in out and "0 feasible and not run" in out
    assert "excluded by sp requires tp>=2" in out and "tp=1 sp=true" in out


def test_list_coverage_says_what_only_rows_a_declared_crash_ends_early_cover(tmp_path):
    """A row its file expects to crash stops at the bug: its other combinations are planned, not
    exercised, while the bug stands; --coverage says how many are only there."""
    path = write(tmp_path, SUITE + "expected_failures:\n  - {match: {spec: ngram}, verdict: crash, reason: a known bug}\n")
    out = subprocess.run(
        [sys.executable, "-m", "harness", "--scenarios", str(path), "list", "--coverage"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "masked (only in scenarios a declared crash or hang ends early there" in out, out
    assert "masked by expected failure 'a known bug'" in out, out
    plain = subprocess.run(
        [sys.executable, "-m", "harness", "--scenarios", str(write(tmp_path)), "list", "--coverage"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ends early" not in plain, plain


def test_the_rows_do_not_depend_on_the_process_hash_seed(tmp_path):
    """Ids are history and goldens' keys: two processes with other string hashes plan the same rows."""
    import os

    path = write(tmp_path)
    ids = {
        subprocess.run(
            [sys.executable, "-m", "harness", "--scenarios", str(path), "list", "--ids-only"],
            capture_output=True,
            text=True,
            check=True,
            # each its own cache: the second must plan its rows, not read the first's
            env={**os.environ, "PYTHONHASHSEED": seed, "HARNESS_CACHE": str(tmp_path / f"cache-{seed}")},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(ids) == 1 and ids.pop().count("cover/") > 1
    assert len(list(tmp_path.glob("cache-*/covering/*.json"))) == 2


def test_the_rows_are_kept_by_what_makes_them_and_a_damaged_copy_is_made_again(tmp_path, monkeypatch):
    """Every command reads every suite's rows: they are kept on disk, keyed by the suite's
    matrix, strengths, excludes, rules, lock and the code, never served for another suite."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path)
    fresh = planned_settings(load_suite(path), path)
    kept = list((tmp_path / "cache" / "covering").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["rows"] == fresh
    assert planned_settings(load_suite(path), path) == fresh  # read back

    kept[0].write_text("[{]")  # damaged: made again, and the copy mended
    assert planned_settings(load_suite(path), path) == fresh
    assert json.loads(kept[0].read_text())["rows"] == fresh

    kept[0].write_text(json.dumps(fresh[:1]))  # another exclude is another key: never this copy
    changed = write(tmp_path, SUITE.replace("exclude: [{tp: 2, pp: 2, batch: one}]", "exclude: [{tp: 2, pp: 2}]"))
    rows = planned_settings(load_suite(changed), changed)
    assert len(rows) > 1 and not [r for r in rows if r["tp"] == 2 and r["pp"] == 2]
    assert len(list((tmp_path / "cache" / "covering").glob("*.json"))) == 2


LAYOUTS = """
suite: layouts
engine: reference
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 16}]
golden: {tp: 1, pp: 1, compile: false}
matrix: {tp: [1, 2], pp: [1, 2], compile: [false, true]}
covering: 3
"""
FEATURES = """
suite: features
engine: reference
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 16}]
golden: {tp: 1, spec: false, batch: all}
matrix: {tp: [1, 2], spec: [false, ngram], batch: [all, one]}
covering: 3
"""


def parts(tmp_path: Path, *texts: str) -> list:
    found = []
    for i, text in enumerate(texts):
        path = tmp_path / f"s{i}.yaml"
        path.write_text(text)
        suite = load_suite(path)
        found.append((suite, planned_settings(suite, path), engine_rules("reference")))
    return found


def test_suites_that_split_the_axes_are_counted_together(tmp_path):
    from harness.inputs.scenarios.covering import joint_coverage

    got = joint_coverage(parts(tmp_path, LAYOUTS, FEATURES), 3)
    # every triple within one suite is covered; pp or compile with spec or batch is in neither
    assert got.missed == []
    apart = got.excluded["no suite varies these axes together"]
    assert "pp=2 spec=ngram batch=one" in apart and "tp=2 pp=2 compile=true" not in apart
    assert got.covered == got.required - len(apart)
    # a suite whose rows leave a feasible triple out: it is missed, not excluded
    layouts, features = parts(tmp_path, LAYOUTS, FEATURES)
    thin = (features[0], [r for r in features[1] if not (r["spec"] == "ngram" and r["batch"] == "one")], features[2])
    assert "tp=1 spec=ngram batch=one" in joint_coverage([layouts, thin], 3).missed


def test_the_installed_engine_s_limits_and_undeclared_axes_are_named(tmp_path):
    from harness.inputs.scenarios.covering import joint_coverage

    got = joint_coverage(
        parts(tmp_path, LAYOUTS, FEATURES), 3, limits={"spec": ((False,), "no drafter here")}, declared={"sp": (False, True)}
    )
    cut = got.excluded["the installed engine, spec: no drafter here"]
    assert "tp=2 spec=ngram batch=one" in cut and not [c for c in cut if "spec=false" in c]
    # sp: declared by the engine, varied by no suite (its triples with sp=true are in no row)
    assert any("sp=true" in c for c in got.excluded["no suite varies these axes together"])


BUGS = """
known_bugs:
  - id: pp-spec-fake
    reason: "a fake bug: speculation under PP crashes"
    engine_version: "torch{range}"
    where: {{pp: 2, spec: ngram}}
    verdict: crash
    seen: [{{release: 2.0.0, scenario: cover/tp1-pp2-spec-ngram, verdict: crash}}]
"""


def _list(path: Path, capsys, *args: str) -> str:
    from harness.cli import main

    code = main(["--scenarios", str(path), "list", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def _with_bug(tmp_path: Path, monkeypatch, version_range: str) -> None:
    """The reference engine with one known bug, standing on its installed torch (>=1) or fixed (<1)."""
    from harness.engines.reference import ReferenceEngine

    bugs = tmp_path / f"known_bugs{len(version_range)}.yaml"
    bugs.write_text(BUGS.format(range=version_range))
    monkeypatch.setattr(ReferenceEngine, "known_bugs_file", bugs)


def test_a_row_a_known_bug_ends_early_covers_nothing_until_rows_without_its_trigger_are_added(tmp_path, monkeypatch, capsys):
    """Issue 65 item 4: a combination held only by rows a standing known bug ends early is masked
    (named by the bug); --lock plans rows outside the bug's trigger that hold every one of them,
    recorded apart in the lock, and then nothing is masked; the same rows on a second --lock."""
    path = write(tmp_path)
    _with_bug(tmp_path, monkeypatch, ">=1")
    before = _list(path, capsys, "--coverage")
    assert "masked by known bug pp-spec-fake (" in before and " 0 masked" not in before, before
    assert "unreachable on reference" in before and "known bug pp-spec-fake (1): pp=2 spec=ngram" in before, before
    ids_before = set(_list(path, capsys, "--ids-only").split())

    locked = _list(path, capsys, "--coverage", "--lock")
    assert "rows added for known bugs (" in locked and "(for pp-spec-fake)" in locked, locked
    entries = json.loads(lock_path(path).read_text())["bug_rows"]
    assert entries and all(e["for"] == ["pp-spec-fake"] for e in entries)
    assert not [e for e in entries if e["row"]["pp"] == 2 and e["row"]["spec"] == "ngram"]  # never the trigger

    after = _list(path, capsys, "--coverage")
    assert " 0 masked" in after and "rows for known bug pp-spec-fake on reference" in after, after
    ids_after = set(_list(path, capsys, "--ids-only").split())
    assert ids_before < ids_after and len(ids_after - ids_before) == len(entries)

    text = lock_path(path).read_text()
    _list(path, capsys, "--coverage", "--lock")
    assert lock_path(path).read_text() == text  # planned again: the same rows, the same ids


def test_rows_for_a_bug_fixed_on_the_installed_release_are_said_not_needed_not_dropped(tmp_path, monkeypatch, capsys):
    path = write(tmp_path)
    _with_bug(tmp_path, monkeypatch, ">=1")
    _list(path, capsys, "--coverage", "--lock")
    added = {e["row"]["spec"] for e in json.loads(lock_path(path).read_text())["bug_rows"]}
    assert added
    _with_bug(tmp_path, monkeypatch, "<1")  # the same bug, fixed in the installed release
    out = _list(path, capsys, "--coverage")
    assert "are for known bug pp-spec-fake, fixed in reference" in out and ": not needed" in out, out
    assert "masked" not in out, out
    _list(path, capsys, "--coverage", "--lock")  # planned on a release without the bug: kept
    assert json.loads(lock_path(path).read_text())["bug_rows"]


def test_a_lock_s_bug_rows_entry_no_lock_could_have_written_is_refused(tmp_path):
    path = write(tmp_path)
    write_lock(load_suite(path), path, planned_settings(load_suite(path), path))
    data = json.loads(lock_path(path).read_text())
    data["bug_rows"] = [{"for": "pp-spec-fake", "planned_on": "reference", "row": {"tp": 1}}]
    lock_path(path).write_text(json.dumps(data))
    with pytest.raises(ScenarioError, match=r"bug_rows\[0\]: `for` is not a list of known bug ids"):
        load_scenarios([path])


def test_a_run_s_summary_says_which_rows_for_known_bugs_ran_where_their_bug_is_fixed(tmp_path, monkeypatch, capsys):
    """The runner records the bugs a row was added for and which stand on the release it ran on;
    summary.md names the rows whose bugs are all fixed there: not needed."""
    from harness.contract.verdict import Verdict
    from harness.run.report.markdown import summary_markdown
    from harness.run.report.run import RunReport
    from harness.run.runner import standing_bugs

    path = write(tmp_path)
    _with_bug(tmp_path, monkeypatch, ">=1")
    _list(path, capsys, "--coverage", "--lock")
    added = [s for s in load_scenarios([path]) if s.for_bugs]
    assert added and all(s.for_bugs == ("pp-spec-fake",) for s in added)
    versions = {"engine": "reference", "torch": "2.0.0"}
    assert standing_bugs(added[0], versions) == ["pp-spec-fake"]
    _with_bug(tmp_path, monkeypatch, "<1")
    assert standing_bugs(added[0], versions) == []

    def ran(scenario_id, standing):
        return Verdict(scenario_id, "pass", "ok", versions=versions, for_bugs={"bugs": ["pp-spec-fake"], "standing": standing})

    summary = summary_markdown(
        RunReport(tmp_path, {"run_id": "r"}, [ran(added[0].id, []), ran("cover/needed", ["pp-spec-fake"])])
    )
    head = summary.split("| scenario |")[0]  # above the table of every verdict
    assert f"Rows `{added[0].id}` are for known bug pp-spec-fake, fixed in reference (torch 2.0.0): not needed." in head
    assert "cover/needed" not in head
