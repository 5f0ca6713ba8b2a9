"""Every axis declared once (harness/contract/axes.py): its domain refused at load, its id
spelling, its rules as data, and no string read of an axis name anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.contract.applied import AxisEvidence
from harness.contract.axes import AXES, AXIS_NAMES, RULES, Cond, RunAxes, axis_name, excludes, requires
from harness.engines import get_engine
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.scenarios.schema import ScenarioError
from tests.kit.present import present

PACKAGE = Path(__file__).resolve().parent.parent / "harness"

SUITE = """
suite: typo
engine: reference
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 16}]
golden: {tp: 1, pp: 1, spec: false, batch: all}
matrix: {tp: [1], pp: [1], spec: [false, ngram], batch: [all, mixed]}
gates: {pr: ["*"]}
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "typo.yaml"
    path.write_text(text)
    return load_suite(path)


@pytest.mark.parametrize(
    "typo, allowed",
    [
        (("spec: [false, ngram]", "spec: [false, ngarm]"), "axis 'spec' value 'ngarm': spec takes false, ngram, draft"),
        (("batch: [all, mixed]", "batch: [all, mixd]"), "axis 'batch' value 'mixd': batch takes all, one, mixed"),
        (("tp: [1]", "tp: [1, 0]"), "axis 'tp' value 0: tp is a parallel size, an integer >= 1"),
    ],
)
def test_a_value_outside_an_axis_domain_is_refused_at_load_with_the_allowed_values(tmp_path, typo, allowed):
    """`spec: [false, ngarm]`, `batch: mixd` passed the file check, ended
    `unsupported`, and a PR gate over them exited 0."""
    assert typo[0] in SUITE
    with pytest.raises(ScenarioError) as err:
        load(tmp_path, SUITE.replace(*typo))
    assert allowed in str(err.value) and "typo.yaml" in str(err.value)


def test_the_well_spelt_file_loads(tmp_path):
    suite = load(tmp_path, SUITE)
    assert suite.matrix["spec"] == [False, "ngram"]


def test_a_selector_value_outside_the_domain_is_refused_too(tmp_path):
    text = SUITE + "exclude: [{spec: ngarm}]\n"
    with pytest.raises(ScenarioError, match="exclude.0: axis 'spec' value 'ngarm': spec takes false, ngram, draft"):
        load(tmp_path, text)


def test_the_typed_view_is_the_declaration():
    """RunAxes's fields are the axes: names, defaults, and a run's settings filled from them."""
    assert list(AXES) == [f for f in RunAxes.__dataclass_fields__]
    axes = RunAxes.of({"tp": 2, "dp": 2, "spec": "ngram", "engine_own": 3})
    assert (axes.tp, axes.pp, axes.dp, axes.spec, axes.batch, axes.world) == (2, 1, 2, "ngram", "all", 4)
    assert {a.kind for a in AXES.values()} == {"size", "budget", "switch", "choice"}


@pytest.mark.parametrize(
    "axis, value, label",
    [
        ("tp", 1, "tp1"),
        ("dp", 1, ""),
        ("dp", 2, "dp2"),
        ("sp", True, "sp"),
        ("sp", False, ""),
        ("chunked_prefill", 0, ""),
        ("chunked_prefill", 32, "chunked_prefill32"),
        ("batch", "all", ""),
        ("batch", "one", "batch-one"),
        ("spec", False, ""),
        ("spec", "ngram", "spec-ngram"),
    ],
)
def test_each_axis_spells_its_value_in_an_id(axis, value, label):
    assert AXES[axis].label(value) == label


def test_rules_are_data_with_their_reasons():
    rule = requires("ep", "tp>=2", "dp>=2", reason="experts need ranks")
    assert str(rule) == "ep requires tp>=2 or dp>=2" and rule.axes == ("ep", "tp", "dp")
    assert rule.broken({"ep": True, "tp": 1}) and not rule.broken({"ep": True, "dp": 2}) and not rule.broken({"tp": 1})
    rule = excludes("prefix_cache", "kvc", reason="one store")
    assert rule.broken({"prefix_cache": True, "kvc": True}) and not rule.broken({"prefix_cache": True})
    assert Cond.parse("spec=draft").holds({"spec": "draft"}) and not Cond.parse("spec=draft").holds({"spec": "ngram"})
    assert not Cond.parse("chunked_prefill<8").holds({"chunked_prefill": True})  # a switch is not a number
    assert [str(r) for r in RULES] == ["sp requires tp>=2"]


