"""The package's trained-results promises, each after a fixed number of steps.

Nothing here reads the clock to decide anything: a machine twice as slow trains the same model
and must reach the same bar. The seconds each run took are printed (pytest -s shows them) and
belong to the benchmark, not to an assert. The bars have margins, because the trained numbers
differ in their last digits between CPUs (see the README, "Same results on every machine").
"""

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import tasks, tokenization, training

pytestmark = pytest.mark.slow


def _train_seq2seq(pairs, src_tok, tgt_tok, steps, lr=3e-3, warmup=100):
    g = tl.set_seed(0)
    train, test = tasks.split_data(pairs, (0.9, 0.1), seed=0)
    assert not {s for s, _ in train} & {s for s, _ in test}, "held-out inputs must be unseen"
    src, tgt = tasks.encode_pairs(train, src_tok, tgt_tok)
    model = tl.Transformer(
        vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=64,
        num_heads=4,
        num_layers=2,
        d_ff=256,
        dropout=0.0,
        max_len=64,
    )
    batches = tasks.iterate_batches(src, tgt, batch_size=64, rng=g, pad_id=src_tok.pad_id, forever=True)
    hist = training.fit(model, training.seq2seq_loss, batches, steps=steps, lr=lr, warmup=warmup, progress=False)
    test_src, test_tgt = tasks.encode_pairs(test[:1000], src_tok, tgt_tok)
    acc = training.exact_match(model, test_src, test_tgt, tgt_tok.bos_id, tgt_tok.eos_id)
    print(f"{len(hist.steps)} steps in {hist.seconds:.1f}s, held-out exact match {acc:.4f}")
    return acc, hist


def test_reverse_task_reaches_99_percent_exact_match():
    tok = tokenization.CharTokenizer("abcdefghijklmnop")
    acc, hist = _train_seq2seq(tasks.reverse_task(12000, seed=0), tok, tok, steps=500)
    assert len(hist.steps) == 500
    assert acc >= 0.99


def test_numbers_to_words_reaches_99_percent_exact_match():
    pairs = tasks.numbers_to_words_task(30000, seed=0)
    src_tok = tokenization.CharTokenizer("0123456789")
    tgt_tok = tokenization.WordTokenizer.from_texts(t for _, t in pairs)
    acc, hist = _train_seq2seq(pairs, src_tok, tgt_tok, steps=250, lr=5e-3, warmup=50)
    assert len(hist.steps) == 250
    assert acc >= 0.99


def test_language_model_beats_bigram_by_15_percent():
    g = tl.set_seed(0)
    text = tasks.char_corpus(4000, seed=0)
    tok = tokenization.CharTokenizer(text)
    ids = torch.tensor(tok.encode(text))
    n = int(0.9 * len(ids))
    train_ids, val_ids = ids[:n], ids[n:]
    lm = tl.DecoderOnlyLM(
        vocab_size=tok.vocab_size,
        d_model=64,
        num_heads=4,
        num_layers=2,
        d_ff=256,
        dropout=0.0,
        max_len=128,
        norm_first=True,
    )
    hist = training.fit(
        lm, training.lm_loss, tasks.lm_batches(train_ids, 64, 32, rng=g), steps=300, lr=3e-3, progress=False
    )
    model_loss = training.lm_eval_loss(lm, val_ids, 64)
    bigram = training.bigram_loss(train_ids, val_ids, tok.vocab_size)
    print(f"{len(hist.steps)} steps in {hist.seconds:.1f}s: validation loss {model_loss:.3f} nats, bigram {bigram:.3f}")
    assert model_loss <= 0.85 * bigram


def test_label_smoothed_loss_ignores_padding_and_matches_closed_form():
    logits = torch.zeros(1, 3, 4)  # uniform predictions over 4 classes
    targets = torch.tensor([[1, 2, 0]])
    assert training.label_smoothed_cross_entropy(logits, targets, pad_id=0).item() == pytest.approx(
        torch.log(torch.tensor(4.0)).item(), abs=1e-6
    )
    logits = torch.tensor([[[5.0, 0.0], [0.0, 5.0]]])
    plain = training.label_smoothed_cross_entropy(logits, torch.tensor([[0, 1]]))
    smooth = training.label_smoothed_cross_entropy(logits, torch.tensor([[0, 1]]), smoothing=0.2)
    log_p = logits.log_softmax(-1)[0]
    expected = -(0.9 * log_p[0, 0] + 0.1 * log_p[0, 1])  # 0.8 on the target plus 0.2 / 2 on each class
    assert smooth.item() == pytest.approx(expected.item(), abs=1e-5) and smooth > plain


def test_bigram_loss_is_zero_entropy_on_a_deterministic_stream():
    ids = torch.tensor([0, 1, 2] * 50)
    assert training.bigram_loss(ids, ids, 3, alpha=1e-9) == pytest.approx(0.0, abs=1e-6)


