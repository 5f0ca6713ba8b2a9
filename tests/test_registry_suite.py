"""A suite whose archs come from the engine's model registry (`archs: {from: registry}`,
harness/inputs/scenarios/registry.py): names derived from the classes, the kinds, exclude
and skip_swept, the lock's record as the fallback without the engine, and an arch that left
the registry said, not dropped in silence. The engine's registry is faked here (unit tier);
the built-in vllm-registry suite is checked against its lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.inputs.models import ArchModel
from harness.inputs.scenarios import covering, registry
from harness.inputs.scenarios.loading import load_catalog, load_suite
from harness.inputs.scenarios.scenario import expand
from harness.inputs.scenarios.schema import ScenarioError

ROOT = Path(__file__).resolve().parents[1]

REGISTRY_SUITE = """
suite: reg
engine: vllm
archs:
  from: registry
  kinds: [text]
  skip_swept: true
  exclude: {{OptForCausalLM: "not this one", GoneForCausalLM: "not in the registry"}}
  models: {{Qwen3NextForCausalLM: {{overrides: {{num_hidden_layers: 4}}}}}}
dtype: float32
workloads:
  - {{name: logits, kind: logprobs, prompts: gsm8k-test, num_prompts: 2, max_prompt_tokens: 32, top_k: 5}}
golden: {{tp: 1, pp: 1}}
matrix: {{tp: [1, 2], pp: [1, 2]}}
covering: {{strength: 2, groups: [{{axes: [arch, tp, pp], strength: 3}}]}}
exclude: [{{tp: 2, pp: 2}}]
{extra}"""

SWEPT_SUITE = """
suite: hand
engine: vllm
archs: {llama: LlamaForCausalLM}
dtype: float32
workloads:
  - {name: logits, kind: logprobs, prompts: gsm8k-test, num_prompts: 2, max_prompt_tokens: 32, top_k: 5}
