"""Paired comparison of one eval's per-item correctness: golden vs scenario.

The same items are scored in the golden and in the scenario, so the comparison is paired
(docs/DESIGN.md, Contracts: comparison): what matters is which items flipped, not the
two marginal scores. With b items right in the golden and wrong in the scenario and c
the other way round, over n paired items:

  delta     (c - b) / n, the scenario's score minus the golden's
  CI        a Wald interval for a paired difference of proportions, with the
            Agresti-Min adjustment (half an item added to each cell of the 2x2 table)
            so it stays honest when b and c are small or zero
  McNemar   the exact test: under "no difference" each of the b + c discordant items
            flips either way with probability 1/2; two-sided binomial p-value
  detectable  the smallest drop this n can flag at level alpha: k items flipped to
            wrong and none back, k the least count with p < alpha (and k/n > max_drop)

The check fails when the scenario's score is lower by more than max_drop AND McNemar
rejects "no difference" at alpha: a drop smaller than the noise of n items is not a
regression, and a significant but tolerated drop is not either.

It also fails when more responses differ from the golden's than the scenario file
allows (`max_differing_responses`, default 0). Greedy decoding of the same prompt by a
correct engine gives the same text, so a differing response is a flagged difference
even when both answers are wrong: this is what lets an eval at the floor (a tiny model
on real GSM8K) still catch a bug. Engines give no logprobs for `generate`, so a
divergence at a near-tie cannot be told apart from a real one; a setting known to
reorder near-ties is given an allowance in its scenario file instead.

Before a launch, check_pairing makes sure every item pairs with the golden's and that the
check can fail at all (refuse_powerless); after it, accuracy_checks gives one `accuracy`
check per eval, with the flipped and differing items (what a report shows).

An accuracy comparison has no power when no drop it could see is possible: the golden
scores nothing on the items (floor: no room to drop), or the smallest detectable drop
is larger than the golden's score (the room to drop). `accuracy_power_problem` says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

# flipped items kept in a verdict (all are counted)
MAX_FLIPPED_ROWS = 200


class PairingError(ValueError):
    """Golden and scenario items cannot be paired (another item set or other prompts)."""


class PowerlessCheckError(ValueError):
    """An eval check that cannot fail on the items of this run (refuse_powerless)."""


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b and c discordant items."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def paired_delta_ci(n: int, b: int, c: int, confidence: float = 0.95) -> tuple[float, float]:
    """Agresti-Min adjusted Wald interval for (c - b) / n, clipped to [-1, 1]."""
    n2, b2, c2 = n + 2.0, b + 0.5, c + 0.5
    centre = (c2 - b2) / n2
    se = math.sqrt(max((b2 + c2) - (c2 - b2) ** 2 / n2, 0.0)) / n2
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return max(-1.0, centre - z * se), min(1.0, centre + z * se)


def min_flips_for_significance(alpha: float) -> int:
    """The least k with mcnemar_exact_p(k, 0) < alpha: 2 * 0.5**k < alpha."""
    return math.floor(math.log2(2.0 / alpha)) + 1


def smallest_detectable_drop(n: int, alpha: float, max_drop: float = 0.0) -> float | None:
    """The smallest score drop n paired items can flag (all flips one way); None when
    even every item flipping cannot be significant (n too small for alpha)."""
    k = max(min_flips_for_significance(alpha), math.floor(max_drop * n + 1e-9) + 1)
    return k / n if 0 < k <= n else None


def accuracy_power_problem(n: int, golden_right: int, alpha: float, max_drop: float = 0.0) -> str | None:
    """Why no score drop on these n items (golden_right of them right in the golden) can
    fail the accuracy comparison; None when some drop can."""
    detectable = smallest_detectable_drop(n, alpha, max_drop)
    room = golden_right / n if n else 0.0
    if detectable is None:
        return f"{n} items are too few for any drop to be significant at alpha {alpha:g}"
    if golden_right == 0:
        return f"the golden scores 0.000 on these {n} items (floor): there is no room to drop"
    if detectable > room + 1e-12:
        return (
            f"the smallest detectable drop {detectable:.3f} on {n} items is larger than the room to drop "
            f"(the golden's score {room:.3f})"
        )
    return None


@dataclass
class PairedComparison:
    eval: str
    filter: str
    n: int
    golden_score: float
    score: float
    delta: float
    ci95: tuple[float, float]
    flipped_to_wrong: list = field(default_factory=list)  # doc ids: right in the golden, wrong here
    flipped_to_right: list = field(default_factory=list)
    p_value: float = 1.0
    smallest_detectable_drop: float | None = None
    max_drop: float = 0.0
    alpha: float = 0.05
    differing_responses: list = field(default_factory=list)  # doc ids whose response is not the golden's
    max_differing_responses: int = 0
    accuracy_powerless: str | None = None  # accuracy_power_problem(...) of these items
    passed: bool = True

    @property
    def accuracy_passed(self) -> bool:
        return not (-self.delta > self.max_drop + 1e-12 and self.p_value < self.alpha)

    @property
    def responses_passed(self) -> bool:
        return len(self.differing_responses) <= self.max_differing_responses

    def summary(self) -> str:
        lo, hi = self.ci95
        mdd = f"{self.smallest_detectable_drop:.3f}" if self.smallest_detectable_drop is not None else "none (too few items)"
        text = (
            f"{self.filter} {self.score:.3f} vs golden {self.golden_score:.3f} on {self.n} items, "
            f"delta {self.delta:+.3f} [95% CI {lo:+.3f}, {hi:+.3f}], "
            f"{len(self.flipped_to_wrong)} flipped to wrong / {len(self.flipped_to_right)} to right, "
            f"McNemar p={self.p_value:.3g}; fails when the drop > {self.max_drop:g} with p < {self.alpha:g}; "
            f"smallest detectable drop {mdd}; {self.responses_summary()}"
        )
        if self.accuracy_powerless:
            text += f"; the score cannot fail on these items ({self.accuracy_powerless}): only the responses can"
        return text

    def responses_summary(self) -> str:
        differ = len(self.differing_responses)
        if not differ:
            return f"all {self.n} responses identical to the golden's"
        ids = ", ".join(map(str, self.differing_responses[:8])) + ("..." if differ > 8 else "")
        return (
            f"{differ} of {self.n} responses differ from the golden's (items {ids}; "
            f"at most {self.max_differing_responses} allowed)"
        )

    def to_dict(self) -> dict:
        return asdict(self)


def pair_items(golden_items: list[dict], items: list[dict]) -> list[tuple[dict, dict]]:
    """(golden item, scenario item) by doc id. Every scenario item must be in the golden
    with the same prompt: otherwise the golden was made for other items."""
    by_id = {g["doc_id"]: g for g in golden_items}
    missing = [it["doc_id"] for it in items if it["doc_id"] not in by_id]
    if missing:
        raise PairingError(
            f"{len(missing)} item(s) are not in the golden (doc ids {missing[:5]}...): the golden was made with fewer items"
        )
    changed = [it["doc_id"] for it in items if by_id[it["doc_id"]]["prompt_sha256"] != it["prompt_sha256"]]
    if changed:
        raise PairingError(
            f"{len(changed)} item(s) have another prompt than in the golden (doc ids {changed[:5]}...): "
            "task data, few-shot examples or tokenizer changed"
        )
    no_response = [it["doc_id"] for it in items if "response" not in by_id[it["doc_id"]]]
    if no_response:
        raise PairingError(
            f"{len(no_response)} golden item(s) keep no response to compare with "
            f"(doc ids {no_response[:5]}...): the golden predates response comparison"
        )
    return [(by_id[it["doc_id"]], it) for it in items]


def compare_paired(
    name: str,
    golden_items: list[dict],
    items: list[dict],
    filter: str,
    max_drop: float = 0.0,
    alpha: float = 0.05,
    max_differing_responses: int = 0,
) -> PairedComparison:
    pairs = pair_items(golden_items, items)
    n = len(pairs)
    if n == 0:
        raise PairingError(f"eval '{name}' has no items to compare")
    g = [int(a["correct"][filter]) for a, _ in pairs]
    s = [int(b["correct"][filter]) for _, b in pairs]
    to_wrong = [b["doc_id"] for (a, b), gi, si in zip(pairs, g, s) if gi and not si]
    to_right = [b["doc_id"] for (a, b), gi, si in zip(pairs, g, s) if si and not gi]
    delta = (len(to_right) - len(to_wrong)) / n
    p = mcnemar_exact_p(len(to_wrong), len(to_right))
    result = PairedComparison(
        eval=name,
        filter=filter,
        n=n,
        golden_score=sum(g) / n,
        score=sum(s) / n,
        delta=delta,
        ci95=paired_delta_ci(n, len(to_wrong), len(to_right)),
        flipped_to_wrong=to_wrong,
        flipped_to_right=to_right,
        p_value=p,
        smallest_detectable_drop=smallest_detectable_drop(n, alpha, max_drop),
        max_drop=max_drop,
        alpha=alpha,
        differing_responses=[b["doc_id"] for a, b in pairs if a.get("response") != b.get("response")],
        max_differing_responses=max_differing_responses,
        accuracy_powerless=accuracy_power_problem(n, sum(g), alpha, max_drop),
    )
    result.passed = result.accuracy_passed and result.responses_passed
    return result


def check_pairing(prepared: list, golden: dict[str, dict], gate: str | None = None) -> None:
    """Before launching: every item about to be scored must be in the golden with the
    same prompt (raises PairingError), so a stale golden costs no engine start; and the
    check must be able to fail (in `gate`: its score too, refuse_powerless)."""
    for p in prepared:
        name = p.workload["name"].removeprefix("eval_")
        pairs = pair_items(golden[name]["items"], p.items)
        refuse_powerless(p.eval_def, [g for g, _ in pairs], gate)


def refuse_powerless(eval_def, golden_items: list[dict], gate: str | None = None) -> None:
    """A check that cannot fail is no check: when the score cannot drop detectably on
    these items and the scenario file lets every response differ, raise
    PowerlessCheckError (an `error` before launch) instead of a pass that proves nothing.
    A gate (`pr`, `nightly`) holds scores that can fail: there a powerless score is refused
    too, unless the eval says why it stays (`score_cannot_fail`), as summary.md names it."""
    n = len(golden_items)
    right = sum(int(g["correct"][eval_def.filter]) for g in golden_items)
    problem = accuracy_power_problem(n, right, eval_def.alpha, eval_def.max_drop)
    if problem and eval_def.max_differing_responses >= n:
        raise PowerlessCheckError(
            f"eval '{eval_def.name}' cannot fail on these {n} items: {problem}, and the scenario file lets all of "
            f"their responses differ (max_differing_responses: {eval_def.max_differing_responses}); lower "
            f"max_differing_responses, give it more items or a task the model scores on, or take the scenario "
            f"out of this gate"
        )
    if problem and gate and not eval_def.score_cannot_fail:
        raise PowerlessCheckError(
            f"eval '{eval_def.name}' is in the {gate} gate, and its score cannot fail on these {n} items: {problem}. "
            f"A gate holds checks that can fail: give it more items or a model that scores on the task (the trained "
            f"tiny models, `harness docs evals`), take the scenario out of the {gate} gate, or say in the eval why it "
            f"stays (`score_cannot_fail: WHY`: its responses alone are then held)"
        )


def accuracy_checks(eval_defs, golden: dict[str, dict], results: dict[str, dict]) -> list[dict]:
    """One `accuracy` check per eval. The items were paired with the golden before the
    launch (check_pairing), so a PairingError here would be a harness bug."""
    checks = []
    for e in eval_defs:
        g, r = golden[e.name], results[e.name]
        cmp = compare_paired(e.name, g["items"], r["items"], e.filter, e.max_drop, e.alpha, e.max_differing_responses)
        other = {f"score_{f}": s for f, s in r["scores"].items()}
        other.update({f"golden_score_{f}": s for f, s in g["scores"].items()})
        checks.append(
            {
                "name": f"eval:{e.name}",
                "kind": "accuracy",
                "passed": cmp.passed,
                "summary": f"{e.task}: " + cmp.summary(),
                "metrics": {
                    "score": cmp.score,
                    "golden_score": cmp.golden_score,
                    "delta": cmp.delta,
                    "ci95_low": cmp.ci95[0],
                    "ci95_high": cmp.ci95[1],
                    "p_value": cmp.p_value,
                    "n": cmp.n,
                    "flipped_to_wrong": len(cmp.flipped_to_wrong),
                    "flipped_to_right": len(cmp.flipped_to_right),
                    "smallest_detectable_drop": cmp.smallest_detectable_drop,
                    "differing_responses": len(cmp.differing_responses),
                    "max_differing_responses": e.max_differing_responses,
                    **other,
                },
                "tolerance": (
                    f"fail when drop > {e.max_drop:g} and McNemar p < {e.alpha:g} ({e.filter}), "
                    f"or more than {e.max_differing_responses} responses differ from the golden's"
                ),
                "flipped": _flipped_rows(cmp, g["items"], r["items"], e.filter),
                "differing_responses": _differing_rows(cmp, g["items"], r["items"]),
                "warning": cmp.accuracy_powerless and f"the score cannot fail here: {cmp.accuracy_powerless}",
            }
        )
        checks[-1]["where"] = _where(checks[-1])
    return checks


def _where(check: dict) -> str | None:
    """`eval:geo: items 3, 7, 12 flipped to wrong`: the report's where column for a failed
    accuracy check (reports read it, they do not rebuild it)."""
    if check["passed"]:
        return None
    ids = [r["doc_id"] for r in check["flipped"] if r["flipped"] == "to wrong"]
    what = "flipped to wrong"
    # the score held; the responses are what failed
    if not ids:
        ids, what = [r["doc_id"] for r in check["differing_responses"]], "responded otherwise than the golden"
    more = "..." if len(ids) > 8 else ""
    return f"{check['name']}: items {', '.join(map(str, ids[:8]))}{more} {what}"


def _differing_rows(cmp, golden_items: list[dict], items: list[dict]) -> list[dict]:
    """Where the responses first part: the item, the golden's and this run's text."""
    gold = {it["doc_id"]: it for it in golden_items}
    here = {it["doc_id"]: it for it in items}
    rows = []
    for d in cmp.differing_responses[:MAX_FLIPPED_ROWS]:
        a, b = gold[d].get("response") or "", here[d].get("response") or ""
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        rows.append(
            {
                "doc_id": d,
                "first_differing_char": at,
                "golden_response": a[max(0, at - 40) : at + 80],
                "response": b[max(0, at - 40) : at + 80],
            }
        )
    return rows


def _flipped_rows(cmp, golden_items: list[dict], items: list[dict], filter: str) -> list[dict]:
    """The flipped items with what each side answered: where an accuracy failure is."""
    gold = {it["doc_id"]: it for it in golden_items}
    here = {it["doc_id"]: it for it in items}
    rows = [(d, "to wrong") for d in cmp.flipped_to_wrong] + [(d, "to right") for d in cmp.flipped_to_right]
    return [
        {
            "doc_id": d,
            "flipped": way,
            "target": here[d].get("target"),
            "golden_answer": gold[d].get("answers", {}).get(filter),
            "answer": here[d].get("answers", {}).get(filter),
            "response": (here[d].get("response") or "")[:200],
        }
        for d, way in rows[:MAX_FLIPPED_ROWS]
    ]