def test_fit_records_history_and_evaluations():
    g = tl.set_seed(0)
    x = torch.randint(1, 5, (64, 6))
    y = (x[:, 0] > 2).long()
    model = tl.EncoderClassifier(vocab_size=5, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0)
    batches = tasks.iterate_batches(x, y, batch_size=16, rng=g, forever=True)
    accuracy = lambda m: {"acc": training.classification_accuracy(m, x, y)}
    hist = training.fit(
        model,
        training.classification_loss,
        batches,
        steps=30,
        warmup=5,
        eval_every=10,
        eval_fn=accuracy,
        progress=False,
    )
    assert hist.steps == list(range(30)) and len(hist.losses) == 30
    assert hist.eval_steps == [10, 20, 29]
    assert hist.losses[-1] < hist.losses[0]


def test_warmup_cosine_rises_linearly_then_decays_to_its_floor():
    factors = [training.warmup_cosine(s, 10, 110) for s in range(110)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert factors[10] == pytest.approx(1.0)
    assert training.warmup_cosine(60, 10, 110) == pytest.approx(0.55)  # halfway down the cosine: (1 + 0.1) / 2
    assert training.warmup_cosine(110, 10, 110) == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
    with pytest.raises(ValueError, match="at least 1"):
        training.warmup_cosine(0, 0, 10)


def test_noam_rate_matches_the_paper_and_peaks_at_the_end_of_warmup():
    d, w = 512, 4000
    assert tl.noam_rate(1, d, w) == pytest.approx(d**-0.5 * w**-1.5)
    assert tl.noam_rate(w, d, w) == pytest.approx(d**-0.5 * w**-0.5)
    assert tl.noam_rate(4 * w, d, w) == pytest.approx(tl.noam_rate(w, d, w) / 2)
    rates = [tl.noam_rate(n, d, w) for n in range(1, 3 * w, 97)]
    assert max(rates) <= tl.noam_rate(w, d, w) + 1e-12
    with pytest.raises(ValueError, match="counts from 1"):
        tl.noam_rate(0, d, w)


def test_smoothed_targets_match_what_cross_entropy_trains_towards():
    targets = torch.tensor([[2, 0], [1, 4]])
    q = tl.smoothed_targets(targets, 5, 0.2)  # (2, 2, 5)
    assert q.shape == (2, 2, 5) and torch.allclose(q.sum(-1), torch.ones(2, 2))
    assert q[0, 0, 2].item() == pytest.approx(0.8 + 0.04) and q[0, 0, 1].item() == pytest.approx(0.04)
    logits = torch.randn(2, 2, 5)
    soft = -(q * logits.log_softmax(-1)).sum(-1).mean()  # cross-entropy against the soft target
    smoothed = tl.label_smoothed_cross_entropy(logits, targets, smoothing=0.2)
    assert smoothed.item() == pytest.approx(soft.item(), abs=1e-6)
    with pytest.raises(ValueError, match="smoothing must be in"):
        tl.smoothed_targets(targets, 5, 1.5)


@pytest.mark.parametrize("V, eps", [(2, 0.1), (42, 0.1), (1000, 0.3)])
def test_smoothing_floor_is_reached_by_predicting_the_smoothed_target_and_by_nothing_lower(V, eps):
    target = torch.tensor([1])
    floor = tl.smoothing_floor(V, eps)
    best = tl.label_smoothed_cross_entropy(tl.smoothed_targets(target, V, eps).log(), target, smoothing=eps)
    assert best.item() == pytest.approx(floor, abs=1e-5)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        other = tl.label_smoothed_cross_entropy(torch.randn(1, V, generator=g) * 3, target, smoothing=eps)
        assert other.item() > floor
    assert tl.smoothing_floor(V, 0.0) == 0.0


def test_repeat_losses_score_each_copy_apart_by_hand():
    class Knows(torch.nn.Module):  # predicts the true next token with certainty in the second copy only
        def __init__(self, seqs):
            super().__init__()
            self.seqs, self.w = seqs, torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            B, T = x.shape
            logits = torch.zeros(B, T, 6)  # uniform: ln 6 nats
            n = (T + 1) // 2
            nxt = self.seqs[:, 1:]  # (B, T)
            logits[:, n:] = F.one_hot(nxt[:, n:], 6).float() * 100
            return logits

    seqs = tasks.repeated_tokens(3, 4, 6, torch.Generator().manual_seed(0))  # (3, 8)
    first, second = training.repeat_losses(Knows(seqs), seqs)
    assert abs(first - math.log(6)) < 1e-6 and second < 1e-6
    with pytest.raises(ValueError, match=r"\(B, 2n\)"):
        training.repeat_losses(Knows(seqs), seqs[:, :7])


def test_expect_prints_the_band_and_time_and_names_what_to_check_outside_it(capsys):
    assert tl.expect(
        "held-out accuracy", torch.tensor(0.97), (0.9, 1.0), laptop="4 s", check="the rate"
    ) == pytest.approx(0.97)
    printed = capsys.readouterr().out
    assert "held-out accuracy: 0.97" in printed and "0.9 to 1" in printed and "about 4 s on a laptop CPU" in printed
    for outside in (0.5, 1.2, float("nan")):
        with pytest.raises(AssertionError, match="outside the band 0.9 to 1.*Check the learning rate"):
            tl.expect("held-out accuracy", outside, (0.9, 1.0), laptop="4 s", check="the learning rate")
    with pytest.raises(ValueError, match="low <= high"):
        tl.expect("loss", 1.0, (2.0, 1.0), laptop="1 s", check="nothing")
