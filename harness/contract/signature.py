"""What a failure looks like, in one model for a scenario file's expectation
(inputs/scenarios/schema.py ExpectedFailure) and an engine's known bug (contract/known_bugs.py KnownBug):
the verdict it gives, the engine versions it is for, a crash's exception, message, traceback
and rank, a numeric failure's check and metrics, and the runs that showed it. Matched against
a verdict by contract/expectations.py (mismatch, describe)."""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Sighting(BaseModel):
    """One run that showed the failure: `{release: 0.32.0, scenario: vllm-llama/tp1-pp2, verdict: crash}`."""

    model_config = ConfigDict(extra="forbid")
    release: str = Field(min_length=1)
    scenario: str = Field(min_length=1)
    verdict: Literal["fail", "crash", "hang", "unsupported", "pass"]


class FailureSignature(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The verdict the failure gives; named crash / numeric fields imply it.
    verdict: Literal["fail", "crash", "hang", "unsupported"] | None = None
    # Engine versions it is for (PEP 440): `engine_version: "vllm>=0.30,<0.33"` and/or
    # `versions: {vllm: "==0.32.*", torch: ">=2.9"}`, keys as the engine's versions() names
    # them. Outside them it does not apply and the scenario is judged normally.
    engine_version: str | None = None
    versions: dict[str, str] = {}
    # crash: the exception type ("KeyError", or dotted), a regex searched in its message and
    # in the traceback, and the failing rank (an int) or worker (a regex: "Worker_PP1").
    exception: str | None = None
    message: str | None = None
    traceback: str | None = None
    rank: int | str | None = None
    # fail: a failed check (name or glob) and conditions on its metrics ({max_abs_dlogprob: ">=0.1"}).
    check: str | None = None
    metric: dict[str, str] = {}
    # the runs that showed it: its range is backed by one in each release series it covers
    # (tests/test_known_bugs.py lists the series not measured yet)
    seen: list[Sighting] = []

    @field_validator("engine_version")
    @classmethod
    def _requirement(cls, v: str | None) -> str | None:
        if v is not None:
            from harness.contract.expectations import parse_requirement

            parse_requirement(v)  # raises ValueError with the problem
        return v

    @field_validator("versions")
    @classmethod
    def _specifiers(cls, v: dict[str, str]) -> dict[str, str]:
        from harness.contract.expectations import parse_specifier

        for name, version_range in v.items():
            parse_specifier(name, version_range)
        return v

    @field_validator("message", "traceback")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc}): {v!r}") from None
        return v

    @field_validator("rank")
    @classmethod
    def _rank(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, str):
            cls._regex(v)
        return v

    @field_validator("metric")
    @classmethod
    def _conditions(cls, v: dict[str, str]) -> dict[str, str]:
        from harness.contract.expectations import parse_condition

        for name, cond in v.items():
            parse_condition(name, cond)
        return v

    @model_validator(mode="after")
    def _kind_fits(self) -> Self:
        # the engine version does not apply the setting: `message` matches its evidence
        if self.verdict == "unsupported":
            extra = [f for f in ("exception", "traceback", "rank", "check", "metric") if getattr(self, f)]
            if extra:
                raise ValueError(f"{extra}: an expected `unsupported` is matched on the engine's reason (`message`) only")
            return self
        crash_fields = [f for f in ("exception", "message", "traceback", "rank") if getattr(self, f) is not None]
        fail_fields = [f for f in ("check", "metric") if getattr(self, f)]
        if crash_fields and fail_fields:
            raise ValueError(f"{crash_fields + fail_fields}: a crash's fields and a numeric failure's fields in one expectation")
        implied = "crash" if crash_fields else "fail" if fail_fields else None
        if implied and self.verdict not in (None, implied):
            raise ValueError(f"{crash_fields or fail_fields} describe a {implied}, but verdict is '{self.verdict}'")
        if implied and self.verdict is None:
            self.verdict = implied  # type: ignore[assignment]
        return self
