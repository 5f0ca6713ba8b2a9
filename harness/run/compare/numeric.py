"""Comparison of a scenario's outputs against its golden.

Two checks, one per workload kind (docs/DESIGN.md, Contracts: comparison):
  logprobs  teacher-forced top-k logprobs of the same token sequence, so one
            divergence cannot cascade: max |delta logprob| over the golden's top-k,
            KL of the golden's top-k distribution (tail lumped), top-1 agreement.
  greedy    generated tokens equal up to the first divergence, and a divergence is
            tolerated only at a near-tie (the golden's logprobs of the two candidate
            tokens within the near-tie bound); the logprobs of every step up to the
            divergence must also agree, which covers the decode path and KV cache.
`generate` workloads (task evals) are not compared here: the evals score them item by
item (harness/run/evals). Tolerances come from the dtype (tolerances.py's table, above the measured
noise floor: docs/TOLERANCES.md) and may be overridden per scenario file; every result prints the
ones it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from harness.contract.jsonfile import JSONObject
from harness.contract.outputs import EngineOutputs
from harness.run.compare.tolerances import Tolerance


@dataclass
class CheckResult:
    name: str  # "<workload>"
    kind: str  # "logprobs" | "greedy"
    passed: bool
    summary: str  # one line for reports
    metrics: JSONObject = field(default_factory=dict)  # numbers; a contract check's `problems` list
    tolerance: str = ""
    first_divergence: JSONObject | None = None
    # per-position max |delta| (logprobs) for plots and drill-down, and the bound it is held to
    per_position: list[float] = field(default_factory=list)
    bound: float | None = None


def check_workloads(
    golden: EngineOutputs, candidate: EngineOutputs, workloads: list[JSONObject], tol: Tolerance
) -> list[CheckResult]:
    """One check per logprobs or greedy workload: the candidate run's outputs against the golden's."""
    results = []
    for w in workloads:
        # generate: judged by the evals, not by these checks
        if w["kind"] not in _FIELDS:
            continue
        g, s = golden.workload(w["name"]), candidate.workload(w["name"])
        missing = [k for k in _FIELDS[w["kind"]] if k not in s]
        if missing:
            results.append(
                CheckResult(
                    w["name"],
                    w["kind"],
                    False,
                    f"engine wrote no {', '.join(missing)} for workload '{w['name']}'",
                    tolerance=tol.describe(),
                )
            )
            continue
        check = compare_logprobs if w["kind"] == "logprobs" else compare_greedy
        results.append(check(w["name"], g, s, tol))
    return results


_FIELDS = {"logprobs": ("topk_ids", "topk_logprobs", "offsets"), "greedy": ("tokens", "topk_ids", "topk_logprobs")}


def _topk_deltas(g_ids: torch.Tensor, g_lp: torch.Tensor, s_ids: torch.Tensor, s_lp: torch.Tensor, k: int) -> torch.Tensor:
    """Per row: max over the golden's first k tokens of |scenario lp - golden lp|.
    A golden token missing from the scenario's top-K has lp <= the scenario's K-th,
    so the gap to that is a lower bound of its delta."""
    g_ids, g_lp = g_ids[:, :k], g_lp[:, :k]
    match = g_ids.unsqueeze(-1) == s_ids.unsqueeze(-2)  # [T, k, K]
    found = match.any(-1)
    s_at = torch.where(match, s_lp.unsqueeze(-2), torch.zeros(())).sum(-1)
    bound = (g_lp - s_lp[:, -1:]).clamp(min=0)
    delta = torch.where(found, (s_at - g_lp).abs(), bound)
    return delta.max(-1).values


def _kl(g_ids: torch.Tensor, g_lp: torch.Tensor, s_ids: torch.Tensor, s_lp: torch.Tensor) -> torch.Tensor:
    """KL(golden || scenario) over the golden's top-K ids plus one lumped tail bin."""
    match = g_ids.unsqueeze(-1) == s_ids.unsqueeze(-2)
    s_at = torch.where(
        match.any(-1), torch.where(match, s_lp.unsqueeze(-2), torch.zeros(())).sum(-1), s_lp[:, -1:].expand_as(g_lp)
    )
    p, q = g_lp.double().exp(), s_at.double().exp()
    p_tail = (1 - p.sum(-1)).clamp(min=1e-12)
    q_tail = (1 - q.sum(-1)).clamp(min=1e-12)
    kl: torch.Tensor = (p * (g_lp.double() - s_at.double())).sum(-1) + p_tail * (p_tail.log() - q_tail.log())
    return kl.clamp(min=0).float()


