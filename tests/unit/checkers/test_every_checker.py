"""What holds for every checker of every chapter: verdicts with ids, the stub's "not answered yet", the
student edition's friendly error let through, and no hint that bypasses the verdicts."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib import exercises as ex
from transformer_lib.exercises._common import Verdict

CHECKERS = sorted(name for name in ex.__all__ if name.startswith("check_"))
# the checkers that take only the learner's function (the others also take a trained model and its data)
ALONE = [name for name in CHECKERS if len(inspect.signature(getattr(ex, name)).parameters) == 1]
MODULES = sorted((Path(ex.__file__).parent).glob("ch*.py"))


def test_every_checker_is_a_verdict_giving_checker():
    assert len(CHECKERS) >= 50
    for name in CHECKERS:
        assert hasattr(getattr(ex, name), "__wrapped__"), f"{name} is not decorated with @checker"


@pytest.mark.parametrize("name", ALONE)
def test_a_stub_is_not_answered_and_a_student_stub_raises_a_friendly_error(name):
    check = getattr(ex, name)
    verdict = check(lambda *args: None)
    assert isinstance(verdict, Verdict) and verdict.mistake == "todo", verdict
    assert verdict.startswith("Not answered yet")

    def student_stub(*args):
        raise tl.NotYetDone(f"exercise {name}")

    with pytest.raises(tl.NotYetDone, match=f"exercise {name} is not done yet"):
        check(student_stub)


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.stem)
def test_hints_go_through_verdicts(module):
    """No function of a chapter's checkers returns a bare string: a hint is `no(id, hint)` or `Wrong(id, hint)`,
    so every rejection carries the id of its mistake."""
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            value = node.value
            assert not (isinstance(value, ast.Constant) and isinstance(value.value, str)), (module.name, node.lineno)
            assert not isinstance(value, ast.JoinedStr), (module.name, node.lineno)
    assert "attempt(" not in module.read_text() and "_measured(" not in module.read_text(), module.name


def test_a_verdict_reads_as_its_hint_and_correct_stays_a_plain_string():
    verdict = ex.check_attention(lambda q, k, v: q)
    assert isinstance(verdict, str) and verdict.mistake and str(verdict) == verdict
    assert type(ex.CORRECT) is str  # the grader compares types: a submission cannot pass a Verdict off as correct


def _draws() -> tuple:
    import random

    import numpy as np

    return torch.rand(4).tolist(), random.random(), float(np.random.rand())


@pytest.mark.parametrize("name", ALONE)
def test_a_checker_leaves_the_callers_random_streams_as_it_found_them(name):
    """The learner's next draw after a check is the one it would have been without it: torch's, Python's and
    numpy's global streams are restored, whatever the checker seeded or drew (chapters 3 and 5 seeded torch's).
    (The checkers that also take a trained model get the same @checker, which every checker has: the first test.)"""
    import random

    import numpy as np

    def seed_all():
        torch.manual_seed(1234)
        random.seed(1234)
        np.random.seed(1234)

    seed_all()
    expected = _draws()
    seed_all()
    getattr(ex, name)(lambda *args, **kwargs: None)  # a stub answer: the checker's own seeding and draws still happen
    assert _draws() == expected, f"{name} changed the caller's random stream"


def test_an_experiment_checker_that_seeds_leaves_the_stream_after_a_right_answer_too():
    t = torch

    def gap(layer, tokens, perm, use_pe):  # chapter 3's permutation experiment, done right
        def encode(x):
            return x + tl.sinusoidal_encoding(x.shape[1], x.shape[2]) if use_pe else x

        with t.no_grad():
            return (layer(encode(tokens[:, perm])) - layer(encode(tokens))[:, perm]).abs().max().item()

    t.manual_seed(99)
    expected = t.rand(3)
    t.manual_seed(99)
    ex.check_permutation_gap(gap)
    assert t.equal(t.rand(3), expected)
