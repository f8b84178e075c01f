"""BART's noising, checked by its statistics: Poisson span lengths, the masked share, uniform places and orders."""

import math

import pytest
import torch
from scipy import stats

from transformer_lib import bart

MASK = 1


def _line(n, start=10):
    return torch.arange(start, start + n)  # distinct ids, none of them the mask


def test_spans_cover_the_share_asked_and_each_becomes_one_mask_apart_from_the_others():
    g = torch.Generator().manual_seed(0)
    for n in (0, 1, 2, 7, 30, 200):
        for ratio in (0.0, 0.15, 0.3, 0.5, 0.9):
            tokens = _line(n)
            spans = bart.infilling_spans(n, ratio, generator=g)
            assert sum(size for _, size in spans) == round(ratio * n)
            out = bart.apply_spans(tokens, spans, MASK)
            is_mask = out == MASK
            assert int(is_mask.sum()) == len(spans)  # one mask per span, zero-length spans included
            assert not (is_mask[1:] & is_mask[:-1]).any()  # no two masks side by side: spans never touch
            kept = out[~is_mask]
            covered = torch.zeros(n, dtype=torch.bool)
            for start, size in spans:
                covered[start : start + size] = True
            assert torch.equal(kept, tokens[~covered])  # the rest of the line, in order
            assert out.numel() == n - round(ratio * n) + len(spans)


def test_span_lengths_are_poisson_with_a_share_of_empty_spans_near_e_to_the_minus_lambda():
    g = torch.Generator().manual_seed(1)
    lengths = [size for _ in range(40) for _, size in bart.infilling_spans(2000, 0.3, 3.0, generator=g)]
    counts = torch.bincount(torch.tensor(lengths), minlength=20)[:20].double()
    n = len(lengths)  # about 40 * 600 / 3 = 8000 spans; 40 of them cut to fit
    assert 7000 < n < 9000
    pmf = torch.tensor([stats.poisson.pmf(k, 3.0) for k in range(20)])
    # the seven commonest lengths, 0 to 6, each within 4 standard deviations of its binomial count
    for k in range(7):
        sd = math.sqrt(n * pmf[k] * (1 - pmf[k]))
        assert abs(counts[k] - n * pmf[k]) < 4 * sd, (k, counts[k].item(), (n * pmf[k]).item())
    assert abs(counts[0] / n - math.exp(-3)) < 0.01  # zero-length spans: inserted masks, about 5%
    assert abs(sum(lengths) / n - 3.0) < 0.1  # the mean of Poisson(3)
    other = [size for _ in range(40) for _, size in bart.infilling_spans(2000, 0.3, 1.0, generator=g)]
    assert abs(sum(other) / len(other) - 1.0) < 0.05 and abs(other.count(0) / len(other) - math.exp(-1)) < 0.02


def test_every_gap_is_as_likely_to_hold_a_span():
    g = torch.Generator().manual_seed(2)
    n, ratio, draws = 12, 0.25, 6000  # 3 tokens masked, 10 places between and around the 9 that stay
    used = torch.zeros(10)
    for _ in range(draws):
        spans = bart.infilling_spans(n, ratio, generator=g)
        kept_before, previous = [], 0
        for start, size in spans:
            kept_before.append(start - previous)
            previous += size
        for gap in kept_before:
            used[gap] += 1
    p = stats.chisquare(used.numpy()).pvalue
    assert p > 1e-3, used.tolist()


def test_spans_are_placed_in_every_arrangement_not_only_from_the_left():
    g = torch.Generator().manual_seed(3)
    starts = [spans[0][0] for spans in (bart.infilling_spans(40, 0.1, generator=g) for _ in range(500)) if spans]
    assert min(starts) == 0 and max(starts) > 30


