"""The watch-it-think page's build, piece by piece (tools/playground_build/watch_think.py): the sampler the page copies
draws from the model's distribution, the page's limits are the model's, and its sampled answers in PyTorch are the
ones onnxruntime gives. The browser tests (tests/browser/test_watch_think.py) hold the page to what the build records.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import torch

import transformer_lib as tl
from playground_build import watch_think as w
from playground_build.common import mulberry32
from transformer_lib import arithmetic, reasoning


def test_one_character_is_the_inverse_of_the_distribution_at_the_number():
    logits = np.log(np.array([0.2, 0.3, 0.5], dtype=np.float32))
    for u, want, near in ((0.0, 0, 0.2), (0.1, 0, 0.1), (0.19, 0, 0.01), (0.21, 1, 0.01), (0.6, 2, 0.1)):
        chosen, distance = w._choose(logits, u)
        assert chosen == want and distance == pytest.approx(near, abs=1e-6), (u, chosen, distance)


def test_the_pages_numbers_draw_each_character_as_often_as_its_probability():
    """5,000 of mulberry32's numbers through the inverse distribution: each of five characters within four standard
    errors of its probability."""
    probs = np.array([0.05, 0.1, 0.15, 0.3, 0.4])
    draw = mulberry32(7)
    counts = np.bincount([w._choose(np.log(probs), next(draw))[0] for _ in range(5000)], minlength=5)
    for p, n in zip(probs, counts):
        assert abs(n / 5000 - p) < 4 * math.sqrt(p * (1 - p) / 5000), (p, n)


def test_the_page_takes_every_problem_the_model_has_positions_for_and_no_more():
    tok = reasoning.arithmetic_tokenizer()

    def positions(digits: int) -> int:
        problem = "9" * digits + "+" + "9" * digits
        return len(w.prompt_ids(tok, problem)) + w.budget(problem, "scratchpad")

    assert positions(w.MAX_DIGITS) <= reasoning.MAX_LEN < positions(w.MAX_DIGITS + 1)
    assert w.LONGEST == "9" * w.MAX_DIGITS + "+" + "9" * w.MAX_DIGITS
    for problem in ("7+8", "95+7", "1975+4116"):
        for style in reasoning.STYLES:
            assert w.budget(problem, style) == reasoning.answer_budget(f"{problem}=", style)
        assert w.prompt_ids(tok, problem) == tok.encode(arithmetic.problem(*map(int, problem.split("+"))), bos=True)


def test_the_verdicts_are_the_programs():
    assert w.verdict("478+356", "8+6+0=14;7+5+1=13;4+3+1=8;=834.") == {"sum": 834, "right": True, "steps_right": True}
    assert w.verdict("478+356", "8+6+0=14;7+5+1=12;4+3+1=8;=834.") == {"sum": 834, "right": True, "steps_right": False}
    assert w.verdict("478+356", "834") == {"sum": None, "right": False, "steps_right": False}  # no end mark
    assert w.verdict("7+8", "15.") == {"sum": 15, "right": True, "steps_right": False}


def test_the_pages_samples_are_the_same_in_pytorch_and_onnxruntime(tmp_path):
    """The start model's four samples of the page's default problem with one seed: page_sample (PyTorch, the full
    sequence each step) and onnx_samples (the step model with its cache, as the page runs it) write the same ids, and
    each sample ends at the end mark or the budget."""
    model = tl.load_checkpoint("addition_start")[0].eval()
    tok = reasoning.arithmetic_tokenizer()
    end = tok.encode(arithmetic.END)[0]
    problem = w.EXAMPLES[0]
    ids, n = w.prompt_ids(tok, problem), w.budget(problem, "scratchpad")
    draw = mulberry32(1)
    pytorch = [w.page_sample(model, ids, n, end, draw)[0] for _ in range(4)]
    session = ort.InferenceSession(str(tl.export.export_step(model, tmp_path / "step.onnx")))
    assert w.onnx_samples(session, model, ids, n, end, 4, 1) == pytorch
    assert all(s[-1] == end or len(s) == n for s in pytorch)
    with torch.no_grad():  # the first character of each sample has positive probability under the model
        first = model(torch.tensor([ids]))[0, -1].softmax(-1)
    assert all(first[s[0]] > 0 for s in pytorch)
