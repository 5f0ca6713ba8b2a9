"""The vLLM goldens against an independent engine: HF transformers, eager, one process.

Each float32 vLLM suite's committed golden (vLLM TP1 eager) must agree with what the
`hf` engine computes for the same workloads, under the same float32 bounds every
scenario is held to. The hf engine runs through the harness's launcher, as a scenario
would. No vLLM needed: this runs in `make test`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import golden as goldens
from harness import workloads as wl
from harness import zoo
from harness.compare import compare_outputs, tolerance_for
from harness.engines import get_engine
from harness.launch import run_ranks
from harness.contract.outputs import EngineOutputs
from harness.contract.runspec import RunSpec
from harness.scenario import DEFAULT_SCENARIO_DIR, load_suite

pytest.importorskip("transformers")
SUITES = sorted(p for p in DEFAULT_SCENARIO_DIR.glob("vllm-*.yaml") if load_suite(p).dtype == "float32")


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_vllm_golden_agrees_with_hf_transformers(path: Path, tmp_path):
    suite = load_suite(path)
    model_dir = zoo.model_dir(suite.model)
    resolved = wl.resolve(suite.workloads, model_dir)
    golden_dir = goldens.golden_dir(suite.suite)
    manifest = json.loads((golden_dir / goldens.MANIFEST).read_text())
    assert manifest["workload_sha256"] == wl.checksum(resolved), f"stale golden: `harness golden {suite.suite}`"
    assert manifest["model_sha256"] == zoo.get_spec(suite.model).sha256

    spec = RunSpec(f"{suite.suite}/hf", "hf", str(model_dir), suite.dtype, {"tp": 1, "pp": 1, "compile": False},
                   resolved, str(tmp_path / "outputs"))
    spec.save(tmp_path / "spec.json")
    outcome = run_ranks(get_engine("hf").launch_plan(spec, str(tmp_path / "spec.json")), tmp_path / "logs", 300)
    assert outcome.status == "ok", (outcome.failure, Path(outcome.logs[0]).read_text()[-3000:])

    checks = compare_outputs(EngineOutputs.load(golden_dir), EngineOutputs.load(spec.output_dir), resolved,
                             tolerance_for("float32"))
    assert [c.name for c in checks] == [w["name"] for w in resolved]
    for c in checks:
        assert c.passed, f"{suite.suite} {c.name}: vLLM golden vs HF: {c.summary} ({c.tolerance})"
