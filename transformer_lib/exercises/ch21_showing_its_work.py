"""Checkers for the exercises of the chapter "A model that shows its work" (pass@k's unbiased estimate by hand, the
majority vote by hand, and checking a scratchpad step by step by hand)."""

from __future__ import annotations

import math
from collections.abc import Callable

from .. import alignment, arithmetic
from ._common import _TODO, CORRECT, Wrong, checker, measure, run

__all__ = ["check_pass_at_k", "check_majority_vote", "check_steps", "check_greedy_accuracy"]


# ---- pass@k's unbiased estimate ----------------------------------------------------------------------------------

# (n samples, c right, k): k = 1, k = n, no right sample, fewer wrong samples than k (the estimate is 1), and a large n
# whose factorials overflow a float (171! > 1.8e308)
_PASS_CASES = ((10, 3, 1), (16, 5, 4), (16, 0, 8), (12, 10, 3), (20, 7, 20), (8, 8, 2), (200, 13, 10), (500, 2, 100))


def _pass(n: int, c: int, k: int) -> float:
    return alignment.pass_at_k(n, c, k).item()


_PASS_MISTAKES: tuple[tuple[str, Callable[[int, int, int], float], str], ...] = (
    (
        "with-replacement",
        lambda n, c, k: 1 - (1 - c / n) ** k,
        "you used 1 - (1 - c/n)^k, the chance for k draws *with* replacement from the n samples: it is biased (below "
        "the truth for small n). Draw the k without replacement: 1 - C(n - c, k) / C(n, k)",
    ),
    (
        "share-right",
        lambda n, c, k: c / n,
        "you returned c / n, the share of right samples: that is pass@1, whatever k is. pass@k asks whether any of k "
        "samples is right",
    ),
    (
        "k-times-share",
        lambda n, c, k: min(1.0, k * c / n),
        "you multiplied the share of right samples by k: the chances of k draws do not add up like that. Count the "
        "sets of k with no right sample: C(n - c, k) of the C(n, k)",
    ),
    (
        "none-right",
        lambda n, c, k: math.comb(n - c, k) / math.comb(n, k),
        "you returned C(n - c, k) / C(n, k), the chance that *none* of the k is right: pass@k is one minus it",
    ),
    (
        "all-right",
        lambda n, c, k: math.comb(c, k) / math.comb(n, k),
        "you returned C(c, k) / C(n, k), the chance that *every* one of the k is right: pass@k needs only one, so it "
        "is 1 - C(n - c, k) / C(n, k)",
    ),
    (
        "choose-wrong-right",
        lambda n, c, k: 1 - math.comb(c, k) / math.comb(n, k),
        "you used C(c, k) on top, the sets of k right samples: the sets that fail are those of k *wrong* samples, "
        "C(n - c, k)",
    ),
)


def _close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)  # float32's rounding passes; every mistake is further off


@checker
def check_pass_at_k(fn: Callable) -> str:
    """fn(n, c, k) -> pass@k's unbiased estimate from n samples of which c are right: a number between 0 and 1; by
    hand (not tl.alignment.pass_at_k)."""
    values = []
    for n, c, k in _PASS_CASES:
        case = f"n = {n} samples, c = {c} right, k = {k}"
        try:
            got = run(fn, n, c, k, case=case, forbidden=(alignment.pass_at_k,), names="tl.alignment.pass_at_k")
        except Wrong as wrong:
            if wrong.verdict.mistake == "raised" and "OverflowError" in wrong.verdict and n > 170:
                raise Wrong(
                    "overflow",
                    f"On {case} your code overflowed a float: {n}! is far beyond the largest float (about 1.8e308). "
                    "Use math.comb (whole numbers, exact), or the product of (1 - k / i) for i from n - c + 1 to n",
                ) from None
            raise
        try:
            values.append(float(got))
        except (TypeError, ValueError):
            raise Wrong("not-a-number", f"On {case} you returned {got!r}: return a number between 0 and 1.") from None
    wrong = [(x, v) for x, v in zip(_PASS_CASES, values) if not _close(v, _pass(*x))]
    if not wrong:
        return CORRECT
    (n, c, k), value = wrong[0]
    case = f"n = {n} samples, c = {c} right, k = {k}"
    for mistake, mistaken, hint in _PASS_MISTAKES:  # the mistake that gives every number the answer gave
        if all(_close(v, mistaken(*x)) for x, v in zip(_PASS_CASES, values)):
            raise Wrong(mistake, f"On {case}, {hint}.")
    raise Wrong("wrong", f"On {case} you returned {value:.6g}; pass@k is {_pass(n, c, k):.6g} there.")


