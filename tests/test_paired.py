"""The paired accuracy comparison (harness/run/evals/paired.py)."""

import pytest

from harness.run.evals.paired import (
    PairingError,
    accuracy_power_problem,
    compare_paired,
    mcnemar_exact_p,
    min_flips_for_significance,
    paired_delta_ci,
    smallest_detectable_drop,
)
from tests.kit.present import present


def items(correct: list[int], sha: str = "s", responses: list[str] | None = None) -> list[dict]:
    """Items scored as `correct`; the same response text for every item unless given
    (the score tests below isolate the McNemar logic from the response comparison)."""
    responses = responses or [" 7 + 5 = 12\n#### 12"] * len(correct)
    return [
        {"doc_id": i, "prompt_sha256": sha, "correct": {"flexible-extract": c, "strict-match": c}, "response": r}
        for i, (c, r) in enumerate(zip(correct, responses))
    ]


def test_mcnemar_matches_the_binomial_test():
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy is the independent reference (comes with lm-eval)")
    for b, c in [(0, 6), (1, 9), (3, 4), (10, 2), (0, 0), (7, 7)]:
        expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
        assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-9)


def test_six_one_way_flips_are_the_least_significant_count_at_5_percent():
    assert min_flips_for_significance(0.05) == 6
    assert mcnemar_exact_p(5, 0) > 0.05 > mcnemar_exact_p(6, 0)
    assert smallest_detectable_drop(100, 0.05) == pytest.approx(0.06)
    assert smallest_detectable_drop(100, 0.05, max_drop=0.1) == pytest.approx(0.11)
    assert smallest_detectable_drop(4, 0.05) is None  # 4 items can never be significant


def test_ci_contains_the_delta_and_is_symmetric_without_flips():
    lo, hi = paired_delta_ci(100, 0, 0)
    assert lo == pytest.approx(-hi) and 0 < hi < 0.03
    lo, hi = paired_delta_ci(100, 20, 2)
    assert lo < -0.18 < hi < 0


def test_a_significant_drop_fails_and_names_the_flipped_items():
    golden = items([1] * 30 + [0] * 10)
    scenario = items([0] * 8 + [1] * 22 + [1] + [0] * 9)  # 8 right->wrong, 1 wrong->right
    r = compare_paired("geo", golden, scenario, "flexible-extract")
    assert not r.passed
    assert r.flipped_to_wrong == list(range(8)) and r.flipped_to_right == [30]
    assert r.delta == pytest.approx(-7 / 40) and r.p_value < 0.05
    assert "8 flipped to wrong / 1 to right" in r.summary()


def test_noise_sized_drops_and_tolerated_drops_pass():
    golden = items([1] * 20)
    assert compare_paired("t", golden, items([0] * 3 + [1] * 17), "strict-match").passed  # p = 0.25
    big = compare_paired("t", items([1] * 100), items([0] * 8 + [1] * 92), "strict-match", max_drop=0.1)
    assert big.p_value < 0.05 and big.passed  # significant, but within the configured bound
    better = compare_paired("t", items([0] * 20), items([1] * 20), "strict-match")
    assert better.passed and better.delta == 1.0


def test_items_must_pair_with_the_golden():
    with pytest.raises(PairingError, match="not in the golden"):
        compare_paired("t", items([1] * 3), items([1] * 5), "strict-match")
    with pytest.raises(PairingError, match="another prompt"):
        compare_paired("t", items([1] * 3), items([1] * 3, sha="other"), "strict-match")
    subset = compare_paired("t", items([1] * 10), items([1] * 4), "strict-match")  # a PR slice of a nightly golden
    assert subset.n == 4 and subset.passed


def test_a_differing_response_fails_the_check_even_at_the_floor():
    # the llama-gsm8k PR slice: 16 items, the golden scores 0.000, so no score drop is possible
    golden = items([0] * 16, responses=[f" {i}\n#### {i}" for i in range(16)])
    same = compare_paired("gsm8k", golden, items([0] * 16, responses=[f" {i}\n#### {i}" for i in range(16)]), "strict-match")
    assert same.passed and same.differing_responses == [] and "all 16 responses identical" in same.summary()
    off = [f" {i}\n#### {i}" for i in range(16)]
    off[3], off[9] = " 3\n#### 4", " nine"
    broken = compare_paired("gsm8k", golden, items([0] * 16, responses=off), "strict-match")
    assert broken.score == broken.golden_score == 0.0 and broken.accuracy_passed
    assert not broken.passed and broken.differing_responses == [3, 9]
    assert "2 of 16 responses differ from the golden's (items 3, 9; at most 0 allowed)" in broken.summary()
    allowed = compare_paired("gsm8k", golden, items([0] * 16, responses=off), "strict-match", max_differing_responses=2)
    assert allowed.passed


def test_a_score_that_cannot_drop_says_so():
    assert "floor" in present(accuracy_power_problem(16, 0, 0.05))  # llama-gsm8k's PR slice
    assert "0.375" in present(accuracy_power_problem(16, 4, 0.05))  # 6 of 16 must flip; only 4 can
    assert accuracy_power_problem(16, 6, 0.05) is None
    assert accuracy_power_problem(64, 64, 0.05) is None  # at the ceiling every drop is room (llama-evals geo)
    assert "too few" in present(accuracy_power_problem(4, 4, 0.05))
    floor = compare_paired("gsm8k", items([0] * 16), items([0] * 16), "strict-match")
    assert floor.passed and "the score cannot fail on these items" in floor.summary()


def test_a_golden_without_responses_cannot_be_paired():
    golden = [{k: v for k, v in it.items() if k != "response"} for it in items([1] * 3)]
    with pytest.raises(PairingError, match="keep no response"):
        compare_paired("t", golden, items([1] * 3), "strict-match")


def test_a_failed_accuracy_check_says_where_for_the_report():
    """The report's where column reads the check's own `where` (reports read verdict fields)."""
    from harness.run.evals.paired import _where

    base = {"name": "eval:geo", "passed": False, "differing_responses": [{"doc_id": 4}]}
    assert (
        _where({**base, "flipped": [{"doc_id": 3, "flipped": "to wrong"}, {"doc_id": 5, "flipped": "to right"}]})
        == "eval:geo: items 3 flipped to wrong"
    )
    assert _where({**base, "flipped": []}) == "eval:geo: items 4 responded otherwise than the golden"
    assert _where({**base, "passed": True, "flipped": []}) is None
