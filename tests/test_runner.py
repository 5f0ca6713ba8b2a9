"""The runner's verdicts for scenarios that must not launch: an engine that is not
installed is a harness `error` that says how to install it; settings the engine cannot
run are `unsupported` with the engine's reason, never silently skipped."""

from harness.contract.rundir import logs_dir, verdict_path
from harness.inputs.scenarios.loading import load_scenarios
from harness.run.runner import run_scenario

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
    assert verdict_path(tmp_path / "run", "demo/tp1").exists()


def test_unsupported_settings_give_the_engines_reason_without_launching(tmp_path):
    by_name = scenarios(tmp_path)
    v = run_scenario(by_name["tp3"], tmp_path / "run")
    assert v.verdict == "unsupported" and v.as_expected
    assert "num_attention_heads=4 is not divisible by tp=3" in v.reason
    v = run_scenario(by_name["tp1-sp"], tmp_path / "run")
    assert v.verdict == "unsupported" and "sp requires tp>=2" in v.reason
    assert not logs_dir(tmp_path / "run", "demo/tp1-sp").exists()


def test_a_golden_made_for_something_else_says_what_differs_and_what_to_do_in_one_line(tmp_path, monkeypatch):
    """The verdict's one line (console, "Still failing") names each differing field and the
    command that regenerates the golden; it used to end at "...was made for something else:"."""
    import json
    import shutil
    from pathlib import Path

    from harness.inputs.scenarios.scenario import select

    root = Path(__file__).resolve().parent.parent
    golden = tmp_path / "golden" / "llama-tiny"
    shutil.copytree(root / "golden" / "llama-tiny", golden)
    manifest = json.loads((golden / "manifest.json").read_text())
    manifest.update(model_sha256="0123456789abcdef" * 4, dtype="bfloat16")
    (golden / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    scenario = select(load_scenarios(), ["llama-tiny/tp1-pp1"])[0]
    v = run_scenario(scenario, tmp_path / "run")
    assert v.verdict == "error" and "\n" not in v.reason
    head = v.headline()[:200]  # what a console line and the summary's lists show
    assert "harness golden llama-tiny" in head
    assert "model_sha256 golden '01234567..' run " in head
    assert "dtype golden 'bfloat16' run 'float32'" in head
    assert not logs_dir(tmp_path / "run", "llama-tiny/tp1-pp1").exists()
