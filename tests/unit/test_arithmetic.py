"""The reasoning chapter's addition task (transformer_lib.arithmetic) against Python's own sums."""

from __future__ import annotations

import random

import pytest

from transformer_lib import arithmetic as ar


def test_every_scratchpad_step_is_a_right_column_sum_and_the_carries_chain():
    for a, b in ar.random_problems(2000, (1, 9), random.Random(0)) + [(0, 0), (999, 1), (5, 12345)]:
        pad = ar.scratchpad(a, b)
        assert pad.endswith(f";={a + b}.") and set(pad) <= set(ar.ALPHABET)
        steps = pad[: -len(f";={a + b}.")].split(";")
        assert len(steps) == max(len(str(a)), len(str(b)))  # one step per column of the longer number
        carry = 0
        for i, step in enumerate(steps):
            left, total = step.split("=")
            x, y, c = map(int, left.split("+"))
            assert (x, y) == ((a // 10**i) % 10, (b // 10**i) % 10) and c == carry and int(total) == x + y + c
            carry = int(total) // 10
        assert ar.is_right(ar.problem(a, b), pad) and ar.steps_right(ar.problem(a, b), pad)
        assert ar.is_right(ar.problem(a, b), ar.direct(a, b)) and ar.direct(a, b) == f"{a + b}."


def test_the_final_answer_is_read_after_the_last_equals_sign_up_to_the_end():
    assert ar.final_answer("834.") == 834
    assert ar.final_answer("8+6+0=14;7+5+1=13;4+3+1=8;=834.") == 834
    assert ar.final_answer("834") is None  # cut short: never ended
    assert ar.final_answer("8+6+0=14;=.") is None  # no number
    assert ar.final_answer("83;4.") is None
    assert ar.final_answer("834.99") == 834  # what follows the end does not count


def test_the_answer_checker_and_the_step_checker_disagree_where_they_should():
    prompt = ar.problem(478, 356)
    right = ar.scratchpad(478, 356)
    assert right == "8+6+0=14;7+5+1=13;4+3+1=8;=834."
    lucky = "8+6+0=13;7+5+1=13;4+3+1=8;=834."  # a wrong step, the right sum
    assert ar.is_right(prompt, lucky) and not ar.steps_right(prompt, lucky)
    slip = "8+6+0=14;7+5+1=13;4+3+1=8;=824."  # every step right, the sum copied wrong
    assert not ar.is_right(prompt, slip) and not ar.steps_right(prompt, slip)
    assert not ar.is_right(prompt, "835.") and not ar.steps_right(prompt, "834.")
    short = "8+6+0=14;7+5+1=13;=834."  # a column left out
    assert ar.is_right(prompt, short) and not ar.steps_right(prompt, short)


def test_random_problems_have_the_digits_asked_for():
    pairs = ar.random_problems(500, (2, 4), random.Random(1))
    lengths = {len(str(n)) for pair in pairs for n in pair}
    assert lengths == {2, 3, 4}
    assert all(len(str(n)) == 3 for pair in ar.random_problems(100, 3, random.Random(2)) for n in pair)
    assert ar.random_problems(3, 2, random.Random(5)) == ar.random_problems(3, 2, random.Random(5))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ar.problem(-1, 2), "a must be a whole number of 0 or more, got -1"),
        (lambda: ar.scratchpad(1, 2.5), "b must be a whole number of 0 or more, got 2.5"),
        (lambda: ar.direct(True, 2), "got True"),
        (lambda: ar.random_problems(3, 0, random.Random(0)), "digits must be at least 1"),
        (lambda: ar.random_problems(3, (4, 2), random.Random(0)), r"got \(4, 2\)"),
        (lambda: ar.is_right("12+3", "15."), "a problem is written 'a\\+b=', got '12\\+3'"),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
