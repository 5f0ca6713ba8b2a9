"""A crash's one-line location names both the frame that raised and the innermost frame of the
model's own code above it: vLLM's PP bug raised KeyError 'residual' in sequence.py (the
IntermediateTensors lookup), and the line an engine developer looks at first is the model's
forward that asked for the key (step3_text.py:370). From a vLLM worker's log and from a
rank's own error record."""

from __future__ import annotations

from harness.engines.launch import LaunchOutcome, RankFailure, rankside
from harness.engines.launch.blame import read_record
from harness.engines.launch.outcome import location
from harness.engines.launch.rootcause import is_model_frame, model_frame, root_of
from harness.engines.vllm.crash import root_cause
from harness.run.stages.ended import launch_verdict
from tests.kit.present import present

W1 = "(Worker_PP1 pid=27011) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] "
SITE = "/venv/lib/python3.12/site-packages/vllm"
MODEL = f"{SITE}/model_executor/models/step3_text.py"
SEQUENCE = f"{SITE}/sequence.py"


def worker_log() -> str:
    lines = [
        "WorkerProc hit an exception.",
        "Traceback (most recent call last):",
        f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 2100, in execute_model',
        "    model_output = self.model(**inputs)",
        f'  File "{MODEL}", line 370, in forward',
        '    residual = intermediate_tensors["residual"]',
        f'  File "{SEQUENCE}", line 43, in __getitem__',
        "    return self.tensors[key]",
        "KeyError: 'residual'",
    ]
    return "\n".join(W1 + line for line in lines)


def test_a_vllm_workers_crash_names_the_raise_site_and_the_models_line(tmp_path):
    cause = present(root_cause(worker_log()))
    assert cause.frame == f"{SEQUENCE}:43 in __getitem__" and cause.model_frame == f"{MODEL}:370 in forward"
    log = tmp_path / "rank0.log"
    log.write_text(worker_log())
    failure = RankFailure(0, 1, None, "EngineDeadError: EngineCore encountered an issue", None, str(log))
    from harness.engines.vllm import VllmEngine

    v = present(launch_verdict("s/pp2", LaunchOutcome("crash", 1.0, failure=failure, logs={0: str(log)}), VllmEngine()))
    assert v.verdict == "crash"
    assert v.reason.startswith(
        "rank Worker_PP1 (vLLM worker: PP rank 1, pid 27011) crashed: KeyError: 'residual' at "
        "site-packages/vllm/sequence.py:43 in __getitem__ (raised) from "
        "model_executor/models/step3_text.py:370 in forward (model)"
    ), v.reason
    assert present(v.crash)["model_frame"] == f"{MODEL}:370 in forward"  # kept whole for the report


def test_a_crash_raised_in_the_models_own_line_names_it_once():
    log = worker_log().replace(f'{SEQUENCE}", line 43, in __getitem__', f'{MODEL}", line 371, in forward')
    cause = present(root_cause(log))
    assert cause.frame == f"{MODEL}:371 in forward" and cause.model_frame is None
    assert location(cause.frame, cause.model_frame) == "model_executor/models/step3_text.py:371 in forward"
    assert location(None, None) == "" and location(None, f"{MODEL}:1 in f") == "model_executor/models/step3_text.py:1 in f"


def test_which_frames_are_a_models_own_code():
    assert is_model_frame(f"{MODEL}:370 in forward")
    assert is_model_frame("/venv/transformers/models/llama/modeling_llama.py:300 in forward")
    assert is_model_frame("/cache/modules/transformers_modules/m/modeling_step3.py:10 in forward")
    assert is_model_frame("/work/harness/engines/reference/model.py:323 in forward")
    assert not is_model_frame(f"{SEQUENCE}:43 in __getitem__")
    assert not is_model_frame("/venv/transformers/models/llama/configuration_llama.py:3 in f")
    assert model_frame([f"{MODEL}:1 in a", f"{MODEL}:2 in b", f"{SEQUENCE}:43 in g"], f"{SEQUENCE}:43 in g") == f"{MODEL}:2 in b"


def engine_function(source: str, filename: str):
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["f"]


def test_a_ranks_error_record_names_the_models_line_above_the_raise_site(tmp_path, monkeypatch):
    lookup = engine_function("def f(tensors, key):\n    return tensors[key]\n", SEQUENCE)
    forward = engine_function("def f(lookup):\n    return lookup({}, 'residual')\n", MODEL)
    try:
        forward(lookup)
    except KeyError as exc:
        root = root_of(exc)
        path = tmp_path / "rank0.error.json"
        monkeypatch.setenv(rankside.ERROR_FILE_ENV, str(path))
        rankside.write_error_record(exc)
    assert root.frame == f"{SEQUENCE}:2 in f" and root.model_frame == f"{MODEL}:2 in f"
    record = present(read_record(path))
    assert record["model_frame"] == f"{MODEL}:2 in f" and record["harness_fault"] is None
    failure = RankFailure(1, 1, None, "KeyError: 'residual'", None, "", record["frame"], model_frame=record["model_frame"])
    assert failure.describe() == (
        "rank 1 crashed: KeyError: 'residual' at site-packages/vllm/sequence.py:2 in f (raised) "
        "from model_executor/models/step3_text.py:2 in f (model)"
    )


def test_the_markdown_report_shows_the_models_line_beside_the_raise_site(tmp_path):
    from harness.contract.rundir import verdict_path
    from harness.contract.verdict import Verdict
    from harness.run.report import write_report

    v = Verdict(
        "s/pp2",
        "crash",
        "rank Worker_PP1 crashed: KeyError: 'residual'",
        crash={
            "rank": "Worker_PP1",
            "exception": "KeyError: 'residual'",
            "traceback": "tb",
            "log": "l",
            "frame": f"{SEQUENCE}:43 in __getitem__",
            "model_frame": f"{MODEL}:370 in forward",
        },
    )
    v.save(verdict_path(tmp_path, v.scenario))
    write_report(tmp_path, {"run_id": "r1"})
    md = (tmp_path / "summary.md").read_text()
    assert f"Raised at `{SEQUENCE}:43 in __getitem__`" in md and f"From the model's code at `{MODEL}:370 in forward`" in md
