"""What a launch ends in: the outcome the runner turns into a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass
class RankFailure:
    # the launcher's rank number; or, when the engine's root_cause names the process that
    # really died (one the engine started itself), the engine's name for it: `Worker_PP1 (vLLM worker: PP rank 1)`
    rank: int | str
    exitcode: int | None  # None if killed by a signal
    signal: str | None  # e.g. "SIGKILL"
    # "KeyError: 'residual'" from the rank's error record, else None
    exception: str | None
    # from the error record; else the tail of the rank's log
    traceback: str | None
    log: str  # path of the rank's log file
    # "model.py:412 in forward": where the exception was raised, outside torch
    frame: str | None = None
    # the torch.compile wrapper it surfaced as ("torch._dynamo.exc....: ...")
    wrapper: str | None = None
    # the rank's command line, kept only when its log is missing or empty (it died before
    # its program wrote anything, or never started): then it is all there is to go on
    command: str | None = None
    # The harness's own fault, not the engine's: the helper process the rank depended on
    # died (the rank pool's zygote), and why. The runner's verdict is then `error`.
    harness_fault: str | None = None
    # A disk fault (contract/storage.py: errno, strerror, path) the rank met writing the
    # harness's files: the machine's fault, not the engine's. The verdict is then `error`.
    storage: dict | None = None
    # the innermost frame of the model's code when the exception was raised below it, in the
    # engine's helpers (vLLM's sequence.py, asked for a key by the model's forward); else None
    model_frame: str | None = None

    def describe(self) -> str:
        """The crash in one line: `rank 1 crashed: KeyError: 'residual' at reference/model.py:323 in forward`,
        or with the model's line below which it was raised: `... at vllm/sequence.py:43 in __getitem__
        (raised) from model_executor/models/step3_text.py:370 in forward (model)`."""
        what = self.exception or (f"killed by {self.signal}" if self.signal else f"exit code {self.exitcode}")
        # no log to see: what it ran is all there is to go on
        if self.command is not None:
            return f"rank {self.rank} died before writing anything to its log ({what}); its command: {self.command}"
        where = location(self.frame, self.model_frame)
        return f"rank {self.rank} crashed: {what}" + (f" at {where}" if where else "")

    def as_told_by(self, cause: RankFailure | None) -> RankFailure:
        """The crash as the engine tells it (its root_cause: the process of its own that
        really died), keeping this launcher view's log, and what the launched process saw
        as context; its exit code and signal unless the engine knows how its process died
        (a worker's SIGSEGV, not the driver's exit code 1 that followed); this view when the
        engine names nothing."""
        if cause is None:
            return self
        context = (
            f"\n\n(the process the harness launched, launcher rank {self.rank}, saw: "
            f"{self.exception or 'no exception record'}"
            + (f", exit code {self.exitcode}" if self.exitcode is not None else "")
            + (f", {self.signal}" if self.signal else "")
            + ")"
        )
        died = cause.signal is not None or cause.exitcode is not None
        return replace(
            cause,
            exitcode=cause.exitcode if died else self.exitcode,
            signal=cause.signal if died else self.signal,
            log=self.log,
            traceback=(cause.traceback or "") + context,
        )


def location(frame: str | None, model_frame: str | None, short: bool = True) -> str:
    """Where a crash was raised: the raise site, and the model's own frame above it when that
    is another (an engine developer reads the model's line first); `short`: the frames'
    last three path parts."""
    name = _short_frame if short else str
    if not frame:
        return name(model_frame) if model_frame else ""
    if not model_frame or model_frame == frame:
        return name(frame)
    return f"{name(frame)} (raised) from {name(model_frame)} (model)"


def _short_frame(frame: str) -> str:
    """`engines/reference/model.py:323 in forward`: a frame's last three path parts."""
    path, sep, rest = frame.rpartition(":")
    return "/".join(Path(path).parts[-3:]) + sep + rest if sep else frame


@dataclass
class LaunchOutcome:
    status: str  # "ok" | "crash" | "hang" | "interrupted"
    duration_s: float
    failure: RankFailure | None = None  # the FIRST rank that died (crash)
    stacks: dict[int, str] = field(default_factory=dict)  # hang: per-rank faulthandler dump
    stuck_at: dict[int, str] = field(default_factory=dict)  # hang: "file:line in func" of main thread
    # hang declared by the stall detector (stall.Stall as a dict); None: by the timeout
    stall: dict | None = None
    logs: dict[int, str] = field(default_factory=dict)  # rank -> log path
    port: int = 0

    def log_record(self) -> dict[str, str]:
        """The rank logs as a verdict records them: {"0": path, ...}."""
        return {str(r): p for r, p in self.logs.items()}

    def hang_reason(self) -> str:
        """Who declared a hang, in the verdict's words."""
        if self.stall:
            from harness.engines.launch.stall import Stall

            return Stall(**self.stall).describe()
        return f"no result after {self.duration_s:.0f}s (the timeout)"


class LaunchInterrupted(KeyboardInterrupt):
    """Raised by run_ranks after Ctrl-C / SIGTERM, once every rank is gone."""

    def __init__(self, outcome: LaunchOutcome):
        super().__init__("launch interrupted")
        self.outcome = outcome
