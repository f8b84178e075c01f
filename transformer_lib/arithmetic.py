"""Addition written out: problems a program makes and checks, answered directly or with worked steps (a scratchpad).

The task of the book's reasoning chapter. A problem is two numbers and a plus sign, `"478+356="`. The direct answer is
the sum and an end mark, `"834."`. The scratchpad answer works column by column from the right, as a pupil does, and
ends with the sum:

    "8+6+0=14;7+5+1=13;4+3+1=8;=834."

Each step reads the two digits of a column and the carry in, and writes their sum (whose last digit is the column's
digit and whose tens are the carry out); after the last column, `=` and the sum, read from the steps. A model that
writes steps needs to add only three one-digit numbers at a time, whatever the length of the numbers; a model that
answers directly must carry in its head. Nye et al. (2021) showed the difference on Transformers.

Both answers end with END (`"."`). `final_answer` reads the sum a model wrote; `is_right` checks it against the
problem's (the verifiable reward); `steps_right` checks every step, so that a reward can pay for the work as well as
for the result. Nothing here is learned: `tests/unit/test_arithmetic.py` checks it against Python's own sums.
"""

from __future__ import annotations

import random
import re

__all__ = [
    "ALPHABET",
    "END",
    "problem",
    "direct",
    "scratchpad",
    "random_problems",
    "parse_problem",
    "final_answer",
    "is_right",
    "steps_right",
]

END = "."
ALPHABET = "0123456789+=;" + END  # every character a problem or an answer uses
_PROBLEM = re.compile(r"^(\d+)\+(\d+)=$")


def _check_numbers(a: int, b: int) -> None:
    for name, n in (("a", a), ("b", b)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{name} must be a whole number of 0 or more, got {n!r}")


def problem(a: int, b: int) -> str:
    """The prompt: "a+b=" (no spaces, no leading zeros)."""
    _check_numbers(a, b)
    return f"{a}+{b}="


def direct(a: int, b: int) -> str:
    """The direct answer: the sum, then END."""
    _check_numbers(a, b)
    return f"{a + b}{END}"


def scratchpad(a: int, b: int) -> str:
    """The worked answer: one step per column from the right, "x+y+carry=sum;", then "=" and the sum, then END. The
    shorter number counts as 0 in the columns it lacks."""
    _check_numbers(a, b)
    x, y = str(a)[::-1], str(b)[::-1]  # the ones first
    steps, carry = [], 0
    for i in range(max(len(x), len(y))):
        dx, dy = int(x[i]) if i < len(x) else 0, int(y[i]) if i < len(y) else 0
        total = dx + dy + carry
        steps.append(f"{dx}+{dy}+{carry}={total}")
        carry = total // 10
    return ";".join(steps) + f";={a + b}{END}"


def random_problems(count: int, digits: int | tuple[int, int], rng: random.Random) -> list[tuple[int, int]]:
    """`count` pairs (a, b), each number of `digits` digits (or a number of digits drawn from the range, inclusive,
    for each), its first digit never 0 unless it has one digit."""
    low, high = (digits, digits) if isinstance(digits, int) else digits
    if not 1 <= low <= high:
        raise ValueError(f"digits must be at least 1 (a number or a range low <= high), got {digits!r}")

    def number() -> int:
        d = rng.randint(low, high)
        return rng.randint(0 if d == 1 else 10 ** (d - 1), 10**d - 1)

    return [(number(), number()) for _ in range(count)]


def parse_problem(prompt: str) -> tuple[int, int]:
    """The numbers of a problem written "a+b=", as (a, b); anything else is refused by name."""
    found = _PROBLEM.match(prompt)
    if found is None:
        raise ValueError(f"a problem is written 'a+b=', got {prompt!r}")
    return int(found.group(1)), int(found.group(2))


def final_answer(answer: str) -> int | None:
    """The sum a model wrote: the digits after the last "=" (the whole answer when it has none), up to END. None when
    they are not a number or END never comes (an answer cut short earns nothing)."""
    if END not in answer:
        return None
    body = answer[: answer.index(END)]
    digits = body.rsplit("=", 1)[-1]
    return int(digits) if digits.isdigit() else None


def is_right(prompt: str, answer: str) -> bool:
    """Whether the answer's final sum is the problem's: the program's verdict, with no partial credit."""
    a, b = parse_problem(prompt)
    return final_answer(answer) == a + b


def steps_right(prompt: str, answer: str) -> bool:
    """Whether every step of a scratchpad is the right one for its column (the digits, the carry, the sum), the steps
    are all the columns in order, and the final sum is right."""
    a, b = parse_problem(prompt)
    if END not in answer:
        return False
    return answer[: answer.index(END) + 1] == scratchpad(a, b)
