"""Every numeric bound of the harness, per dtype, in one table.

The comparison (numeric.py: logprobs and greedy checks), the localizer (localize.py and
modules.py: the first hidden state or module that leaves the golden's) and the standalone
repro script (`harness repro`: the bounds written into its CASE, harness/run/repro.py) all
read TABLE, so a bound changed here changes for all three. docs/TOLERANCES.md has the noise
floors each bound sits above and what a real bug moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tolerance:
    """The logit comparison's bounds; a scenario file may override each (its `tolerances:`)."""

    logprob_atol: float  # max |delta logprob| over the golden's top-k
    # max per-position KL(golden || scenario) over the golden's top-k + tail
    kl_max: float
    # min top-1 agreement among positions that are not near-ties (below it, each flip is a bad position)
    top1_min: float
    # a logprob gap this small between two candidates is a tie
    near_tie: float

    def describe(self) -> str:
        return f"|dlogprob|<={self.logprob_atol:g}, KL<={self.kl_max:g}, top1>={self.top1_min:g}, near-tie<={self.near_tie:g}"


@dataclass(frozen=True)
class DtypeBounds:
    """One dtype's row: the logit comparison's bounds, and the localizer's relative L2 bound
    per token row of a hidden state or module output (|delta| / |golden|)."""

    logits: Tolerance
    hidden_rtol: float


# float32: the bounds sit well above the noise floor of tp/pp/sp/compile runs and still
# orders of magnitude below what a real bug moves (docs/TOLERANCES.md has both). The hidden
# bound sits as far above its float32 floor as the logit bound above its own; bf16's and
# fp16's scale with their logit bounds against float32's.
TABLE: dict[str, DtypeBounds] = {
    "float32": DtypeBounds(Tolerance(logprob_atol=2e-4, kl_max=1e-6, top1_min=1.0, near_tie=1e-3), hidden_rtol=1e-5),
    "bfloat16": DtypeBounds(Tolerance(logprob_atol=0.15, kl_max=1e-2, top1_min=0.9, near_tie=0.05), hidden_rtol=7.5e-3),
    "float16": DtypeBounds(Tolerance(logprob_atol=0.03, kl_max=1e-3, top1_min=0.95, near_tie=0.01), hidden_rtol=1.5e-3),
}


def tolerance_for(dtype: str, overrides: Mapping[str, float | None] | None = None) -> Tolerance:
    """The dtype's logit bounds, with a scenario file's overrides (None: the table's)."""
    base = asdict(TABLE[dtype].logits)
    base.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return Tolerance(**base)


def hidden_rtol(dtype: str) -> float:
    """The localizer's bound for a run of `dtype` (float32's where the dtype is not known)."""
    return (TABLE.get(dtype) or TABLE["float32"]).hidden_rtol


def script_literal(tol: Tolerance) -> dict[str, float]:
    """The bounds as the standalone repro script holds them (its CASE "tolerance"): every
    field of Tolerance by name, so a field added here reaches the script too."""
    return asdict(tol)