def test_a_seed_gives_the_same_noise_and_another_seed_other_noise():
    tokens = _line(50)
    a = bart.text_infilling(tokens, MASK, generator=torch.Generator().manual_seed(4))
    b = bart.text_infilling(tokens, MASK, generator=torch.Generator().manual_seed(4))
    c = bart.text_infilling(tokens, MASK, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sentence_orders_are_uniform_and_each_sentence_stays_whole():
    dot, ask = 2, 3
    tokens = torch.tensor([10, 11, dot, 12, ask, 13, 14, 15, dot])
    sentences = {(10, 11, dot), (12, ask), (13, 14, 15, dot)}
    g = torch.Generator().manual_seed(6)
    seen: dict[tuple, int] = {}
    for _ in range(3000):
        out = bart.sentence_permutation(tokens, (dot, ask), generator=g)
        assert sorted(out.tolist()) == sorted(tokens.tolist())
        cuts = [0, *[i + 1 for i, t in enumerate(out.tolist()) if t in (dot, ask)]]
        parts = tuple(tuple(out[a:b].tolist()) for a, b in zip(cuts, cuts[1:]))
        assert set(parts) == sentences
        seen[parts] = seen.get(parts, 0) + 1
    assert len(seen) == 6 and stats.chisquare(list(seen.values())).pvalue > 1e-3
    tail = torch.tensor([10, dot, 11, 12])  # words after the last full stop are a sentence of their own
    outs = {tuple(bart.sentence_permutation(tail, [dot], generator=g).tolist()) for _ in range(50)}
    assert outs == {(10, dot, 11, 12), (11, 12, 10, dot)}
    one = torch.tensor([10, 11, dot])
    assert torch.equal(bart.sentence_permutation(one, [dot]), one)


def test_token_deletion_drops_the_rate_asked_and_keeps_the_order():
    g = torch.Generator().manual_seed(7)
    tokens = _line(1000)
    kept = [bart.token_deletion(tokens, 0.1, generator=g) for _ in range(20)]
    dropped = sum(1000 - k.numel() for k in kept)
    assert abs(dropped - 2000) < 4 * math.sqrt(20000 * 0.1 * 0.9)
    assert all(bool((k[1:] > k[:-1]).all()) for k in kept)  # a subsequence of an increasing line
    assert torch.equal(bart.token_deletion(tokens, 0.0), tokens)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bart.text_infilling(torch.zeros(2, 3, dtype=torch.long), MASK), r"one line of integer ids.*\(2, 3\)"),
        (
            lambda: bart.text_infilling(torch.zeros(3), MASK),
            r"one line of integer ids, shape \(S,\), got torch.float32",
        ),
        (lambda: bart.text_infilling([1, 2, 3], MASK), "got list"),
        (lambda: bart.text_infilling(_line(5), MASK, ratio=1.0), r"ratio must be in \[0, 1\)"),
        (lambda: bart.text_infilling(_line(5), MASK, poisson_lambda=0), "poisson_lambda must be positive"),
        (lambda: bart.text_infilling(_line(5), -1), "mask_id must be a non-negative int"),
        (lambda: bart.apply_spans(_line(5), [(3, 1), (2, 1)], MASK), "in order, apart and inside"),
        (lambda: bart.apply_spans(_line(5), [(3, 4)], MASK), "inside the line of 5"),
        (lambda: bart.apply_spans(_line(5), [(0, 2), (2, 1)], MASK), "apart"),  # side by side: one span
        (lambda: bart.sentence_permutation(_line(5), []), "at least one id"),
        (lambda: bart.token_deletion(_line(5), 1.0), r"rate must be in \[0, 1\)"),
        (lambda: bart.infilling_spans(-2), "length must be a non-negative int"),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("seed", range(5))
