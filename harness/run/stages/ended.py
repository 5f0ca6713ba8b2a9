"""The verdict of a run that left nothing to compare: a rank crashed (the rank that died
first, as the engine tells it), the ranks hung (where each was stuck), or the harness
or the machine failed under it (`error`: never blamed on the engine).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from harness.contract.jsonfile import JSONObject
from harness.contract.storage import describe as describe_storage
from harness.contract.storage import storage_fault
from harness.contract.verdict import Verdict
from harness.engines.launch import LaunchOutcome, RankFailure


class RootCauses(Protocol):
    """What launch_verdict asks of the engine (harness/engines/base.py Engine.root_cause)."""

    def root_cause(self, log_text: str) -> RankFailure | None: ...


def launch_verdict(name: str, outcome: LaunchOutcome, engine: RootCauses) -> Verdict | None:
    """The verdict of a launch that did not end with every rank done, or None."""
    if outcome.status == "ok":
        return None
    logs = outcome.log_record()
    failure = outcome.failure if outcome.status == "crash" else None
    if outcome.status == "crash" and failure is None:
        raise ValueError("a crash outcome names the rank that died (LaunchOutcome.failure)")
    if failure is not None and failure.storage:  # the disk is full, not the engine wrong
        return storage_verdict(name, failure.storage, f"rank {failure.rank}", crash=asdict(failure), logs=logs)
    # the harness's helper died, or its own code in the rank raised
    if failure is not None and failure.harness_fault:
        return harness_fault_verdict(name, failure, logs)
    if outcome.status not in ("crash", "hang"):
        return Verdict(name, "error", f"launcher ended with status '{outcome.status}'", logs=logs)
    # The engine's root_cause reads the launched process's log: for a crash, the process of
    # its own that really died; for a hang, an exception its worker raised without exiting
    # (vLLM on CPU: a non-last PP stage raises, its peer waits for its tensors forever).
    log = failure.log if failure is not None else str(outcome.logs.get(0, ""))
    text = _read(log)
    cause = engine.root_cause(text) if text else None
    if failure is not None:
        told = failure.as_told_by(cause)
        # the engine's root_cause found the harness's doing (its environment, its input)
        if told.harness_fault:
            return harness_fault_verdict(name, told, logs)
        return Verdict(name, "crash", told.describe(), crash=asdict(told), logs=logs)
    where = "; ".join(f"rank {r} at {loc}" for r, loc in sorted(outcome.stuck_at.items()))
    hang = {"stuck_at": outcome.stuck_at, "stacks": outcome.stacks, "stall": outcome.stall}
    # the root cause is that exception; the hang only followed it
    if cause is not None and cause.exception:
        raised = replace(cause, log=log)
        if raised.harness_fault:
            return harness_fault_verdict(name, raised, logs, hang=hang)
        return Verdict(
            name,
            "crash",
            f"{raised.describe()}; the engine then made no progress ({outcome.hang_reason()})",
            crash=asdict(raised),
            hang=hang,
            logs=logs,
        )
    return Verdict(name, "hang", f"{outcome.hang_reason()}: {where or 'no stack dump'}", hang=hang, logs=logs)


def harness_fault_verdict(name: str, failure: RankFailure, logs: JSONObject, **extra: Any) -> Verdict:  # extra: Verdict fields
    """`error: harness error: <what the harness could not do>`, the failure kept as seen."""
    why = failure.harness_fault or ""
    return Verdict(name, "error", f"harness error: {why}", error={"exception": why}, crash=asdict(failure), logs=logs, **extra)


def harness_error(name: str, exc: BaseException) -> Verdict:
    """The verdict of a run whose harness raised: the machine's fault when the disk under
    the harness's own files failed, else a harness error with its traceback."""
    fault = storage_fault(exc)
    if fault:
        return storage_verdict(name, fault, "the harness")
    first = str(exc).splitlines()[0] if str(exc) else ""
    return Verdict(
        name,
        "error",
        f"harness error: {type(exc).__name__}: {first}",
        error={"exception": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
    )


def storage_verdict(name: str, fault: Mapping[str, object], who: str, **extra: Any) -> Verdict:  # extra: Verdict fields
    """A full, read-only or over-quota disk under the harness's own files: `error` (the
    machine's fault, exit code 3), naming the path, never an engine `crash`."""
    reason = f"machine fault: {who} {describe_storage(fault)}; free space or make it writable, then run again"
    return Verdict(name, "error", reason, error={"exception": describe_storage(fault), "storage": fault}, **extra)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""
