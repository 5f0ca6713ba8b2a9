"""The user's own exception under torch.compile's wrappers.

Under torch.compile a model's own error reaches the rank wrapped by Dynamo or Inductor:
`torch._dynamo.exc.Unsupported: Observed exception ... raised exception KeyError('residual')`
(torch 2.13, fullgraph), `torch._dynamo.exc.ObservedKeyError: raised exception
ExceptionVariable(<class 'KeyError'>)` (torch 2.11), `TorchRuntimeError`,
`BackendCompilerFailed`, `InternalTorchDynamoError`. The verdict should name the model's
exception, its message and the model's frame (file and line), and keep the wrapper as
context. Two ways in:

  * `root_of(exc)`: a live exception (the rank's error record, rankside.py): follow the
    wrappers' `inner_exception`, `__cause__` and `__context__` to the innermost exception
    that is not torch's; when Dynamo only kept a description of it (an "observed"
    exception has no real inner exception), read its type, message and user frame from
    Dynamo's own attributes and text (`real_stack`, "Developer debug context", "from user
    code:").
  * `root_of_text(block)`: a traceback as text (a vLLM worker's log, engines/vllm/crash.py).

Standard library only: this module runs inside an engine's own environment.
"""

from __future__ import annotations

import ast
import os
import re
import traceback
from dataclasses import dataclass

# Modules whose exceptions wrap another one (the compile stack), never a model's own error.
WRAPPER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx", "torch._subclasses")
DEBUG_CONTEXT = re.compile(r"raised exception (?P<type>[A-Za-z_][\w.]*)\((?P<args>.*)\)\s*$", re.M)
OBSERVED = re.compile(r"(?:^|[\s.])Observed(?P<type>[A-Za-z]*(?:Error|Iteration|Exit|Exception))\b(?::\s*(?P<msg>.*))?$", re.M)
CONSTANT = re.compile(r"ConstantVariable\((?:\w+): (?P<value>.*)\)\s*$")
EXCEPTION_CLASS = re.compile(r"ExceptionVariable\(<class '(?P<type>[\w.]+)'>\)")
FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
WRAPPER_LINE = re.compile(r"^(?P<type>torch\.(?:_dynamo|_inductor|_functorch|fx|_subclasses)[\w.]*)(?::\s?(?P<msg>.*))?$")
FRAME_TEXT = re.compile(r"^(?P<file>.+):(?P<line>\d+) in (?P<func>\S+)$")
# The model's own code: where an engine developer looks first when the exception was raised
# below it, in the engine's helpers (vLLM's IntermediateTensors lookup in sequence.py, asked
# for a key by step3_text.py's forward)
MODEL_CODE = re.compile(
    r"/model_executor/models/[^/]+\.py$"  # vLLM's model implementations
    r"|/transformers/models/[^/]+/modeling_[^/]+\.py$"  # transformers' models
    r"|/modeling_[^/]+\.py$"  # a checkpoint's own model code (trust_remote_code)
    r"|/engines/reference/model\.py$"
)  # the reference engine's model


@dataclass
class RootCause:
    exception_type: str  # "KeyError"
    message: str  # "'residual'" (str() of the exception)
    # "/path/model.py:412 in forward": the innermost frame outside torch
    frame: str | None
    # "torch._dynamo.exc.Unsupported: Observed exception" when unwrapped
    wrapper: str | None
    # "/venv/vllm/model_executor/models/step3_text.py:370 in forward": the innermost frame of
    # the model's code, when the exception was raised below it (else None: `frame` is it)
    model_frame: str | None = None

    @property
    def exception(self) -> str:
        return f"{self.exception_type}: {self.message}" if self.message else self.exception_type