# ---- the majority vote -------------------------------------------------------------------------------------------

# each a list of answers (sums, None where a sample wrote none), and what the vote is; ties go to the tied answer given
# first; 0 is an answer like any other
_VOTE_CASES = (
    ([834, 834, 835, None, 834], "one answer given most often"),
    ([None, None, 12, None], "one answer among many samples that wrote none"),
    ([7, 9, 7, 9], "a tie, 7 given first"),
    ([51, 15, 15, 51, 3, None, None, None], "a tie, 51 given first, and more samples that wrote none"),
    ([0, 10, 0, 10, 10], "0 among the answers"),
    ([0, 5, 0], "0 given most often"),
    ([None, None], "no sample wrote an answer"),
    ([42], "one sample"),
    ([1000, 999, None, 1000, 999], "a tie, the larger given first"),
)


def _vote(answers: list) -> object:
    counts: dict = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return None
    return next(a for a in answers if a is not None and counts[a] == max(counts.values()))


def _vote_counting_none(answers: list) -> object:
    return max(answers, key=answers.count)  # the first of the most frequent, None counted


def _vote_tie_last(answers: list) -> object:
    given = [a for a in answers if a is not None]
    return max(reversed(given), key=given.count) if given else None


def _vote_tie_smallest(answers: list) -> object:
    given = [a for a in answers if a is not None]
    return min(sorted(set(given)), key=lambda a: (-given.count(a), a)) if given else None


def _vote_dropping_zero(answers: list) -> object:
    given = [a for a in answers if a]
    return max(given, key=given.count) if given else None


def _vote_count(answers: list) -> object:
    given = [a for a in answers if a is not None]
    return max(given.count(a) for a in given) if given else None


_VOTE_MISTAKES: tuple[tuple[str, Callable, str], ...] = (
    (
        "none-counted",
        _vote_counting_none,
        "you counted None (a sample that wrote no answer) as an answer, and it won: leave it out of the count",
    ),
    (
        "zero-dropped",
        _vote_dropping_zero,
        "you dropped the answer 0 along with None (`if a` is False for 0): test `a is not None` instead",
    ),
    (
        "tie-last",
        _vote_tie_last,
        "a tie went to the tied answer given last: the book's rule gives it to the one given first",
    ),
    (
        "tie-smallest",
        _vote_tie_smallest,
        "a tie went to the smallest tied answer: the book's rule gives it to the one given first, whatever its value",
    ),
    (
        "count-returned",
        _vote_count,
        "you returned how many times the winner was given: return the winning answer itself",
    ),
    (
        "first-answer",
        lambda answers: next((a for a in answers if a is not None), None),
        "you returned the first answer given: the vote is the answer given most often",
    ),
)


