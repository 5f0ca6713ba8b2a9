"""A failure of the harness's own code in a rank is `error` naming the harness's line, whatever
library raised under it; the engine's own failure stays `crash`; and the vLLM driver records
only plain data, whatever vLLM adds to what it was given.

The case behind it: on vLLM 0.21.0 a speculative run ended `crash`, "TypeError: Object of type
ModelConfig is not JSON serializable at json/encoder.py:180": vLLM had put its ModelConfig
into the speculative_config dict the driver gave it, and the driver's write of outputs.json
(harness/contract/outputs.py) met it. Frames here are made with `compile(..., filename)`, so a
traceback runs through a vLLM file as it would in vLLM's interpreter."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.contract.outputs import EngineOutputs, _writing
from harness.contract.plain import plain
from harness.engines import get_engine
from harness.engines.launch import LaunchOutcome, RankFailure, rankside
from harness.engines.launch.blame import harness_fault_of, read_record
from harness.engines.launch.ownership import owner
from harness.run.stages.ended import launch_verdict
from tests.kit.present import present, raised

ROOT = Path(__file__).resolve().parent.parent
VLLM_FILE = "/venv/lib/python3.12/site-packages/vllm/sequence.py"
OUTPUTS = "harness/contract/outputs.py"


class ModelConfig:
    """Stands in for vLLM's ModelConfig: an object json cannot write."""


@dataclasses.dataclass
class SpeculativeConfig:
    """Stands in for a vLLM config: a dataclass with a field json cannot write."""

    method: str = "ngram"
    num_speculative_tokens: int = 2
    target_model_config: ModelConfig = dataclasses.field(default_factory=ModelConfig)


class Mode(enum.IntEnum):
    VLLM_COMPILE = 3


def engine_function(source: str, filename: str = VLLM_FILE):
    """A function `f` whose frames are in `filename` (an engine's file)."""
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["f"]


def test_the_outputs_writer_meeting_an_engine_object_is_the_harness_fault_naming_its_line(tmp_path):
    exc = raised(lambda: EngineOutputs(meta={"engine_kwargs": {"speculative_config": ModelConfig()}}).save(tmp_path))
    assert isinstance(exc, TypeError) and "json/encoder.py" in "".join(__import__("traceback").format_tb(exc.__traceback__))
    fault = rankside.harness_fault_in(exc)
    assert fault is not None and fault.startswith(f"could not run the harness's own code in the rank (at {OUTPUTS}:")
    assert "TypeError: Object of type ModelConfig is not JSON serializable, raised in json/encoder.py:" in fault


def test_an_engine_exception_stays_the_engines_even_through_the_harness_and_a_library(tmp_path):
    lookup = engine_function("def f(path):\n    return {}['residual']\n")
    exc = raised(lambda: _writing(tmp_path / "x", lookup))  # harness -> vLLM's frame raised
    assert isinstance(exc, KeyError) and rankside.harness_fault_in(exc) is None
    dumps = engine_function("import json\ndef f(path):\n    return json.dumps(object())\n")
    assert rankside.harness_fault_in(raised(lambda: _writing(tmp_path / "y", dumps))) is None  # vLLM's call into json


def test_harness_code_called_back_by_the_engine_is_the_harness_fault(tmp_path):
    """vLLM calls a harness hook (a worker extension, the fork patch): its failure is ours."""
    calls_back = engine_function("def f(hook):\n    return hook()\n")
    exc = raised(lambda: calls_back(lambda: EngineOutputs(meta={"x": ModelConfig()}).save(tmp_path)))
    assert OUTPUTS in (rankside.harness_fault_in(exc) or "")


def test_declared_engine_code_inside_the_harness_and_a_blamed_engine_stay_crashes(tmp_path):
    import harness.engines.reference as reference

    model_py = str(Path(reference.__file__).parent / "model.py")
    forward = engine_function("def f(path):\n    return {}['residual']\n", model_py)
    exc = raised(lambda: _writing(tmp_path / "x", forward))
    assert "engines/reference/model.py" in (rankside.harness_fault_in(exc, ()) or "")  # undeclared: a harness file
    assert rankside.harness_fault_in(exc, ("harness.engines.reference",)) is None  # the reference engine's model
    assert owner(model_py, (str(Path(reference.__file__).parent),)) == "engine"
    assert rankside.harness_fault_in(rankside.blame_engine(raised(lambda: json.dumps(object())))) is None