def test_engines_refuse_by_their_rules_and_name_the_rule():
    reference = get_engine("reference")
    assert present(reference.unsupported_reason({"tp": 1, "sp": True})).startswith("sp requires tp>=2: ")
    assert present(reference.unsupported_reason({"tp": 2, "dp": 2, "ep": True})).startswith("dp>=2 excludes ep: ")
    assert reference.unsupported_reason({"tp": 2, "dp": 2}) is None
    assert "spec takes false, ngram, draft" in present(reference.unsupported_reason({"spec": "ngarm"}))


# The declaration names the axes; the standalone repro script runs without the harness (it
# must import none of it) and so reads its settings by name. Every other module reads a run's
# axes through RunAxes and names one, where it must key something by it, with axis_name.
AXIS_NAMING_MODULES = {PACKAGE / "contract" / "axes.py", PACKAGE / "engines" / "vllm" / "repro_script.py"}


def _is_axis_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in AXIS_NAMES


def _names_an_axis(node: ast.AST) -> bool:
    """An axis name, or a literal tuple, list or set holding one (`a in ("tp", "pp")`)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_axis_name(e) for e in node.elts)
    return _is_axis_name(node)


def _axis_string_use(node: ast.AST) -> bool:
    """`x.get("tp")` (or pop, setdefault), `x["tp"]` (read, written or deleted), `"tp" in x`,
    `a in ("tp", "pp")`, `name == "tp"`, `case "tp":`, `getattr(axes, "tp")`: an axis named by
    a string, whatever holds it."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("get", "pop", "setdefault") and bool(node.args) and _is_axis_name(node.args[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr"):
        return len(node.args) > 1 and _is_axis_name(node.args[1])
    if isinstance(node, ast.MatchValue):
        return _is_axis_name(node.value)
    if isinstance(node, ast.Subscript):
        return _is_axis_name(node.slice)
    if isinstance(node, ast.Compare):
        return any(_names_an_axis(side) for side in (node.left, *node.comparators))
    return False


