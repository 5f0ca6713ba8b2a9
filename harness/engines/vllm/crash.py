"""Find the vLLM process that really failed, from the driver's log.

When a vLLM worker fails, the driver (the process the launcher watches) only sees
`EngineDeadError: EngineCore encountered an issue`, and the engine core may add a
secondary error of its own (e.g. a KeyError on a request id that the dead worker
never answered). The root cause is in the failing process's own output: vLLM
prefixes every log line of its processes with `(<process name> pid=<pid>) `, and a
worker logs "WorkerProc hit an exception." with the traceback, or the executor
logs "Worker proc <name> died unexpectedly (exit code: N)" for a hard death.

Order of preference: the first worker traceback; else the first worker that died
without one; else the first engine-core traceback. None when the log has none of
these (the launcher's own view of the crash stands then).

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.launch.rootcause import WRAPPER_LINE, root_of_text

PREFIX = re.compile(r"^\((?P<proc>[A-Za-z0-9_]+) pid=(?P<pid>\d+)\) (?P<rest>.*)$")
# vLLM's log format after the prefix: "ERROR 11-21 06:11:21 [file.py:123] message"
LOG_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ?")
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError|KeyError|StopIteration)(?::\s?(?P<msg>.*))?$")
DIED = re.compile(r"Worker proc (?P<name>\S+) died unexpectedly(?: \(exit code: (?P<code>-?\d+)\))?")
ROLE = re.compile(r"_(DP|PP|PCP|TP|DCP|EP)(\d+)")
# How far past a torch.compile wrapper's exception line its message is read
WRAPPER_MESSAGE_LINES = 80


@dataclass
class ProcessError:
    process: str  # vLLM's name for it: Worker_PP1_TP0, EngineCore, ...
    pid: int | None
    exception: str  # "KeyError: 'residual'" or "died unexpectedly (exit code 3)"
    traceback: str
    frame: str | None = None  # "/venv/vllm/model_executor/models/llama.py:412 in forward"
    wrapper: str | None = None  # the torch.compile wrapper it surfaced as, when unwrapped

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
    """(process, pid, message) for every line a vLLM process logged."""
    for line in log_text.splitlines():
        m = PREFIX.match(line)
        if m:
            yield m["proc"], int(m["pid"]), LOG_HEADER.sub("", m["rest"], count=1)


def _tracebacks(log_text: str) -> list[ProcessError]:
    """The first complete traceback each process logged, in log order. A torch.compile
    wrapper (`torch._dynamo.exc.Unsupported: Observed exception`) is not the end: its
    message (Dynamo's "Developer debug context", "from user code:") and the exceptions
    chained to it are read on to the model's own exception (rootcause.py)."""
    found: dict[str, ProcessError] = {}
    open_blocks: dict[str, list[str]] = {}
    wrapped: dict[str, tuple[int, str, int]] = {}  # proc -> (pid, wrapper line, lines read since)
    order: dict[str, int] = {}  # proc -> where its exception line was: log order, also for a wrapper read on
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
    return ProcessError(proc, pid, root.exception, text, root.frame, root.wrapper)


def _deaths(log_text: str) -> list[ProcessError]:
    deaths = []
    for _proc, _pid, msg in _prefixed_lines(log_text):
        m = DIED.search(msg)
        if m:
            code = f" (exit code {m['code']})" if m["code"] is not None else ""
            deaths.append(ProcessError(m["name"], None, f"died unexpectedly{code}", msg))
    return deaths


def root_cause(log_text: str) -> ProcessError | None:
    tracebacks = _tracebacks(log_text)
    for candidates in ([t for t in tracebacks if t.is_worker], _deaths(log_text), tracebacks):
        if candidates:
            return candidates[0]
    return None