def is_wrapper(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(WRAPPER_MODULES)


def is_torch_file(path: str) -> bool:
    """Frames of torch itself and of code it generated (`<eval_with_key>.3`)."""
    return path.startswith("<") or f"{os.sep}torch{os.sep}" in path


def _frame_text(filename: str, lineno: int | None, name: str) -> str:
    return f"{filename}:{lineno} in {name}"


def user_frame(tb) -> str | None:
    """The innermost traceback frame outside torch."""
    found = None
    for fs in traceback.extract_tb(tb):
        if not is_torch_file(fs.filename):
            found = _frame_text(fs.filename, fs.lineno, fs.name)
    return found


def is_model_frame(frame: str) -> bool:
    """Is "file:line in func" a frame of a model's own code (MODEL_CODE)?"""
    m = FRAME_TEXT.match(frame)
    return bool(m and MODEL_CODE.search(m["file"]))


def model_frame(frames: list[str], raised: str | None) -> str | None:
    """The innermost of `frames` ("file:line in func", outermost first) in a model's code,
    unless it is `raised` (the frame the verdict names already)."""
    found = next((f for f in reversed(frames) if is_model_frame(f)), None)
    return found if found != raised else None


def _tb_frames(tb) -> list[str]:
    return [_frame_text(fs.filename, fs.lineno, fs.name) for fs in traceback.extract_tb(tb)] if tb is not None else []


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _qualname(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def _unquote(etype: str, value: str) -> str:
    """str() of the exception from the repr Dynamo printed: KeyError keeps the key's repr
    (str(KeyError('x')) is "'x'"); a single string argument of any other type is unquoted."""
    value = value.strip()
    if etype.rsplit(".", 1)[-1] == "KeyError":
        return value
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    return parsed if isinstance(parsed, str) else value


def described(text: str) -> tuple[str, str] | None:
    """(type, message) of the user's exception as Dynamo describes it in `text`."""
    for m in DEBUG_CONTEXT.finditer(text):
        # Dynamo's own value, not the exception: ExceptionVariable(<class ...>)
        if m["type"].endswith("Variable"):
            continue
        args = m["args"].strip()
        return m["type"], _unquote(m["type"], args.rstrip(",")) if args else ""
    for m in OBSERVED.finditer(text):
        etype = {"UserStopIteration": "StopIteration", "Exception": ""}.get(m["type"], m["type"])
        msg = (m["msg"] or "").strip()
        cls = EXCEPTION_CLASS.search(msg)
        if cls:
            return cls["type"].rsplit(".", 1)[-1], ""
        const = CONSTANT.search(msg)
        if etype:
            return etype, _unquote(etype, const["value"]) if const else ""
    cls = EXCEPTION_CLASS.search(text)
    return (cls["type"].rsplit(".", 1)[-1], "") if cls else None


def user_code_frame(text: str) -> str | None:
    """The innermost frame of Dynamo's "from user code:" section of an error message."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == "from user code:":
            found = None
            for line in lines[i + 1 :]:
                if line.strip() and not line[:1].isspace():
                    break
                m = FILE_LINE.match(line)
                if m:
                    found = _frame_text(m["file"], int(m["line"]), m["func"])
            return found
    return None


def root_of(exc: BaseException) -> RootCause:
    """The innermost non-torch exception under `exc`'s compile wrappers (see the module doc)."""
    wrappers: list[BaseException] = []
    cur: BaseException | None = exc
    seen: set[int] = set()
    while cur is not None and is_wrapper(cur) and id(cur) not in seen:
        seen.add(id(cur))
        wrappers.append(cur)
        inner = getattr(cur, "inner_exception", None)
        cur = inner if isinstance(inner, BaseException) else (cur.__cause__ or cur.__context__)
    wrapper = f"{_qualname(exc)}: {_first_line(str(exc))}" if wrappers else None
    frames = _tb_frames(exc.__traceback__)
    if cur is not None and not is_wrapper(cur):
        frame = user_frame(cur.__traceback__) or _dynamo_frame(wrappers) or user_frame(exc.__traceback__)
        own = _tb_frames(cur.__traceback__) if cur is not exc else frames
        return RootCause(type(cur).__name__, str(cur), frame, wrapper, model_frame(frames + own, frame))
    # defensive: a cycle of non-wrappers cannot happen
    if not wrappers:
        frame = user_frame(exc.__traceback__)
        return RootCause(type(exc).__name__, str(exc), frame, None, model_frame(frames, frame))
    text = "\n".join(f"{_qualname(w)}: {w}" for w in wrappers)
    found = described(text)
    frame = _dynamo_frame(wrappers) or user_code_frame(text) or user_frame(exc.__traceback__)
    # a wrapper of nothing we can read: it is the error
    if found is None:
        return RootCause(type(exc).__name__, str(exc), frame, None, model_frame(frames, frame))
    return RootCause(found[0], found[1], frame, wrapper, model_frame(frames, frame))


def _dynamo_frame(wrappers: list[BaseException]) -> str | None:
    """Dynamo keeps the user frames it was tracing: `innermost_user_frame_summary`, `real_stack`."""
    for w in wrappers:
        fs = getattr(w, "innermost_user_frame_summary", None)
        if fs is None:
            stack = getattr(w, "real_stack", None)
            fs = stack[-1] if stack else None
        if fs is not None and getattr(fs, "filename", None):
            return _frame_text(fs.filename, fs.lineno, fs.name)
    return None


def root_of_text(block: str, exception_line: str) -> RootCause:
    """The same from a logged traceback `block` whose final exception line is `exception_line`."""
    m = WRAPPER_LINE.match(exception_line.strip())
    frames = [FILE_LINE.match(line) for line in block.splitlines()]
    user = [_frame_text(f["file"], int(f["line"]), f["func"]) for f in frames if f and not is_torch_file(f["file"])]
    plain_frame = user[-1] if user else None
    if m:
        found = described(block)
        if found:
            frame = user_code_frame(block) or plain_frame
            return RootCause(found[0], found[1], frame, exception_line.strip(), model_frame(user, frame))
    etype, _, msg = exception_line.strip().partition(":")
    return RootCause(etype.strip(), msg.strip(), plain_frame, None, model_frame(user, plain_frame))
