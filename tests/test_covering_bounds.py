"""The edges of covering arrays (harness/inputs/scenarios/covering.py): a group that names an
axis twice, a matrix too big to plan, a coverage count that must not walk the full product,
a hand-edited lock or rows cache, and `harness list --coverage`'s own options. Each is refused
at once with exit 2 and the file and field, or answered within its bound; never a hang, a
traceback or rows outside the matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness.inputs.scenarios.covering as covering
from harness.contract import exit_codes
from harness.inputs.scenarios.binding import engine_rules
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.scenarios.scenario import planned_settings
from harness.inputs.scenarios.schema import ScenarioError
from tests.kit.cli import ROOT, harness_cli

HEAD = """
suite: cov
engine: reference
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 16}]
"""
SMALL = (
    HEAD
    + """golden: {tp: 1, pp: 1, sp: false, compile: false}
matrix: {tp: [1, 2], pp: [1, 2], sp: [false, true], compile: [false, true]}
covering: 2
"""
)


def write(tmp_path: Path, text: str, name: str = "cov.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def wide(values: int, strength: int) -> str:
    """Five axes of `values` values each (and prefix caching on, which block_size requires)."""
    axes = ("tp", "pp", "dp", "chunked_prefill", "block_size")
    numbers = list(range(1, values + 1))
    golden = ", ".join(f"{a}: 1" for a in axes)
    matrix = "".join(f"  {a}: {numbers}\n" for a in axes)
    return HEAD + f"golden: {{{golden}, prefix_cache: true}}\nmatrix:\n{matrix}  prefix_cache: [true]\ncovering: {strength}\n"


def tangled(values: int) -> str:
    """A covering array whose product grows with `values` and where tp=4 is in no setting:
    two excludes forbid it only together, on the first axis and the last."""
    numbers = list(range(1, values + 1))
    return (
        HEAD
        + f"""golden: {{tp: 1, pp: 1, dp: 1, chunked_prefill: 16, compile: false, prefix_cache: false, batch: all, spec: false}}
matrix:
  tp: [1, 2, 4]
  pp: {numbers}
  dp: {numbers}
  chunked_prefill: {[16 * n for n in numbers]}
  compile: [false, true]
  prefix_cache: [false, true]
  batch: [all, one, mixed]
  spec: [false, ngram]
