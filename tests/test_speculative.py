"""N-gram drafts and their verification (harness/engines/reference/speculative.py): the
tokens a verification step emits are the model's greedy choices, whatever was drafted."""

from harness.engines.reference.speculative import emitted, propose


def test_drafts_follow_the_latest_earlier_occurrence_of_the_longest_tail():
    assert propose([1, 2, 3, 9, 1, 2, 3]) == [9, 1]  # "1 2 3" was followed by "9 1"
    assert propose([4, 7, 8, 4, 5, 4]) == [5, 4]  # only "4" recurs: its latest earlier place
    assert propose([5, 6, 7]) == []  # nothing recurs: no drafts
    assert propose([1, 2, 3, 1], k=1) == [2]


def test_a_step_emits_the_choices_up_to_the_first_rejected_draft_and_the_bonus():
    assert emitted([4, 5], [4, 5, 6]) == [4, 5, 6]  # both kept, then the bonus
    assert emitted([4, 5], [4, 7, 6]) == [4, 7]  # the second rejected: the model's 7 instead
    assert emitted([4, 5], [3, 7, 6]) == [3]  # the first rejected
    assert emitted([], [3]) == [3]  # no drafts: a plain decode step


def test_the_fault_keeps_a_wrong_first_draft():
    assert emitted([4, 5], [3, 5, 6], trust_first_draft=True) == [4, 5, 6]
    assert emitted([4, 5], [4, 5, 6], trust_first_draft=True) == [4, 5, 6]  # a right draft: no harm
