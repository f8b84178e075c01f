"""The book's evaluation harness (tl.evaluation): exact match, rolling bits per byte, results and their report."""

import math

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.evaluation import Result, bits_per_byte, exact_match, report, rolling_windows


def test_rolling_windows_predict_every_token_once_from_the_tokens_before_it():
    for length in (1, 5, 7, 8, 9, 23, 64):
        for max_len in (1, 3, 8):
            ids = list(range(100, 100 + length))
            windows = rolling_windows(ids, prefix_id=7, max_len=max_len)
            predicted = [t for _, targets in windows for t in targets]
            assert predicted == ids  # each token once, in order
            for inputs, targets in windows:
                assert len(inputs) <= max_len and len(targets) <= len(inputs)
                before = [7, *ids][: len(ids)]  # the token before each one (the prefix before the first)
                assert inputs[-len(targets) :] == [before[ids.index(t)] for t in targets]
                if inputs[0] != 7:  # a later window reads the max_len tokens before its last target
                    start = ids.index(targets[-1]) - max_len
                    assert inputs == ids[start : start + max_len]
    assert rolling_windows([], 0, 4) == []


class Uniform(nn.Module):
    """Logits all 0: every token has probability 1 / V."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.w = vocab, nn.Parameter(torch.zeros(()))

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.vocab) + self.w


def test_bits_per_byte_of_a_uniform_model_is_log2_of_the_vocabulary_per_byte():
    text = "To be, or not to be"
    tok = tl.CharTokenizer.from_texts([text])
    bpb = bits_per_byte(Uniform(tok.vocab_size), tok.encode(text), text, prefix_id=0, max_len=4)
    assert bpb == pytest.approx(math.log2(tok.vocab_size), rel=1e-12)  # one byte per ASCII character
    accented = "café"  # 4 characters, 5 bytes: the same loss over more bytes
    tok = tl.CharTokenizer.from_texts([accented])
    bpb = bits_per_byte(Uniform(tok.vocab_size), tok.encode(accented), accented, prefix_id=0, max_len=8)
    assert bpb == pytest.approx(4 * math.log2(tok.vocab_size) / 5, rel=1e-12)


def test_bits_per_byte_is_the_windows_summed_loss():
    torch.manual_seed(0)
    text = "Now is the winter of our discontent made glorious summer"
    tok = tl.CharTokenizer.from_texts([text])
    lm = tl.DecoderOnlyLM(vocab_size=tok.vocab_size, d_model=32, num_heads=4, num_layers=2, max_len=64).eval()
    ids = tok.encode(text)
    with torch.no_grad():  # one window: the prefix and every token but the last, predicting every token
        logits = lm(torch.tensor([[0, *ids[:-1]]]))[0]
        whole = nn.functional.cross_entropy(logits.double(), torch.tensor(ids), reduction="sum").item()
    assert bits_per_byte(lm, ids, text, 0, 64) == pytest.approx(whole / math.log(2) / len(text), rel=1e-9)
    windowed = sum(
        nn.functional.cross_entropy(
            lm(torch.tensor([x]))[0, -len(y) :].double(), torch.tensor(y), reduction="sum"
        ).item()
        for x, y in rolling_windows(ids, 0, 16)
    )
    assert bits_per_byte(lm, ids, text, 0, 16) == pytest.approx(windowed / math.log(2) / len(text), rel=1e-9)
    assert bits_per_byte(lm, ids, text, 0, 16) != pytest.approx(bits_per_byte(lm, ids, text, 0, 64), rel=1e-6)


def test_exact_match_and_the_result_it_makes():
    scores = exact_match(["Srobra", "kram ", "x"], ["srobra", "kram", "y"], normalize=lambda s: s.strip().lower())
    assert scores.tolist() == [1.0, 1.0, 0.0]
    assert exact_match(["Srobra"], ["srobra"]).tolist() == [0.0]  # no normalisation unless asked
    with pytest.raises(ValueError, match="one answer per target: got 2 answers and 1 targets"):
        exact_match(["a", "b"], ["a"])
    result = Result("reverse", "exact match", torch.tensor([1.0, 0.0, 1.0, 1.0] * 25, dtype=torch.float64))
    low, high = result.interval()
    assert result.mean == 0.75 and low < 0.75 < high and result.interval() == (low, high)  # seeded: the same
    assert 0.6 < low and high < 0.9  # about 1.96 standard errors (0.043) each side
    table = report([result, Result("count", "pass@1", torch.tensor([0.5, 0.25]))])
    assert table.splitlines()[0].split() == ["task", "metric", "items", "mean", "95%", "interval"]
    assert "reverse" in table and "0.7500" in table and len(table.splitlines()) == 3
    with pytest.raises(ValueError, match="one number per item"):
        Result("empty", "exact match", torch.tensor([]))
    with pytest.raises(ValueError, match="not finite"):
        Result("broken", "bits per byte", torch.tensor([1.0, float("nan")]))


def test_the_windows_are_those_lm_evaluation_harness_reads():
    """EleutherAI's lm-evaluation-harness scores a text by its rolling windows (context length 1): the same tokens
    read, the same tokens scored, for every length and window size here."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    for length in range(1, 40):
        for max_len in (1, 2, 3, 8, 16):
            ids = list(range(100, 100 + length))
            theirs = [make_disjoint_window(w) for w in get_rolling_token_windows(ids, 7, max_len, 1)]
            theirs = [((context + scored)[:-1], scored) for context, scored in theirs]  # what the model reads
            assert rolling_windows(ids, 7, max_len) == theirs, (length, max_len)