covering: 2
exclude: [{{tp: 4, spec: false}}, {{tp: 4, spec: ngram}}]
"""
    )


@pytest.fixture
def no_planner(monkeypatch):
    """covertable must not be asked: a refusal from the sizes comes before any row."""
    import covertable

    def planned(*args, **kwargs):
        raise AssertionError("the planner ran on a matrix its sizes refuse")

    monkeypatch.setattr(covertable, "make", planned)
    monkeypatch.setattr(covertable, "make_async", planned)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))


# ---- item 1: a group naming an axis twice ------------------------------------------------


@pytest.mark.parametrize(
    "covering_text, message",
    [
        ("{strength: 2, groups: [{axes: [tp, tp], strength: 2}]}", r"covering.groups.0.*axes name \['tp'\] more than once"),
        ("{strength: 2, groups: [{axes: [tp, pp], strength: 3}]}", r"covering.groups.0.*strength 3 is more than its 2 axes"),
        ("5", r"covering.strength 5 is more than the matrix's 4 axes \(tp, pp, sp, compile\): give 1 to 4"),
    ],
)
def test_a_covering_that_asks_what_no_setting_holds_is_refused_when_read(tmp_path, covering_text, message):
    path = write(tmp_path, SMALL.replace("covering: 2", f"covering: {covering_text}"))
    with pytest.raises(ScenarioError, match=message):
        load_suite(path)


def test_a_group_naming_an_axis_twice_leaves_other_suites_runnable(tmp_path):
    write(tmp_path, SMALL.replace("covering: 2", "covering: {strength: 2, groups: [{axes: [tp, tp], strength: 2}]}"))
    write(tmp_path, SMALL.replace("suite: cov", "suite: other").replace("covering: 2\n", ""), "other.yaml")
    done = harness_cli("list", "other", scenarios=tmp_path, timeout=60)
    # the broken file is named and skipped; the suite asked for is listed, as with any broken file
    assert done.returncode == exit_codes.OK and "cov.yaml" in done.stderr and "more than once" in done.stderr
    assert "other/tp2-pp2" in done.stdout and "Traceback" not in done.stderr


# ---- item 2: a covering array's size is bounded before it is planned ----------------------


@pytest.mark.parametrize("values, strength", [(100, 2), (20, 3)])
def test_a_covering_array_too_big_to_plan_is_refused_from_its_sizes(tmp_path, no_planner, values, strength):
    path = write(tmp_path, wide(values, strength))
    with pytest.raises(ScenarioError, match=rf"{path}: covering: .* split the suite, lower covering.strength"):
        planned_settings(load_suite(path), path)


def test_a_covering_array_needing_more_scenarios_than_the_limit_is_refused_like_a_product(tmp_path, no_planner, monkeypatch):
    monkeypatch.setenv("HARNESS_MAX_SCENARIOS", "100")
    path = write(tmp_path, wide(20, 2))
    with pytest.raises(ScenarioError, match=r"at least 400 scenarios .* more than 100 \(\$HARNESS_MAX_SCENARIOS"):
        planned_settings(load_suite(path), path)


def test_the_rows_made_are_bounded_by_the_limit_too(tmp_path, monkeypatch):
    """The sizes give the fewest rows possible (25 here); the planner makes more, and stops at the limit."""
    monkeypatch.setenv("HARNESS_MAX_SCENARIOS", "26")
    path = write(tmp_path, wide(5, 2))
    with pytest.raises(ScenarioError, match=r"covering: the array needs more than 26 scenarios"):
        planned_settings(load_suite(path), path)


def test_the_planner_s_constraint_checks_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(covering, "MOST_CONSTRAINT_CHECKS", 50)
    path = write(tmp_path, tangled(4))
    with pytest.raises(ScenarioError, match=r"covering: .*more than 50 constraint checks"):
        planned_settings(load_suite(path), path)


def test_every_shipped_covering_suite_is_within_the_bounds():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        suite = load_suite(path)
        if suite.covering is not None:
            covering.check_size(suite, path)  # raises where a bound is too tight for a real suite


# ---- item 3: counting coverage does not walk the product ---------------------------------


def counted_checks(monkeypatch) -> list[int]:
    """The constraint checks made from now on (each rule or exclude asked of a setting)."""
    made = [0]
    plain = covering.constraints

    def counting(suite, rules):
        found = []
        for c in plain(suite, rules):

            def allows(row, ask=c.allows):
                made[0] += 1
                return ask(row)

            found.append(covering.Constraint(c.name, c.axes, allows))
        return found

    monkeypatch.setattr(covering, "constraints", counting)
    return made


def test_coverage_checks_a_few_constraints_a_combination_whatever_the_product(tmp_path, monkeypatch):
    """tp=4 is forbidden only by two excludes together: the old depth-first search walked
    every setting of the axes between them for each such combination (200,000 checks for
    this 20-row file, 680,000 for the 43-row one; 27 s for one of 113 rows)."""
    path = write(tmp_path, tangled(6))
    suite = load_suite(path)
    rows = planned_settings(suite, path)
    made = counted_checks(monkeypatch)
    got = covering.coverage(suite, rows, engine_rules("reference"), 2)
    assert made[0] <= 4 * got.required, made[0]
    assert got.missed == [] and got.covered == got.feasible
    joint = got.excluded["exclude {tp: 4, spec: false} with exclude {tp: 4, spec: ngram}"]
    assert "tp=4 pp=6" in joint and "tp=4 batch=mixed" in joint


def test_a_count_past_its_bound_is_refused_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setattr(covering, "MOST_SEARCH_CHECKS", 10)
    path = write(tmp_path, tangled(4))
    suite = load_suite(path)
    with pytest.raises(ScenarioError, match=r"suite cov: .* too entangled to count .* in 10 constraint checks"):
        covering.coverage(suite, planned_settings(suite, path), engine_rules("reference"), 2)
    monkeypatch.setattr(covering, "MOST_COUNTED", 10)
    with pytest.raises(ScenarioError, match=r"suite cov: counting its 2-way coverage means \d+ combinations, more than 10"):
        covering.coverage(suite, planned_settings(suite, path), engine_rules("reference"), 2)


# ---- item 5: a lock's rows -----------------------------------------------------------------


@pytest.mark.parametrize(
    "lock, message",
    [
        ({"rows": 5}, r"rows is int, not a list"),
        ({"rows": None}, r"rows is NoneType, not a list"),
        ({"rows": [[1, 2]]}, r"rows\[0\]: \[1, 2\] is not a setting"),
        ({"rows": [{"tp": 1, "pp": "x"}]}, r"rows\[0\]: \"x\" is not a value of pp \(pp is a parallel size"),
        ({"rows": [{"tp": 1, "compile": 5}]}, r"rows\[0\]: 5 is not a value of compile \(compile is a switch"),
    ],
)
def test_a_lock_whose_rows_no_lock_could_hold_is_refused(tmp_path, lock, message):
    path = write(tmp_path, SMALL)
    covering.lock_path(path).write_text(json.dumps(lock))
    with pytest.raises(ScenarioError, match=rf"cov.yaml.lock: {message}.*harness list --coverage --lock cov"):
        planned_settings(load_suite(path), path)


def test_a_lock_that_is_no_list_is_exit_2_without_a_traceback(tmp_path):
    covering.lock_path(write(tmp_path, SMALL)).write_text('{"rows": 5}')
    done = harness_cli("list", scenarios=tmp_path, timeout=60)
    assert done.returncode == exit_codes.USAGE and "rows is int, not a list" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_lock_row_of_a_value_taken_out_of_the_matrix_is_left_out(tmp_path):
    """Taking a value out of the matrix is an edit of the suite: its rows are other settings now."""
    path = write(tmp_path, SMALL)
    covering.lock_path(path).write_text(json.dumps({"rows": [{"tp": 4, "pp": 1, "sp": False, "compile": False}]}))
    assert not [r for r in planned_settings(load_suite(path), path) if r["tp"] == 4]


# ---- item 13: the rows cache is checked, never trusted -------------------------------------


def test_an_edited_rows_cache_is_made_again(tmp_path):
    path = write(tmp_path, SMALL)
    fresh = planned_settings(load_suite(path), path)
    (cache,) = (tmp_path / "cache" / "covering").glob("*.json")
    kept = json.loads(cache.read_text())
    kept["rows"][0] = {"tp": 7, "pp": "x", "sp": False, "compile": 5}
    cache.write_text(json.dumps(kept))  # an edit: its digest no longer matches
    assert planned_settings(load_suite(path), path) == fresh
    # and with the digest made again to match: the values are outside the matrix
    kept["digest"] = covering._digest(kept["key"], kept["rows"])
    cache.write_text(json.dumps(kept))
    assert planned_settings(load_suite(path), path) == fresh
    # a row that breaks a rule (sp with one TP rank) is no row of the array either
    kept["rows"][0] = {"tp": 1, "pp": 1, "sp": True, "compile": False}
    kept["digest"] = covering._digest(kept["key"], kept["rows"])
    cache.write_text(json.dumps(kept))
    assert planned_settings(load_suite(path), path) == fresh


# ---- items 6 and 15: harness list --coverage's options ---------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--coverage", "--strength", "-1"], "'-1' is not a number of axes to combine: give an integer >= 1"),
        (["--coverage", "--strength", "0"], "'0' is not a number of axes to combine"),
        (["--coverage", "--strength", "99"], "--strength 99: suite cov has 4 axes (tp, pp, sp, compile): give 1 to 4"),
        (["--lock"], "--lock goes with --coverage"),
        (["--strength", "2"], "--strength goes with --coverage"),
    ],
)
def test_coverage_options_it_cannot_honour_are_exit_2(tmp_path, args, message):
    write(tmp_path, SMALL)
    done = harness_cli("list", *args, scenarios=tmp_path, timeout=60)
    assert done.returncode == exit_codes.USAGE and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not covering.lock_path(tmp_path / "cov.yaml").exists()


def test_lock_on_full_products_only_is_exit_2_and_coverage_counts_no_unsupported_row(tmp_path):
    write(tmp_path, SMALL.replace("covering: 2\n", ""))
    done = harness_cli("list", "--coverage", "--lock", scenarios=tmp_path, timeout=60)
    assert done.returncode == exit_codes.USAGE and "--lock: no chosen suite is a covering array" in done.stderr
    done = harness_cli("list", "--coverage", "--strength", "2", scenarios=tmp_path, timeout=60)
    assert done.returncode == exit_codes.OK, done.stderr
    # tp1-sp is planned (and refused as unsupported when run): it covers nothing
    assert "excluded by sp requires tp>=2" in done.stdout and "tp=1 sp=true" in done.stdout
    assert "0 feasible and not run" in done.stdout
