"""The runner's verdicts for scenarios that must not launch: an engine that is not
installed is a harness `error` that says how to install it; settings the engine cannot
run are `unsupported` with the engine's reason, never silently skipped."""

from harness.runner import run_scenario
from harness.scenario import load_scenarios

SUITE = """
suite: demo
engine: {engine}
model: tiny-llama
workloads: [{{name: logits, kind: logprobs, num_prompts: 1}}]
golden: {{tp: 1, sp: false}}
matrix: {{tp: [1, 3], sp: [false, true]}}
"""


def scenarios(tmp_path, engine="reference"):
    path = tmp_path / "demo.yaml"
    path.write_text(SUITE.format(engine=engine))
    return {s.name: s for s in load_scenarios([path])}


def test_unknown_engine_is_an_error_naming_the_known_ones(tmp_path):
    v = run_scenario(scenarios(tmp_path, engine="nosuch")["tp1"], tmp_path / "run")
    assert v.verdict == "error" and not v.as_expected
    assert "unknown engine 'nosuch'" in v.reason and "reference" in v.reason
    assert (tmp_path / "run" / "scenarios" / "demo__tp1" / "verdict.json").exists()


def test_unsupported_settings_give_the_engines_reason_without_launching(tmp_path):
    by_name = scenarios(tmp_path)
    v = run_scenario(by_name["tp3"], tmp_path / "run")
    assert v.verdict == "unsupported" and v.as_expected
    assert "num_attention_heads=4 is not divisible by tp=3" in v.reason
    v = run_scenario(by_name["tp1-sp"], tmp_path / "run")
    assert v.verdict == "unsupported" and "needs tp >= 2" in v.reason
    assert not (tmp_path / "run" / "scenarios" / "demo__tp1-sp" / "logs").exists()