def test_the_majority_vote_leaves_out_no_answer_and_gives_a_tie_to_the_first_given():
    from transformer_lib.evaluation import majority_vote

    assert majority_vote([3, 5, 5, None, 3, None, None]) == 3  # 3 and 5 twice each: 3 came first; None never wins
    assert majority_vote([None, 7, 5, 5]) == 5
    assert majority_vote([None, None]) is None and majority_vote([]) is None


def test_best_of_takes_the_highest_score_and_the_first_of_a_tie():
    from transformer_lib.evaluation import best_of

    assert best_of(["a", "b", "c"], [0.1, 0.9, 0.9]) == "b"
    with pytest.raises(ValueError, match="one score per answer"):
        best_of(["a"], [0.1, 0.2])


def test_accuracy_at_n_measures_a_chooser_on_random_sets_of_an_items_samples():
    from transformer_lib.evaluation import accuracy_at_n

    right = [[True, False, False, False], [False] * 4, [True] * 4, [False, True, False, True]]
    first = lambda i, indices: indices[0]  # one sample at random: the item's share of right samples
    result = accuracy_at_n(right, 1, first, draws=4000)
    assert torch.allclose(result.scores, torch.tensor([0.25, 0.0, 1.0, 0.5], dtype=torch.float64), atol=0.03)
    # a perfect verifier picks a right sample whenever the set holds one: pass@n, whose unbiased estimate is exact
    oracle = lambda i, indices: next((j for j in indices if right[i][j]), indices[0])
    for n in (1, 2, 3, 4):
        expected = tl.alignment.pass_at_k(4, [sum(r) for r in right], n)
        assert torch.allclose(accuracy_at_n(right, n, oracle, draws=4000).scores, expected, atol=0.03), n
    assert accuracy_at_n(right, 4, oracle, draws=3).scores.tolist() == [1.0, 0.0, 1.0, 1.0]  # the whole set each time
    assert accuracy_at_n(right, 2, lambda i, indices: None).mean == 0.0  # no answer is never right
    with pytest.raises(ValueError, match="one of the indices"):
        accuracy_at_n(right, 2, lambda i, indices: 5)
    with pytest.raises(ValueError, match="n must be between 1"):
        accuracy_at_n(right, 5, first)