@checker
def check_majority_vote(fn: Callable) -> str:
    """fn(answers) -> the answer given most often, None (no answer) left out, a tie going to the tied answer given
    first, None when no sample answered; by hand (not tl.evaluation.majority_vote)."""
    from .. import evaluation

    no_answer = object()  # stands for a returned None: `run` reads None as unanswered, but None may be the vote

    def answer(xs: list) -> object:
        vote = fn(xs)
        return no_answer if vote is None else vote

    gots = []
    for answers, what in _VOTE_CASES:
        answered = run(answer, list(answers), case=f"{answers} ({what})", forbidden=(evaluation.majority_vote,),
                       names="tl.evaluation.majority_vote")  # fmt: skip
        gots.append(None if answered is no_answer else answered)
    if all(g is None for g in gots):
        raise Wrong("todo", _TODO)
    wants = [_vote(list(answers)) for answers, _ in _VOTE_CASES]
    wrong = [i for i, (g, w) in enumerate(zip(gots, wants)) if not (g == w and type(g) is type(w))]
    if not wrong:
        return CORRECT
    answers, what = _VOTE_CASES[wrong[0]]
    case = f"{answers} ({what})"
    for mistake, mistaken, hint in _VOTE_MISTAKES:
        if all(g == mistaken(list(xs)) for g, (xs, _) in zip(gots, _VOTE_CASES)):
            raise Wrong(mistake, f"On {case} {hint}.")
    raise Wrong("wrong", f"On {case} you returned {gots[wrong[0]]!r}; the vote is {wants[wrong[0]]!r}.")


# ---- checking a scratchpad step by step --------------------------------------------------------------------------

_PROBLEMS = ((478, 356), (5, 12345), (999, 1), (0, 0), (60, 47), (123456, 987))


def _answers() -> list[tuple[int, int, str, bool, str, str]]:
    """(a, b, answer, its verdict, what the answer is, the mistake of calling it the other way): right worked answers,
    and wrong ones with one flaw each, so that accepting one of them names the check that was left out."""
    cases = [
        (a, b, arithmetic.scratchpad(a, b), True, "the right worked answer", "right-rejected") for a, b in _PROBLEMS
    ]
    cases += [
        (478, 356, "8+6+0=14;7+5+1=13;4+3+1=8;=834.;9+9+9=27", True, "the right answer, then more after its end",
         "after-end-read"),
        (478, 356, "8+6+0=14;7+5+1=23;4+3+1=8;=834.", False, "a wrong sum in one step, the final sum still right",
         "final-only"),
        (478, 356, "8+6+0=14;7+5+0=12;4+3+1=8;=834.", False, "a carry not passed on (7+5+0), the final sum right",
         "carry-not-chained"),
        (478, 356, "9+5+0=14;7+5+1=13;4+3+1=8;=834.", False, "a column's digits misread (9+5), the final sum right",
         "digits-not-checked"),
        (478, 356, "8+6+0=14;7+5+1=13;4+3+1=8;=835.", False, "right steps and a wrong final sum", "final-not-checked"),
        (478, 356, "8+6+0=14;7+5+1=13;4+3+1=8;=834", False, "right steps and sum, cut short before the end mark",
         "end-not-required"),
        (5, 12345, "5+5+0=10;0+4+1=5;=12350.", False, "the columns of the shorter number only, the final sum right",
         "columns-not-counted"),
        (999, 1, "9+1+0=10;9+0+1=10;9+0+1=10;0+0+1=1;=1000.", False, "an extra column for the last carry",
         "columns-not-counted"),
        (60, 47, "0+7+0=7;6+4+0=10;=107.", True, "the right worked answer, one carry at the end", "right-rejected"),
        (60, 47, "7+0+0=7;4+6+0=10;=107.", False, "each column's two digits swapped, the final sum right",
         "digits-not-checked"),
        (123456, 987, "6+7+0=13;5+8+1=14;4+9+1=14;3+0+0=3;2+0+0=2;1+0+0=1;=124443.", False,
         "a carry dropped in the fourth column, the final sum right", "carry-not-chained"),
    ]  # fmt: skip
    return cases


_STEPS_HINTS = {
    "right-rejected": "you called a right worked answer wrong: every step is the right one for its column, and the "
    "final sum is right",
    "after-end-read": "you read past the end mark '.': what comes after it is not part of the answer",
    "final-only": "you accepted a step whose own sum is wrong because the final sum was right: check every step's "
    "sum, not only the final one",
    "carry-not-chained": "you did not check each step's carry in: it must be the tens of the step before (0 for the "
    "first)",
    "digits-not-checked": "you did not check that each step adds the problem's own digits of its column (the ones "
    "first, the first number's digit before the second's, 0 where a number has no digit)",
    "columns-not-counted": "you did not count the steps: there is one per column of the longer number, no fewer and "
    "no more",
    "final-not-checked": "you checked the steps but not the final sum written after them",
    "end-not-required": "you accepted an answer cut short before its end mark '.': an answer that never ended earns "
    "nothing",
}