def compare_logprobs(name: str, g: Mapping[str, torch.Tensor], s: Mapping[str, torch.Tensor], tol: Tolerance) -> CheckResult:
    if not torch.equal(g["offsets"], s["offsets"]) or g["topk_ids"].shape[0] != s["topk_ids"].shape[0]:
        return CheckResult(
            name, "logprobs", False, "scenario scored a different number of positions than the golden", tolerance=tol.describe()
        )
    g_ids, g_lp, s_ids, s_lp = g["topk_ids"], g["topk_logprobs"].float(), s["topk_ids"], s["topk_logprobs"].float()
    k = max(1, min(g_ids.shape[1], s_ids.shape[1]) // 2)
    delta = _topk_deltas(g_ids, g_lp, s_ids, s_lp, k)
    kl = _kl(g_ids, g_lp, s_ids, s_lp)
    agree = g_ids[:, 0] == s_ids[:, 0]
    tie = (g_lp[:, 0] - g_lp[:, 1]) <= tol.near_tie if g_lp.shape[1] > 1 else torch.zeros_like(agree)
    decisive = ~tie
    top1 = agree[decisive].float().mean().item() if decisive.any() else 1.0
    flips = decisive & ~agree
    # A decisive top-1 flip fails the check only when flips pass the share top1_min allows:
    # a bf16 suite may tolerate a few while every position stays within the logprob bound.
    # float32 (top1_min 1.0) tolerates none; its bound is below any decisive flip anyway.
    bad = (delta > tol.logprob_atol) | (kl > tol.kl_max) | (flips if top1 < tol.top1_min else torch.zeros_like(flips))
    metrics = {
        "max_abs_dlogprob": delta.max().item(),
        "mean_abs_dlogprob": delta.mean().item(),
        "max_kl": kl.max().item(),
        "top1_agreement": agree.float().mean().item(),
        "top1_agreement_decisive": top1,
        "positions": int(delta.numel()),
        "bad_positions": int(bad.sum()),
        "decisive_top1_flips": int(flips.sum()),
        "compared_top_k": k,
    }
    first = None
    if bad.any():
        row = int(bad.nonzero()[0, 0])
        prompt = int(torch.searchsorted(g["offsets"], torch.tensor(row), right=True)) - 1
        first = {
            "prompt": prompt,
            "position": row - int(g["offsets"][prompt]),
            "dlogprob": delta[row].item(),
            "kl": kl[row].item(),
            "golden_top1": int(g_ids[row, 0]),
            "scenario_top1": int(s_ids[row, 0]),
        }
    passed = first is None
    summary = (
        f"max|dlogprob|={metrics['max_abs_dlogprob']:.2e} maxKL={metrics['max_kl']:.2e} top1={metrics['top1_agreement']:.3f}"
    )
    if flips.any():
        summary += f" ({int(flips.sum())} decisive top-1 flips: {top1:.3f} agree, {tol.top1_min:g} needed)"
    if first:
        summary += (
            f"; first diverged at prompt {first['prompt']} position {first['position']} (|dlogprob|={first['dlogprob']:.3g})"
        )
    return CheckResult(
        name, "logprobs", passed, summary, metrics, tol.describe(), first, [round(x, 8) for x in delta.tolist()], tol.logprob_atol
    )


def compare_greedy(name: str, g: Mapping[str, torch.Tensor], s: Mapping[str, torch.Tensor], tol: Tolerance) -> CheckResult:
    if g["tokens"].shape != s["tokens"].shape:
        return CheckResult(
            name,
            "greedy",
            False,
            f"generated shape {tuple(s['tokens'].shape)} != golden {tuple(g['tokens'].shape)}",
            tolerance=tol.describe(),
        )
    n_prompts, n_steps = g["tokens"].shape
    k = max(1, min(g["topk_ids"].shape[-1], s["topk_ids"].shape[-1]) // 2)
    exact = ties = 0
    worst_step_delta = 0.0
    first = None
    for p in range(n_prompts):
        gt, st = g["tokens"][p], s["tokens"][p]
        diff = (gt != st).nonzero()
        upto = int(diff[0, 0]) if len(diff) else n_steps
        # Steps up to and including the divergence saw the same prefix: their
        # distributions must agree (this is where a broken decode path shows).
        steps = min(upto + 1, n_steps)
        step_delta = _topk_deltas(
            g["topk_ids"][p, :steps],
            g["topk_logprobs"][p, :steps].float(),
            s["topk_ids"][p, :steps],
            s["topk_logprobs"][p, :steps].float(),
            k,
        )
        worst_step_delta = max(worst_step_delta, step_delta.max().item())
        bad_steps = (step_delta > tol.logprob_atol).nonzero()
        if len(bad_steps) and first is None:
            step = int(bad_steps[0, 0])
            first = {"prompt": p, "step": step, "reason": f"step logprobs differ by {step_delta[step].item():.3g}"}
        if upto == n_steps:
            exact += 1
            continue
        gap = _golden_gap(g, p, upto, int(gt[upto]), int(st[upto]))
        if gap is not None and gap <= tol.near_tie:
            ties += 1
        elif first is None:
            first = {
                "prompt": p,
                "step": upto,
                "golden_token": int(gt[upto]),
                "scenario_token": int(st[upto]),
                "reason": "not a near-tie: golden logprob gap "
                + (f"{gap:.3g}" if gap is not None else "unknown (token outside the golden's top-k)"),
            }
    metrics = {"prompts": n_prompts, "exact": exact, "near_tie_divergences": ties, "max_step_dlogprob": worst_step_delta}
    summary = f"{exact}/{n_prompts} identical, {ties} near-tie divergences, max step |dlogprob|={worst_step_delta:.2e}"
    if first:
        summary += f"; prompt {first['prompt']} step {first['step']}: {first['reason']}"
    return CheckResult(name, "greedy", first is None, summary, metrics, tol.describe(), first)


def _golden_gap(g: Mapping[str, torch.Tensor], prompt: int, step: int, golden_tok: int, scenario_tok: int) -> float | None:
    ids, lps = g["topk_ids"][prompt, step], g["topk_logprobs"][prompt, step].float()
    where = (ids == scenario_tok).nonzero()
    if not len(where):
        return None
    gap: float = (lps[(ids == golden_tok).nonzero()[0, 0]] - lps[where[0, 0]]).item()
    return gap
