"""The admit stage (harness/run/stages/admit.py): every refusal of a run happens there, in
one order, before a rank starts, and what it admits carries what the later stages need
(the devices asked once of the configured engine, the golden as a typed Reference).
No rank is started here: these are the refusals and the hand-over."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.contract.outputs import EngineOutputs
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import select
from harness.run.golden import Reference
from harness.run.plan.devices import DevicePool
from harness.run.request import RunConfig
from harness.run.stages.admit import Admitted, admit
from harness.run.stages.context import RunContext

ROOT = Path(__file__).resolve().parent.parent


def shipped(scenario_id: str):
    return select(load_scenarios(), [scenario_id])[0]


def test_an_admitted_run_carries_its_device_count_and_its_golden(tmp_path):
    scenario = shipped("llama-tiny/tp2-pp2")
    admitted = admit(scenario, scenario.engine_settings, tmp_path / "run", RunContext())
    assert isinstance(admitted, Admitted), admitted
    assert admitted.need == 4  # tp * pp, asked of the configured engine
    reference = admitted.reference
    assert isinstance(reference, Reference) and isinstance(reference.outputs, EngineOutputs)
    assert reference.directory.name == "llama-tiny" and reference.manifest["suite"] == "llama-tiny"
    assert isinstance(reference.version_drift, dict)
    brief = admitted.prepared.brief
    assert brief.settings == scenario.engine_settings and all(w["prompts"] for w in brief.workloads)
    # a golden run is made, not held to one: nothing is loaded
    unjudged = admit(scenario, dict(scenario.suite.golden), tmp_path / "golden-run", RunContext(), golden=False)
    assert isinstance(unjudged, Admitted) and unjudged.reference is None


def test_too_few_devices_is_unsupported_before_the_golden_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "no-goldens"))  # a missing golden would be an error
    scenario = shipped("llama-tiny/tp2-pp2")
    opts = RunContext(devices=DevicePool(2, lock_dir=tmp_path / "locks"))
    refused = admit(scenario, scenario.engine_settings, tmp_path / "run", opts)
    assert isinstance(refused, Verdict) and refused.verdict == "unsupported"
    assert "needs 4 devices, this machine has 2" in refused.reason and "--nodes" in refused.reason


def test_a_bad_fault_switch_is_the_inputs_error_before_the_golden_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "no-goldens"))
    scenario = shipped("llama-tiny/tp1-pp2")
    refused = admit(scenario, scenario.engine_settings, tmp_path / "run", RunContext(RunConfig(faults=("rank-raise@7",))))
    assert isinstance(refused, Verdict) and refused.verdict == "error"
    assert refused.reason.startswith("bad fault switch:") and "rank-raise@N" in refused.reason
    # a golden is made by the clean engine, whatever the run injects
    clean = admit(
        scenario,
        scenario.engine_settings,
        tmp_path / "run",
        RunContext(RunConfig(faults=("rank-raise@7",))),
        faults=False,
        golden=False,
    )
    assert isinstance(clean, Admitted) and clean.prepared.brief.faults == []


def test_a_missing_or_mismatched_golden_is_refused_with_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    scenario = shipped("llama-tiny/tp1-pp2")
    refused = admit(scenario, scenario.engine_settings, tmp_path / "run", RunContext())
    assert isinstance(refused, Verdict) and refused.verdict == "error"
    assert "no golden for suite 'llama-tiny'" in refused.reason and "harness golden llama-tiny" in refused.reason

    shutil.copytree(ROOT / "golden" / "llama-tiny", tmp_path / "golden" / "llama-tiny")
    manifest_path = tmp_path / "golden" / "llama-tiny" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["dtype"] = "bfloat16"
    manifest_path.write_text(json.dumps(manifest))
    refused = admit(scenario, scenario.engine_settings, tmp_path / "run", RunContext())
    assert isinstance(refused, Verdict) and refused.verdict == "error"
    assert "does not match" in refused.reason and "dtype golden 'bfloat16' run 'float32'" in refused.reason


def test_a_workload_the_model_cannot_take_is_the_scenario_files_error_not_the_harnesss(tmp_path):
    suite = tmp_path / "clips.yaml"
    suite.write_text(
        "suite: clips\nengine: reference\nmodel: tiny-llama\ngolden: {tp: 1}\nmatrix: {tp: [1]}\n"
        "workloads: [{name: clip, kind: logprobs, num_prompts: 1, videos: [[noise-8x8x2]]}]\n"
    )
    scenario = load_scenarios([suite])[0]
    refused = admit(scenario, scenario.engine_settings, tmp_path / "run", RunContext())
    assert isinstance(refused, Verdict) and refused.verdict == "error"
    assert (
        not refused.reason.startswith("harness error") and "videos and audios need a model with a chat template" in refused.reason
    )
