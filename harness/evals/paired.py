"""Paired comparison of one eval's per-item correctness: golden vs scenario.

The same items are scored in the golden and in the scenario, so the comparison is
paired (DESIGN.md, Comparison): what matters is which items flipped, not the two
marginal scores. With b items right in the golden and wrong in the scenario and c the
other way round, over n paired items:

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

An accuracy comparison has no power when no drop it could see is possible: the golden
scores nothing on the items (floor: no room to drop), or the smallest detectable drop
is larger than the golden's score (the room to drop). `accuracy_power_problem` says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist


class PairingError(ValueError):
    """Golden and scenario items cannot be paired (another item set or other prompts)."""


class PowerlessCheckError(ValueError):
    """An eval check that cannot fail on the items of this run (harness/evals/check.py)."""


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
        return (f"the smallest detectable drop {detectable:.3f} on {n} items is larger than the room to drop "
                f"(the golden's score {room:.3f})")
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
        text = (f"{self.filter} {self.score:.3f} vs golden {self.golden_score:.3f} on {self.n} items, "
                f"delta {self.delta:+.3f} [95% CI {lo:+.3f}, {hi:+.3f}], "
                f"{len(self.flipped_to_wrong)} flipped to wrong / {len(self.flipped_to_right)} to right, "
                f"McNemar p={self.p_value:.3g}; fails when the drop > {self.max_drop:g} with p < {self.alpha:g}; "
                f"smallest detectable drop {mdd}; {self.responses_summary()}")
        if self.accuracy_powerless:
            text += f"; the score cannot fail on these items ({self.accuracy_powerless}): only the responses can"
        return text

    def responses_summary(self) -> str:
        differ = len(self.differing_responses)
        if not differ:
            return f"all {self.n} responses identical to the golden's"
        ids = ", ".join(map(str, self.differing_responses[:8])) + ("..." if differ > 8 else "")
        return (f"{differ} of {self.n} responses differ from the golden's (items {ids}; "
                f"at most {self.max_differing_responses} allowed)")

    def to_dict(self) -> dict:
        return asdict(self)


def pair_items(golden_items: list[dict], items: list[dict]) -> list[tuple[dict, dict]]:
    """(golden item, scenario item) by doc id. Every scenario item must be in the golden
    with the same prompt: otherwise the golden was made for other items."""
    by_id = {g["doc_id"]: g for g in golden_items}
    missing = [it["doc_id"] for it in items if it["doc_id"] not in by_id]
    if missing:
        raise PairingError(f"{len(missing)} item(s) are not in the golden (doc ids {missing[:5]}...): the golden "
                           "was made with fewer items")
    changed = [it["doc_id"] for it in items if by_id[it["doc_id"]]["prompt_sha256"] != it["prompt_sha256"]]
    if changed:
        raise PairingError(f"{len(changed)} item(s) have another prompt than in the golden (doc ids {changed[:5]}...): "
                           "task data, few-shot examples or tokenizer changed")
    no_response = [it["doc_id"] for it in items if "response" not in by_id[it["doc_id"]]]
    if no_response:
        raise PairingError(f"{len(no_response)} golden item(s) keep no response to compare with "
                           f"(doc ids {no_response[:5]}...): the golden predates response comparison")
    return [(by_id[it["doc_id"]], it) for it in items]


def compare_paired(name: str, golden_items: list[dict], items: list[dict], filter: str,
                   max_drop: float = 0.0, alpha: float = 0.05, max_differing_responses: int = 0) -> PairedComparison:
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
        eval=name, filter=filter, n=n, golden_score=sum(g) / n, score=sum(s) / n, delta=delta,
        ci95=paired_delta_ci(n, len(to_wrong), len(to_right)),
        flipped_to_wrong=to_wrong, flipped_to_right=to_right, p_value=p,
        smallest_detectable_drop=smallest_detectable_drop(n, alpha, max_drop),
        max_drop=max_drop, alpha=alpha,
        differing_responses=[b["doc_id"] for a, b in pairs if a.get("response") != b.get("response")],
        max_differing_responses=max_differing_responses,
        accuracy_powerless=accuracy_power_problem(n, sum(g), alpha, max_drop),
    )
    result.passed = result.accuracy_passed and result.responses_passed
    return result