def test_bart_converts_both_ways_with_the_same_logits_on_random_configurations(seed):
    from transformer_lib.hf import from_hf, to_hf

    g = torch.Generator().manual_seed(seed)

    def pick(*options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    heads = pick(1, 2, 3)
    config = transformers.BartConfig(
        vocab_size=pick(11, 30),
        d_model=heads * pick(3, 4, 5),  # odd widths too
        encoder_layers=pick(1, 2),
        decoder_layers=pick(1, 2, 3),
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=pick(7, 16),
        decoder_ffn_dim=None,
        max_position_embeddings=pick(12, 20),
        scale_embedding=pick(False, True),
        activation_function=pick("gelu", "relu"),
        pad_token_id=1,
    )
    config.decoder_ffn_dim = config.encoder_ffn_dim
    torch.manual_seed(seed)
    theirs = transformers.BartForConditionalGeneration(config).eval()
    with torch.no_grad():
        theirs.final_logits_bias.normal_(generator=g)  # zero when fresh: a bias that is lost would not show
    ours = from_hf(theirs)
    src = torch.randint(3, config.vocab_size, (2, 9), generator=g)
    src[1, 6:] = 1  # padding at the end of the second line: their attention_mask, our pad id
    tgt = torch.randint(3, config.vocab_size, (2, 6), generator=g)
    with torch.no_grad():
        want = theirs(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours(src, tgt), want, atol=1e-5, rtol=0)
        back = to_hf(ours)
        torch.testing.assert_close(
            back(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=tgt).logits, want, atol=1e-5, rtol=0
        )
    # greedy decoding through the caches (positions continue from the cached ones) is theirs, step by step
    out = ours.greedy_decode(src, bos_id=2, eos_id=-1, max_new_tokens=5)
    ids = torch.full((2, 1), 2)
    with torch.no_grad():
        for _ in range(5):
            logits = theirs(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=ids).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ids)


def test_bart_refuses_what_it_is_not_by_name():
    from transformer_lib.hf import from_hf

    small = dict(vocab_size=20, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2)
    small |= dict(decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8, max_position_embeddings=10)
    for field, value in (("activation_function", "silu"), ("tie_word_embeddings", False), ("decoder_ffn_dim", 12)):
        theirs = transformers.BartForConditionalGeneration(transformers.BartConfig(**{**small, field: value})).eval()
        with pytest.raises(ValueError, match=field):
            from_hf(theirs)
    small_ours = dict(vocab_size=20, d_model=8, num_heads=2)
    with pytest.raises(ValueError, match="one table for both sides"):
        bart.BartForConditionalGeneration(bart.bart_config(tgt_vocab_size=21, **small_ours))
    with pytest.raises(ValueError, match="final_norm=True"):
        bart.BartForConditionalGeneration(bart.bart_config(final_norm=True, **small_ours))
    with pytest.raises(ValueError, match="positional must be 'learned'"):
        bart.BartForConditionalGeneration(bart.bart_config(positional="rope", **small_ours))
    model = bart.BartForConditionalGeneration(bart.bart_config(**small_ours))
    assert not model.head.bias.requires_grad and not model.head.bias.any()  # final_logits_bias: fixed, zero


def test_denoising_pairs_hold_the_noised_line_and_the_whole_line_to_write_back():
    dot, mask, bos, eos, pad = 2, 3, 4, 5, 0
    lines = [torch.tensor([10, 11, 12, dot, 13, 14, dot]), torch.tensor([20, 21, 22, 23, 24, 25, 26, 27, 28, 29])]
    src, tgt = bart.denoising_pairs(
        lines,
        mask_id=mask,
        bos_id=bos,
        eos_id=eos,
        pad_id=pad,
        end_ids=(dot,),
        generator=torch.Generator().manual_seed(9),
    )
    assert tgt.shape == (2, 12) and tgt[0, :9].tolist() == [bos, *lines[0].tolist(), eos] and (tgt[0, 9:] == pad).all()
    assert tgt[1].tolist() == [bos, *lines[1].tolist(), eos]
    for row, line in zip(src, lines):
        words = row[row != pad]
        assert words[-1] == eos and int((words == mask).sum()) >= 1  # 30% of 7 or 10 words: some span
        kept = words[(words != mask) & (words != eos)]
        assert set(kept.tolist()) <= set(line.tolist()) and kept.numel() == line.numel() - round(0.3 * line.numel())
    with pytest.raises(ValueError, match="may not hold mask_id"):
        bart.denoising_pairs([torch.tensor([10, mask])], mask_id=mask, bos_id=bos, eos_id=eos, pad_id=pad)
    with pytest.raises(ValueError, match="at least one line"):
        bart.denoising_pairs([], mask_id=mask, bos_id=bos, eos_id=eos, pad_id=pad)
