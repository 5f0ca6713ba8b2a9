"""One run's outputs held to a reference (a golden, or another setting's outputs): the
numeric checks and the verdict they give, with the first diverging place when a
numeric check failed. The runner judges every scenario through here, and so does the
Python API (harness/api.py), so a check means the same whichever way it was asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

from harness.contract.jsonfile import JSONObject
from harness.contract.outputs import EngineOutputs
from harness.contract.verdict import Verdict
from harness.run.compare.applied import evidence_table, unapplied_reason
from harness.run.compare.contracts import check_pp_contract
from harness.run.compare.localize import describe, first_divergence
from harness.run.compare.numeric import CheckResult, check_workloads
from harness.run.compare.tolerances import Tolerance

# the kind of the eval checks (harness/run/evals): paired items, not numbers
ACCURACY = "accuracy"
# the kind of a check against the scenario's own layout without its feature
SAME_LAYOUT = "same-layout"
EXACT = Tolerance(logprob_atol=0.0, kl_max=0.0, top1_min=1.0, near_tie=0.0)  # not one bit, no near-tie excuse


def judge_outputs(
    name: str,
    reference: EngineOutputs,
    candidate: EngineOutputs,
    workloads: list[JSONObject],
    tol: Tolerance,
    *,
    also: Sequence[JSONObject] = (),
    logs: JSONObject | None = None,
    settings: JSONObject | None = None,
    golden_settings: JSONObject | None = None,
) -> Verdict:
    """The verdict of `candidate`'s outputs held to `reference`'s: the numeric checks,
    `also` (the eval checks, judged by harness/run/evals), the first diverging place when a
    numeric check failed, and, given the run's `settings` and the `golden_settings`, the
    applied table of the axes under test (the engine's evidence in candidate.meta)."""
    checks = numeric_checks(reference, candidate, workloads, tol) + list(also)
    localization = localize(reference, candidate, workloads, checks)
    applied = evidence_table(settings, golden_settings or {}, candidate.meta.get("applied")) if settings is not None else None
    return verdict_of_checks(name, checks, tol, localization, logs, applied)


def numeric_checks(
    reference: EngineOutputs, candidate: EngineOutputs, workloads: list[JSONObject], tol: Tolerance
) -> list[JSONObject]:
    """Every logprobs and greedy workload compared (harness/run/compare/numeric.py), and the
    pipeline-parallel boundary contract where the candidate reports its stage I/O."""
    checks = check_workloads(reference, candidate, workloads, tol)
    contract = check_pp_contract(candidate.meta.get("stage_io"))
    return [asdict(c) for c in checks + ([contract] if contract else [])]


def localize(
    reference: EngineOutputs, candidate: EngineOutputs, workloads: list[JSONObject], checks: list[JSONObject]
) -> JSONObject | None:
    """Where the candidate first diverged, when a numeric check failed (None otherwise,
    or when the engine captured no hidden states)."""
    if not any(not c["passed"] and c["kind"] not in (ACCURACY, SAME_LAYOUT) for c in checks):
        return None
    return first_divergence(reference, candidate, workloads)


def verdict_of_checks(
    name: str,
    checks: list[JSONObject],
    tol: Tolerance,
    localization: JSONObject | None = None,
    logs: JSONObject | None = None,
    applied: JSONObject | None = None,
) -> Verdict:
    """pass when every check held, else fail; the reason names the failed checks (all of
    them when none failed), after the first diverging place when it is known. `applied`
    (harness/run/compare/applied.py): a tested setting the engine did not apply makes the run
    `unsupported` with the evidence, whatever its numbers (a run of another setting proves
    nothing about this one, for or against); failed checks stay in the record and in the
    reason, after the evidence: vLLM 0.20.2 on CPU ran no SP, yet its SP flag padded
    batches and its CPU attention then corrupted a cached row (docs/ENGINE_VERSIONS.md)."""
    failed = [c for c in checks if not c["passed"]]
    reason = "; ".join(f"{c['name']}: {c['summary']}" for c in (failed or checks))
    if localization:
        reason = f"{describe(localization)}; {reason}"
    kind = "fail" if failed else "pass"
    unapplied = unapplied_reason(applied or {})
    if unapplied:
        kind, reason = (
            "unsupported",
            (f"{unapplied}; its outputs also differ from the reference: {reason}" if failed else unapplied),
        )
    return Verdict(
        name,
        kind,
        reason,
        tolerance=tol.describe(),
        checks=checks,
        logs=logs or {},
        localization=localization,
        applied=applied or {},
    )


def same_layout_checks(
    reference: EngineOutputs,
    label: str,
    candidate: EngineOutputs,
    workloads: list[JSONObject],
    tol: Tolerance,
    exact: bool = False,
) -> list[JSONObject]:
    """Each logprobs and greedy workload held to the run of the candidate's own layout
    without its feature (harness/run/stages/same_layout.py): with `tol` (the near-tie rule
    included), or `exact`ly. Named `<workload> vs <label>`, kind same-layout; each says
    whether the two were bit-identical over the compared top-k."""
    checks = []
    for check in check_workloads(reference, candidate, workloads, EXACT if exact else tol):
        identical = _bit_identical(check)
        check = replace(
            check,
            name=f"{check.name} vs {label}",
            kind=SAME_LAYOUT,
            summary=f"{'bit-identical' if identical else 'not bit-identical'}: {check.summary}",
            metrics={**check.metrics, "bit_identical": identical},
        )
        checks.append(asdict(check))
    return checks


def _bit_identical(check: CheckResult) -> bool:
    m = check.metrics
    # the outputs did not even have the same shape
    if not check.passed and not m:
        return False
    if check.kind == "logprobs":
        return m.get("max_abs_dlogprob") == 0.0 and m.get("top1_agreement") == 1.0
    return m.get("max_step_dlogprob") == 0.0 and m.get("exact") == m.get("prompts")
