"""Batch composition (harness/contract/batching.py): the submissions each mode makes, and
that restoring puts every prompt's result back in its place with the fillers dropped."""

import pytest

from harness.contract import batching

PROMPTS = [[0, 5, 6, 7], [0, 8], [0, 9, 10, 11, 12, 13], [0, 14, 15]]


def test_all_is_one_submission_in_order():
    (sub,) = batching.compose(PROMPTS, "all")
    assert sub.prompts == PROMPTS and sub.origin == [0, 1, 2, 3]


def test_one_is_a_submission_per_prompt():
    subs = batching.compose(PROMPTS, "one")
    assert [s.prompts for s in subs] == [[p] for p in PROMPTS] and [s.origin for s in subs] == [[0], [1], [2], [3]]


def test_mixed_shuffles_among_fillers_that_are_not_workload_prompts():
    (sub,) = batching.compose(PROMPTS, "mixed")
    real = [i for i in sub.origin if i is not None]
    assert sorted(real) == [0, 1, 2, 3] and real != [0, 1, 2, 3]  # every prompt once, another order
    fillers = [p for p, i in zip(sub.prompts, sub.origin) if i is None]
    assert len(fillers) == len(PROMPTS) and not any(f in PROMPTS for f in fillers)
    assert all(f[0] == 0 for f in fillers)  # BOS first, like the prompts
    assert batching.compose(PROMPTS, "mixed") == [sub]  # fixed seed: every engine composes the same batch


@pytest.mark.parametrize("mode", batching.MODES)
def test_restore_gives_the_workload_order_back(mode):
    subs = batching.compose(PROMPTS, mode)
    # each submission answers with its prompts themselves, in its own order
    answered = [[tuple(p) for p in s.prompts] for s in subs]
    assert batching.restore(answered, subs, len(PROMPTS)) == [tuple(p) for p in PROMPTS]


def test_a_lost_result_is_an_error_not_a_gap():
    subs = batching.compose(PROMPTS, "one")
    with pytest.raises(RuntimeError, match=r"prompts \[3\]"):
        batching.restore([["a"], ["b"], ["c"]], subs, len(PROMPTS))
    with pytest.raises(ValueError, match="unknown batch mode"):
        batching.compose(PROMPTS, "some")
