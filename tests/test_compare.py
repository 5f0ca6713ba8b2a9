"""The comparison rules on synthetic outputs: tolerances, first divergence, the
near-tie rule for greedy decoding, and the bound for tokens missing from a top-k."""

import torch

from harness.run.compare.numeric import compare_greedy, compare_logprobs
from harness.run.compare.tolerances import tolerance_for
from tests.kit.logprobs import decisive_flips

TOL = tolerance_for("float32")
K = 8


def logprob_outputs(logits: torch.Tensor, offsets: list[int]) -> dict:
    lp = logits.log_softmax(-1)
    values, ids = lp.topk(K, -1)
    return {"topk_ids": ids, "topk_logprobs": values, "offsets": torch.tensor(offsets)}


def greedy_outputs(step_logits: torch.Tensor, tokens: torch.Tensor | None = None) -> dict:
    lp = step_logits.log_softmax(-1)  # [P, N, V]
    values, ids = lp.topk(K, -1)
    return {"tokens": ids[..., 0] if tokens is None else tokens, "topk_ids": ids, "topk_logprobs": values}


def base_logits(rows=20, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(rows, vocab, generator=g)


def test_identical_and_noise_level_pass():
    logits = base_logits()
    g = logprob_outputs(logits, [0, 12, 20])
    assert compare_logprobs("x", g, logprob_outputs(logits, [0, 12, 20]), TOL).passed
    noisy = logits + 1e-6 * torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    result = compare_logprobs("x", g, logprob_outputs(noisy, [0, 12, 20]), TOL)
    assert result.passed and result.metrics["max_abs_dlogprob"] < 1e-5
    assert result.tolerance == TOL.describe()  # every verdict prints the bounds it used


def test_divergence_is_located_in_prompt_and_position():
    logits = base_logits()
    bad = logits.clone()
    bad[15] += torch.linspace(0, 1, bad.shape[1])  # a real numeric error at row 15
    result = compare_logprobs("x", logprob_outputs(logits, [0, 12, 20]), logprob_outputs(bad, [0, 12, 20]), TOL)
    assert not result.passed
    assert result.first_divergence is not None
    assert result.first_divergence["prompt"] == 1 and result.first_divergence["position"] == 3
    assert result.metrics["bad_positions"] == 1
    assert "prompt 1 position 3" in result.summary
    assert max(result.per_position) == result.per_position[15]


def test_token_missing_from_scenario_topk_counts_as_a_large_delta():
    logits = base_logits()
    bad = logits.clone()
    top = logits[4].argmax()
    bad[4, top] -= 50  # the golden's top-1 falls out of the scenario's top-k
    result = compare_logprobs("x", logprob_outputs(logits, [0, 20]), logprob_outputs(bad, [0, 20]), TOL)
    assert result.first_divergence is not None
    assert not result.passed and result.first_divergence["position"] == 4
    assert result.metrics["max_abs_dlogprob"] > 1


def test_top1_swap_tolerated_only_at_a_near_tie():
    logits = base_logits(rows=4)
    a, b = logits[2].topk(2).indices
    tie = logits.clone()
    tie[2, b] = tie[2, a] - 1e-5  # near-tie in the golden
    swapped = tie.clone()
    swapped[2, b] = tie[2, a] + 1e-5  # the scenario flips it by 2e-5
    result = compare_logprobs("x", logprob_outputs(tie, [0, 4]), logprob_outputs(swapped, [0, 4]), TOL)
    assert result.passed, result.summary
    assert result.metrics["top1_agreement"] < 1.0


def test_greedy_identical_and_near_tie_divergence_pass():
    steps = 3 * torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(3))
    golden = greedy_outputs(steps)
    assert compare_greedy("g", golden, greedy_outputs(steps), TOL).passed
    # make step 3 of prompt 1 a near-tie and let the scenario take the other branch
    a, b = steps[1, 3].topk(2).indices
    steps[1, 3, b] = steps[1, 3, a] - 1e-4
    golden = greedy_outputs(steps)
    tokens = golden["tokens"].clone()
    tokens[1, 3:] = b  # diverges at the tie, then anything goes
    scenario = greedy_outputs(steps, tokens)
    result = compare_greedy("g", golden, scenario, TOL)
    assert result.passed, result.summary
    assert result.metrics["near_tie_divergences"] == 1 and result.metrics["exact"] == 1


def test_greedy_divergence_without_a_tie_fails_with_its_step():
    steps = 3 * torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(4))
    golden = greedy_outputs(steps)
    tokens = golden["tokens"].clone()
    second = steps[0, 2].topk(2).indices[1]
    tokens[0, 2:] = second
    result = compare_greedy("g", golden, greedy_outputs(steps, tokens), TOL)
    assert not result.passed
    assert result.first_divergence is not None
    assert result.first_divergence["prompt"] == 0 and result.first_divergence["step"] == 2
    assert "not a near-tie" in result.first_divergence["reason"]


def test_greedy_same_tokens_but_drifting_step_logprobs_fail():
    steps = 3 * torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(5))
    drift = steps.clone()
    drift[0, 4] *= 1.05  # same argmax, different distribution: a broken decode step
    result = compare_greedy("g", greedy_outputs(steps), greedy_outputs(drift), TOL)
    assert result.first_divergence is not None
    assert not result.passed and result.first_divergence["step"] == 4


def test_tolerances_by_dtype_and_override():
    assert tolerance_for("bfloat16").logprob_atol > tolerance_for("float32").logprob_atol
    assert tolerance_for("float32", {"logprob_atol": 0.5, "kl_max": None}).logprob_atol == 0.5


def test_top1_min_is_the_share_of_decisive_flips_a_suite_tolerates():
    """top1_min must be able to change a verdict: it once could not, as every decisive
    flip counted as a bad position. Now the flips fail the check only below top1_min."""
    golden, scenario = decisive_flips(rows=20, flipped=1)  # 19/20 decisive positions agree
    bf16 = tolerance_for("bfloat16")  # top1_min 0.9
    tolerant = compare_logprobs("x", golden, scenario, bf16)
    assert tolerant.passed, tolerant.summary
    assert tolerant.metrics["decisive_top1_flips"] == 1 and tolerant.metrics["max_abs_dlogprob"] < bf16.logprob_atol
    assert "1 decisive top-1 flips: 0.950 agree, 0.9 needed" in tolerant.summary
    strict = compare_logprobs("x", golden, scenario, tolerance_for("bfloat16", {"top1_min": 0.97}))
    assert strict.first_divergence is not None
    assert not strict.passed and strict.first_divergence["position"] == 0
    assert strict.metrics["bad_positions"] == 1
    assert not compare_logprobs("x", *decisive_flips(rows=20, flipped=3), bf16).passed  # 0.85 < 0.9


def test_float32_tolerates_no_decisive_flip():
    golden, scenario = decisive_flips(rows=20, flipped=1)
    assert not compare_logprobs("x", golden, scenario, TOL).passed