def test_an_injected_rank_fault_is_still_an_engine_crash(monkeypatch):
    monkeypatch.setenv(rankside.RANK_FAULT_ENV, "raise@0")
    monkeypatch.setenv("RANK", "0")
    exc = raised(rankside.fire_rank_fault)
    assert isinstance(exc, RuntimeError) and rankside.harness_fault_in(exc) is None


def rank_record(script: str, path: Path) -> dict:
    """The error record of a real rank process (`script`, under run_rank) that failed."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(ROOT), rankside.ERROR_FILE_ENV: str(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    return present(read_record(path))


def test_a_rank_whose_outputs_writer_fails_ends_error_naming_the_harness_line(tmp_path):
    """A real rank process (run_rank), its error record, the launcher's reading and the verdict."""
    path = tmp_path / "rank0.error.json"
    script = (
        "from harness.contract.outputs import EngineOutputs\n"
        "from harness.engines.launch.rankside import run_rank\n"
        "class ModelConfig: pass\n"
        "def main():\n"
        f"    EngineOutputs(meta={{'speculative_config': ModelConfig()}}).save({str(tmp_path / 'out')!r})\n"
        "run_rank(main)\n"
    )
    record = rank_record(script, path)
    assert record["frame"].split(":")[0].endswith("json/encoder.py")  # the innermost frame: the library's
    failure = RankFailure(
        0,
        1,
        None,
        "TypeError: Object of type ModelConfig is not JSON serializable",
        record["traceback"],
        str(tmp_path / "rank0.log"),
        record["frame"],
        harness_fault=harness_fault_of(record),
    )
    v = present(launch_verdict("s/x", LaunchOutcome("crash", 1.0, failure=failure), engine=get_engine("reference")))
    assert v.verdict == "error", v.reason
    assert v.reason.startswith(f"harness error: could not run the harness's own code in the rank (at {OUTPUTS}:")
    assert not (tmp_path / "out" / "outputs.json").exists()  # no half file passes for outputs


def test_a_genuine_engine_crash_in_a_rank_stays_a_crash(tmp_path):
    path = tmp_path / "rank0.error.json"
    script = (
        "from harness.engines.launch.rankside import run_rank\n"
        f"f = {{}}\nexec(compile(\"def f():\\n    return {{}}['residual']\\n\", {VLLM_FILE!r}, 'exec'), f)\n"
        "run_rank(lambda: f['f']())\n"
    )
    record = rank_record(script, path)
    assert harness_fault_of(record) is None and record["exception_type"] == "KeyError"


def test_plain_converts_an_engine_object_field_by_field():
    given: dict[str, dict[str, Any]] = {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
        "compilation_config": {"mode": Mode.VLLM_COMPILE},
    }
    recorded = plain(given)
    given["speculative_config"]["target_model_config"] = ModelConfig()  # what vLLM 0.21.0 did after the call
    assert recorded == {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
        "compilation_config": {"mode": "VLLM_COMPILE"},
    }  # a copy: the later change is not in it
    spec = plain(SpeculativeConfig())
    assert spec == {"method": "ngram", "num_speculative_tokens": 2, "target_model_config": "<ModelConfig>"}
    assert json.loads(json.dumps(plain(given))) == plain(given)
    assert plain({"nan": float("nan"), "path": Path("/m"), "set": {2, 1}}) == {"nan": "nan", "path": "/m", "set": [1, 2]}


def test_plain_ends_on_a_config_that_points_back_at_itself():
    @dataclasses.dataclass
    class Parent:
        name: str = "p"
        child: object = None

    parent = Parent()
    parent.child = Parent("c", parent)
    assert plain(parent) == {"name": "p", "child": {"name": "c", "child": "<Parent>"}}


def test_plain_keeps_torch_values_by_name_or_number():
    torch = pytest.importorskip("torch")
    assert plain({"dtype": torch.bfloat16, "one": torch.tensor(2), "many": torch.zeros(3)}) == {
        "dtype": "torch.bfloat16",
        "one": 2,
        "many": "<Tensor>",
    }
