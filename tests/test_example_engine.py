"""The example out-of-tree engine (examples/engine-tp-plan): an installed package that
declares a `harness.engines` entry point and drives transformers' own tensor
parallelism. The end-to-end test runs its suite through the `harness` CLI for real:
rank processes, gloo, the committed golden (golden/tp-plan/).

`make install` installs the package (pip install -e examples/engine-tp-plan); without it
these tests skip, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from harness.contract.rundir import outputs_dir, verdict_files
from harness.engines import get_engine
from harness.engines.base import Engine
from tests.kit import run_process, scaled

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "engine-tp-plan"
ENTRY_POINT_GROUP = "harness.engines"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("harness_tp_plan") is None,
    reason="the example engine is not installed: pip install -e examples/engine-tp-plan (make install)",
)


def harness_cli() -> list[str]:
    return [sys.executable, "-m", "harness"]


def the_engine() -> Engine:
    (ep,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == "tp-plan"]
    return ep.load()()


def test_the_package_declares_its_engine_as_an_entry_point():
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert found.get("tp-plan") == "harness_tp_plan:TpPlanEngine", found
    engine = the_engine()
    assert isinstance(engine, Engine) and engine.name == "tp-plan"
    assert type(get_engine("tp-plan")) is type(engine)  # the harness's registry finds it through the entry point
    assert engine.axes == {"tp": None, "pp": (1,), "sp": (False,), "compile": (False, True)}


def write_config(directory: Path, **fields) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(fields))
    return directory


QWEN3 = {
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 128,
    "head_dim": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 512,
}


@pytest.mark.parametrize(
    "settings, model, reason",
    [
        ({"tp": 2, "pp": 1, "compile": True}, QWEN3, None),
        ({"tp": 1}, None, None),
        ({"tp": 1, "pp": 2}, None, "does not support pp=2"),
        ({"tp": 2, "sp": True}, None, "does not support sp=True"),
        ({"tp": 4}, QWEN3, "num_key_value_heads=2 is not divisible by tp=4"),
        ({"tp": 3}, QWEN3, "num_attention_heads=4 is not divisible by tp=3"),
        (
            {"tp": 2},
            {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_head": 4, "n_embd": 128, "vocab_size": 512},
            "no tensor-parallel plan (base_model_tp_plan) for GPT2LMHeadModel",
        ),
    ],
)
def test_unsupported_settings_say_why(tmp_path, settings, model, reason):
    model_dir = str(write_config(tmp_path / "model", **model)) if model else None  # a str, as RunBrief.model_dir
    found = the_engine().unsupported_reason(settings, model_dir)
    assert (found is None) if reason is None else (reason in (found or "")), found


def test_one_rank_per_tp_rank_and_cpu_ranks_see_no_gpu(tmp_path):
    from harness.contract.runbrief import RunBrief

    brief = RunBrief("tp-plan/tp2", "tp-plan", str(tmp_path), "float32", {"tp": 2, "compile": False}, [], str(tmp_path / "out"))
    plan = the_engine().launch_plan(brief, "spec.json")
    assert plan.world_size == 2
    assert plan.argv[1:] == ["-m", "harness_tp_plan.worker", "spec.json"]
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ""  # transformers builds its mesh on the accelerator it sees


@pytest.mark.e2e
def test_the_suite_passes_through_the_entry_point(tmp_path):
    """tp1 and tp2 against the committed TP1 golden: the tp2 ranks really hold shards."""
    env = {**os.environ, "HARNESS_GOLDEN_DIR": str(ROOT / "golden")}
    cmd = [
        *harness_cli(),
        "--scenarios",
        str(EXAMPLE / "scenarios"),
        "run",
        "--gate",
        "pr",
        "--report-dir",
        str(tmp_path),
        "--run-id",
        "r",
    ]
    ran = run_process(cmd, scaled(300), "harness run tp-plan", cwd=ROOT, env=env, capture_output=True, text=True)
    verdicts = {v["scenario"]: v for v in (json.loads(p.read_text()) for p in verdict_files(tmp_path / "r"))}
    assert {k: v["verdict"] for k, v in verdicts.items()} == {"tp-plan/tp1": "pass", "tp-plan/tp2": "pass"}, (
        ran.stdout + ran.stderr
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    meta = json.loads((outputs_dir(tmp_path / "r", "tp-plan/tp2") / "outputs.json").read_text())
    placements = meta["sharding"]["parameters_by_placement"]
    assert placements.get("(Shard(dim=0),)", 0) > 0 and placements.get("(Shard(dim=1),)", 0) > 0, placements
    assert verdicts["tp-plan/tp2"]["applied"]["tp"]["applied"] is True, verdicts["tp-plan/tp2"]["applied"]


@pytest.mark.e2e
@pytest.mark.nightly_only  # 140 s; make test runs the kit on the reference engine and this engine's suite above
def test_the_example_engine_passes_the_conformance_kit(tmp_path):
    """The kit an engine author runs (harness/run/conformance.py), through the entry point:
    outputs format and numerics against the reference engine, tp2, unsupported reasons,
    crash blame and hang stacks of its real ranks, versions."""
    cmd = [*harness_cli(), "conformance", "tp-plan", "--work-dir", str(tmp_path)]
    ran = run_process(cmd, scaled(900), "harness conformance tp-plan", cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "FAIL" not in ran.stdout, ran.stdout