golden: {tp: 1}
matrix: {tp: [1, 2]}
"""

SERVED = [
    "LlamaForCausalLM",
    "Qwen3NextForCausalLM",
    "OptForCausalLM",
    "GPT2LMHeadModel",
    "Qwen3_5ForConditionalGeneration",
    "HunYuanMoEV1ForCausalLM",
    "InternLM2ForCausalLM",
    "Eagle3LlamaForCausalLM",
    "EagleLlamaForCausalLM",
]


@pytest.fixture
def engine(monkeypatch):
    """A fake installed engine: `served` is its registry (None: not installed)."""
    state = {"served": list(SERVED)}

    def fake(name, options):
        if state["served"] is None:
            return None, "vllm is not installed here"
        return sorted(state["served"]), "vllm 9.9.9"

    monkeypatch.setattr(registry, "_registry", fake)
    # the classes transformers lacks take the vLLM-only route (tiny_vllm.py)
    monkeypatch.setattr(registry, "build_route", lambda arch: "vllm" if arch in VLLM_ONLY else "transformers")
    return state


VLLM_ONLY = {"InternLM2ForCausalLM", "Eagle3LlamaForCausalLM", "EagleLlamaForCausalLM"}


def write(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "hand.yaml").write_text(SWEPT_SUITE)
    path = tmp_path / "reg.yaml"
    path.write_text(REGISTRY_SUITE.format(extra=extra))
    return path


def lock(path: Path) -> None:
    suite = load_suite(path)
    covering.write_lock(suite, path, [s.settings for s in expand(suite, path)])


@pytest.mark.parametrize(
    "arch, name",
    [
        ("Qwen3NextForCausalLM", "qwen3-next"),
        ("GPT2LMHeadModel", "gpt2"),
        ("HunYuanMoEV1ForCausalLM", "hun-yuan-moe-v1"),
        ("GPTBigCodeForCausalLM", "gpt-big-code"),
        ("Qwen3_5MoeForConditionalGeneration", "qwen3-5-moe"),
        ("NemotronHForCausalLM", "nemotron-h"),
    ],
)
def test_an_arch_is_named_from_its_class(arch, name):
    assert registry.axis_name(arch) == name


def test_two_classes_of_one_name_get_the_kind_mark():
    assert registry.names_for(["Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"]) == {
        "qwen3-5": "Qwen3_5ForCausalLM",
        "qwen3-5-mm": "Qwen3_5ForConditionalGeneration",
    }


def test_the_registry_gives_the_arch_axis_less_what_the_suite_leaves_out(tmp_path, engine):
    write(tmp_path)
    catalog = load_catalog([tmp_path])
    assert not catalog.broken, catalog.problems_text()
    suite = next(s.suite for s in catalog.scenarios if s.suite.suite == "reg")
    # text kinds only (no ConditionalGeneration), Llama swept beside it, OPT excluded, the vLLM-only route: not this suite's
    assert sorted(suite.archs) == ["gpt2", "hun-yuan-moe-v1", "qwen3-next"]
    qwen3_next = suite.archs["qwen3-next"]
    assert isinstance(qwen3_next, ArchModel) and qwen3_next.overrides == {"num_hidden_layers": 4}
    assert suite.registry is not None and suite.registry.live and suite.registry.source == "vllm 9.9.9"
    # an exclude the registry does not have is said (a typo, or a class a release renamed)
    assert any("GoneForCausalLM" in n for n in catalog.notices), catalog.notices
    ids = {s.id for s in catalog.scenarios if s.suite.suite == "reg"}
    assert "reg/arch-qwen3-next-tp2-pp1" in ids and "reg/arch-gpt2-tp1-pp2" in ids


def test_without_the_engine_the_lock_gives_the_same_scenarios(tmp_path, engine):
    path = write(tmp_path)
    lock(path)
    record = json.loads(covering.lock_path(path).read_text())[registry.LOCK_KEY]
    assert record == {
        "engine": "vllm 9.9.9",
        "archs": {"gpt2": "GPT2LMHeadModel", "hun-yuan-moe-v1": "HunYuanMoEV1ForCausalLM", "qwen3-next": "Qwen3NextForCausalLM"},
    }
    live = [s.id for s in load_catalog([tmp_path]).scenarios]
    engine["served"] = None
    catalog = load_catalog([tmp_path])
    assert [s.id for s in catalog.scenarios] == live
    suite = next(s.suite for s in catalog.scenarios if s.suite.suite == "reg")
    assert suite.registry is not None and not suite.registry.live
    # a lock rewritten on that machine keeps the record
    lock(path)
    assert json.loads(covering.lock_path(path).read_text())[registry.LOCK_KEY] == record


def test_a_new_arch_joins_with_the_old_ids_kept_and_a_gone_one_is_said(tmp_path, engine):
    path = write(tmp_path)
    lock(path)
    before = {s.id for s in load_catalog([tmp_path]).scenarios}
    engine["served"] = [a for a in SERVED if a != "GPT2LMHeadModel"] + ["Mamba2ForCausalLM"]
    catalog = load_catalog([tmp_path])
    after = {s.id for s in catalog.scenarios}
    assert {i for i in before if "gpt2" not in i} <= after
    assert any(i.startswith("reg/arch-mamba2-") for i in after)
    assert not any("gpt2" in i for i in after)
    assert any("not in vllm 9.9.9's model registry" in n and "GPT2LMHeadModel" in n for n in catalog.notices)


def test_without_the_engine_or_a_lock_the_file_says_what_it_needs(tmp_path, engine):
    engine["served"] = None
    path = write(tmp_path)
    catalog = load_catalog([tmp_path])
    assert [b.suite for b in catalog.broken] == ["reg"]
    problem = catalog.broken[0].problem
    assert "needs engine 'vllm' installed" in problem and "harness list --coverage --lock reg" in problem
    with pytest.raises(ScenarioError, match="needs engine"):
        load_suite(path)


def test_a_bad_registry_entry_names_the_field(tmp_path, engine):
    path = tmp_path / "reg.yaml"
    path.write_text(REGISTRY_SUITE.format(extra="").replace("kinds: [text]", "kinds: [audio]"))
    with pytest.raises(ScenarioError, match=r"archs\.kinds"):
        load_suite(path)


@pytest.mark.parametrize("name", ["vllm-registry", "vllm-native-registry", "vllm-mm-registry", "vllm-mm-native-registry"])
def test_the_built_in_registry_suite_loads_from_its_lock_without_vllm(monkeypatch, name):
    """CI's unit tier has no vLLM: the suite's scenarios are the lock's, as on a machine with it."""
    monkeypatch.setattr(registry, "_registry", lambda name, options: (None, "vllm is not installed here"))
    path = ROOT / "scenarios" / f"{name}.yaml"
    suite = load_suite(path, swept_beside=set())
    record = registry.locked_archs(path)
    assert record and suite.archs and registry.suite_archs(suite) == set(record["archs"].values())
    # every arch of it is one no other built-in suite runs
    others = load_catalog([p for p in (ROOT / "scenarios").glob("*.yaml") if p.name != path.name]).scenarios
    swept = set().union(*(registry.suite_archs(s.suite) for s in others if s.suite.engine == "vllm"))
    assert not swept & set(record["archs"].values())