@checker
def check_steps(fn: Callable) -> str:
    """fn(problem, answer) -> True when the worked answer's every step is the right one for its column and the final
    sum is right (what comes after the end mark does not count); by hand (not tl.arithmetic.steps_right or
    tl.arithmetic.scratchpad)."""
    for a, b, answer, right, what, mistake in _answers():
        problem = arithmetic.problem(a, b)
        case = f"{problem} answered {answer!r} ({what})"
        got = run(fn, problem, answer, case=case, forbidden=(arithmetic.steps_right, arithmetic.scratchpad),
                  names="tl.arithmetic.steps_right or tl.arithmetic.scratchpad")  # fmt: skip
        if isinstance(got, str) or got not in (0, 1):
            raise Wrong("not-a-verdict", f"On {case} you returned {got!r}: return True or False.")
        if bool(got) != right:  # each case has one flaw (or none): calling it the other way names that check
            raise Wrong(mistake, f"On {case} {_STEPS_HINTS[mistake]}.")
    return CORRECT


# ---- the experiment: greedy accuracy of a shipped model -----------------------------------------------------------

# (checkpoint, style, numbers of digits, problems, the problems' seed): problems the notebook never shows, of one length
# and of mixed lengths, on a partly right model, a nearly perfect one and one that is mostly wrong
_ACCURACY_CASES = (
    ("addition_start", "scratchpad", 4, 40, 101),
    ("addition_start", "scratchpad", (1, 3), 30, 102),
    ("addition_direct", "direct", 2, 40, 103),
    ("addition_scratchpad", "scratchpad", (3, 5), 30, 104),
)


def _greedy_right(model, style: str, pairs: list) -> list[bool]:
    from .. import reasoning

    prompts = [arithmetic.problem(a, b) for a, b in pairs]
    written = reasoning.write(model, reasoning.arithmetic_tokenizer(), prompts, style)
    return [arithmetic.is_right(p, w) for p, w in zip(prompts, written)]


@checker
def check_greedy_accuracy(fn: Callable) -> str:
    """fn(model, style, pairs) -> the share of the problems `pairs` (a list of (a, b)) whose greedy answer, written by
    `model` in `style`, ends on the right sum; measured by the learner's code on shipped models and problems of the
    checker's own."""
    import random

    from ..checkpoints import load_checkpoint

    models: dict[str, object] = {}
    for name, style, digits, count, seed in _ACCURACY_CASES:
        if name not in models:
            models[name] = load_checkpoint(name)[0].eval()
        model = models[name]
        pairs = arithmetic.random_problems(count, digits, random.Random(seed))
        case = f"{count} problems of {digits} digits for {name} ({style})"
        got = run(fn, model, style, list(pairs), case=case)
        (value,) = measure("the share of right answers", got)
        right = _greedy_right(model, style, pairs)
        want = sum(right) / count
        if abs(value - want) <= 1 / count + 1e-9:  # one near-tie may go the other way on another route
            again = run(fn, model, style, list(pairs), case=case + ", measured again")
            if measure("the share of right answers", again)[0] != value:
                raise Wrong(
                    "sampled",
                    f"On {case} your function gave two different numbers for the same problems: answer greedily "
                    "(temperature 0, `reasoning.write`'s default), which always writes the same answer",
                )
            continue
        if math.isclose(value, sum(right), abs_tol=1e-9):
            raise Wrong(
                "count-not-share", f"On {case} you returned how many were right ({value:g}): divide by {count}."
            )
        if abs(value - (1 - want)) <= 1 / count + 1e-9 and want != 0.5:
            raise Wrong(
                "wrong-share", f"On {case} you returned the share of wrong answers ({value:.3f}); want the right."
            )
        raise Wrong("wrong", f"On {case} you measured {value:.3f}; the model's greedy answers are right on {want:.3f}.")
    return CORRECT