def _axis_string_uses(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    return [
        f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if _axis_string_use(node)
    ]


def test_no_axis_is_named_by_a_string_outside_its_declaration():
    """Engines and the harness read a run's axes through RunAxes (the declaration's view)."""
    uses = [u for p in sorted(PACKAGE.rglob("*.py")) if p not in AXIS_NAMING_MODULES for u in _axis_string_uses(p)]
    assert uses == []


@pytest.mark.parametrize(
    "line",
    [
        "settings.get('spec', False)",
        "report.pop('tp')",
        "axes['tp']",
        "out['compile'] = 1",
        "del settings['sp']",
        "'tp' in settings",
        "'dp' not in settings",
        "name == 'tp'",
        "'batch' != mode",
        "a in ('tp', 'pp')",
        "a not in {'compile'}",
        "getattr(axes, 'spec')",
        "match name:\n        case 'ep':\n            pass",
    ],
)
def test_the_lint_finds_each_string_use_of_an_axis_name(tmp_path, line):
    planted = tmp_path / "planted.py"
    planted.write_text(f"def f(settings, report, axes, out, name, mode, a):\n    {line}\n")
    assert len(_axis_string_uses(planted, tmp_path)) == 1, line


def test_the_lint_leaves_other_strings_and_typed_reads_alone(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(settings, axes, name):\n"
        "    return settings.get('arch'), settings['tpx'], 'heads' in settings, name == 'all', axes.tp, axes.value(name), getattr(axes, name)\n"
    )
    assert _axis_string_uses(planted, tmp_path) == []


def test_axis_name_spells_an_axis_typed_and_refuses_an_undeclared_one():
    assert axis_name(lambda a: a.batch_invariant) == "batch_invariant"
    with pytest.raises(AttributeError, match="no axis 'tpp' is declared"):
        axis_name(lambda a: a.tpp)  # type: ignore[attr-defined]


def test_an_evidence_summary_is_registered_by_its_axis_and_reports_only_the_axes_named():
    registry = AxisEvidence()

    @registry.of
    def tp(axes, report):
        return {"applied": axes.tp == report, "evidence": f"tp {axes.tp}"}

    @registry.of
    def sp(axes, report):
        return None  # nothing to say

    assert registry.summarize({"tp": 2, "sp": True, "pp": 2}, 2) == {"tp": {"applied": True, "evidence": "tp 2"}}
    assert registry.summarize({"pp": 2}, 2) == {}
    with pytest.raises(ValueError, match="'tpp' is named for no declared axis"):

        @registry.of
        def tpp(axes, report):
            return None


def test_each_engines_evidence_summaries_are_named_for_declared_axes():
    from harness.engines.reference import evidence as reference
    from harness.engines.vllm import evidence as vllm

    assert set(reference.EVIDENCE.summaries) == set(AXES) - {"kvc", "batch_invariant"}
    assert set(vllm.WORKER_EVIDENCE.summaries) | set(vllm.DRIVER_EVIDENCE.summaries) == set(AXES) - {"kvc", "block_size"}


# ---- block_size: an axis added the way docs/DESIGN.md "Adding an axis" says ----


def test_the_prefix_cache_keeps_blocks_of_the_runs_block_size():
    import torch

    from harness.engines.reference.prefix_cache import PrefixCache

    kv = [(torch.arange(40.0).reshape(1, 40, 1, 1).repeat(2, 1, 1, 1), torch.zeros(2, 40, 1, 1))]
    prompt = list(range(30))
    for block, hit in ((8, 24), (16, 16)):  # the last token is always computed: 29 cacheable tokens
        cache = PrefixCache(block)
        cache.store(kv, 0, prompt)
        assert cache.hit_length(prompt) == hit and cache.counts["block"] == block
        assert cache.restore(kv, 1, prompt) == hit and torch.equal(kv[0][0][1, :hit], kv[0][0][0, :hit])


def test_block_size_without_the_prefix_cache_is_refused_by_the_reference_engines_rule():
    reference = get_engine("reference")
    assert present(reference.unsupported_reason({"block_size": 8})).startswith("block_size requires prefix_cache: ")
    assert reference.unsupported_reason({"block_size": 8, "prefix_cache": True}) is None
    assert "has no axis 'block_size'" in present(get_engine("vllm").unsupported_reason({"block_size": 8}))


@pytest.mark.e2e
def test_a_run_with_block_size_8_hits_in_blocks_of_8(tmp_path):
    from tests.kit import harness_cli, outputs_meta, verdict_of

    sid = "llama-interactions/tp2-pp1-dp2-prefix_cache-block_size8"
    result = harness_cli("run", sid, "--report-dir", str(tmp_path), "--run-id", "run", timeout=900, what="run block_size8")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert verdict_of(tmp_path / "run", sid)["verdict"] == "pass"
    applied = outputs_meta(tmp_path / "run", sid)["applied"]["block_size"]
    assert applied["applied"] and "blocks of 8 tokens" in applied["evidence"], applied


@pytest.mark.e2e
def test_a_pr_gate_over_a_misspelt_value_is_not_ok(tmp_path):
    """End to end: `harness run --gate pr` over the file exited 0 with
    `OK: 1 pass, 3 unsupported`. The file is refused, each bad value named once, and the gate fails."""
    from tests.kit import harness_cli

    path = tmp_path / "typo.yaml"
    path.write_text(
        SUITE.replace("spec: [false, ngram]", "spec: [false, ngarm]").replace("batch: [all, mixed]", "batch: [all, mixd]")
    )
    done = harness_cli("--scenarios", str(path), "run", "--gate", "pr", "--report-dir", str(tmp_path / "r"), timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr
    assert said.count("axis 'spec' value 'ngarm': spec takes false, ngram, draft") == 1, said
    assert "axis 'batch' value 'mixd': batch takes all, one, mixed" in said and "OK" not in done.stdout, said


def test_a_reference_rank_gets_its_share_of_the_cores_counting_every_replica():
    """Each rank sized its threads by tp*pp while the world is dp*tp*pp: with dp=2 the
    CPU was oversubscribed twice over."""
    from harness.engines.reference.worker import rank_threads

    assert rank_threads(16, RunAxes(tp=2, pp=2, dp=2)) == 2
    assert rank_threads(16, RunAxes(tp=2)) == 8 and rank_threads(2, RunAxes(tp=2, dp=2)) == 1