def test_an_older_release_takes_its_own_registry(tmp_path, engine, monkeypatch):
    """--engine-env: the registry suite's scenarios in that environment are its release's archs
    (an arch the release does not serve is left out and said), the others keep their ids."""
    from harness.inputs import engine_envs

    path = write(tmp_path)
    lock(path)
    old_python = tmp_path / "old" / "bin" / "python"

    def fake(name, options):
        served = [a for a in SERVED if a != "Qwen3NextForCausalLM"] if options.get("python") == str(old_python) else SERVED
        return sorted(served), "vllm 0.22.1" if options.get("python") == str(old_python) else "vllm 9.9.9"

    monkeypatch.setattr(registry, "_registry", fake)
    old = engine_envs.EngineEnv("vllm==0.22.1", "vllm", old_python, {"vllm": "0.22.1"}, "vllm-0.22.1")
    monkeypatch.setattr(engine_envs, "resolve", lambda parsed, name, say: old)
    monkeypatch.setattr(engine_envs, "default_python", lambda scenario, say: None)
    chosen = [s for s in load_catalog([tmp_path]).scenarios if s.suite.suite == "reg"]
    said: list[str] = []
    ran = engine_envs.expand(chosen, ["vllm==0.22.1"], say=said.append)
    assert {s.base_id for s in ran} == {s.id for s in chosen if "qwen3-next" not in s.id}
    assert all(s.id.endswith("@vllm-0.22.1") for s in ran)
    assert any("not in vllm 0.22.1's model registry" in line and "Qwen3NextForCausalLM" in line for line in said), said


def test_a_vllm_only_route_suite_takes_the_classes_transformers_lacks_and_globs_leave_out(tmp_path, engine):
    """`routes: [vllm]`: only the archs the tiny builder makes from vLLM's own model class; an
    exclude key may be a glob (the draft heads), each matching class left out with its reason
    (the census's state), and a glob that matches nothing is said as a typo would be."""
    path = tmp_path / "native.yaml"
    path.write_text(
        REGISTRY_SUITE.format(extra="")
        .replace("suite: reg", "suite: native")
        .replace("skip_swept: true", "routes: [vllm]")
        .replace('OptForCausalLM: "not this one"', 'Eagle*ForCausalLM: {refused: "a draft head"}, Peagle*: "none here"')
    )
    catalog = load_catalog([tmp_path])
    assert not catalog.broken, catalog.problems_text()
    suite = load_suite(path)
    assert dict(suite.archs) and sorted(suite.archs) == ["intern-lm2"]
    assert suite.registry is not None and suite.registry.live
    left_out = suite.registry.left_out
    assert set(left_out) == {"Eagle3LlamaForCausalLM", "EagleLlamaForCausalLM"}
    assert all(isinstance(why, registry.LeftOut) and why.refused == "a draft head" for why in left_out.values())
    assert any("Peagle*" in n for n in catalog.notices), catalog.notices
