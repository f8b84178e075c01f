"""BERT (transformer_lib.bert) against `transformers`' own, and its masking rule against what it promises."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import bert

transformers = pytest.importorskip("transformers")

SPECIAL = (0, 1, 2, 3)  # pad, [CLS], [SEP], [MASK] in these tests
PAD, CLS, SEP, MASK = SPECIAL


def _hf_config(seed: int) -> transformers.BertConfig:
    """A small random BERT shape: widths, depth, heads and token types vary with the seed."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=g))]
    heads = pick([1, 2, 4])
    return transformers.BertConfig(
        vocab_size=pick([37, 61, 100]),
        hidden_size=heads * pick([4, 8]),
        num_hidden_layers=pick([1, 2, 3]),
        num_attention_heads=heads,
        intermediate_size=pick([16, 48]),
        max_position_embeddings=pick([16, 24]),
        type_vocab_size=pick([1, 2, 3]),
        layer_norm_eps=pick([1e-12, 1e-5]),
        num_labels=pick([2, 5]),
        pad_token_id=PAD,
    )


def _randomised(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every weight moved off its start (norms off 1, biases off 0), so no tensor can be swapped unnoticed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def _batch(cfg, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids (3, S) starting with [CLS], rows padded to different lengths, and random token types."""
    g = torch.Generator().manual_seed(seed)
    S = cfg.max_position_embeddings - 2
    tokens = torch.randint(len(SPECIAL), cfg.vocab_size, (3, S), generator=g)
    tokens[:, 0] = CLS
    tokens[1, S - 3 :] = PAD
    tokens[2, 4:] = PAD
    types = torch.randint(cfg.type_vocab_size, (3, S), generator=g)
    return tokens, types


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["BertForMaskedLM", "BertForSequenceClassification"])
def test_bert_logits_equal_hugging_face_and_weights_go_back_unchanged(kind, seed):
    cfg = _hf_config(seed)
    theirs = _randomised(getattr(transformers, kind)(cfg), seed)
    ours = tl.hf.from_hf(theirs)
    assert isinstance(ours, bert.BertForMaskedLM if kind == "BertForMaskedLM" else bert.BertClassifier)
    tokens, types = _batch(cfg, seed)
    with torch.no_grad():
        got = ours(tokens, types)
        want = theirs(input_ids=tokens, token_type_ids=types, attention_mask=(tokens != PAD).long()).logits
    real = tokens != PAD
    if kind == "BertForMaskedLM":  # (B, S, V): padded positions' outputs are never read, so compare real ones
        got, want = got[real], want[real]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    back = tl.hf.to_hf(ours)
    assert type(back).__name__ == kind
    mine, original = back.state_dict(), theirs.state_dict()
    assert set(mine) == set(original)
    for name, tensor in original.items():
        assert torch.equal(mine[name], tensor), name


def test_our_fresh_bert_runs_the_same_in_hugging_face():
    """The other direction: a model built here, saved with to_hf, computes what ours computes."""
    torch.manual_seed(0)
    cfg = bert.bert_config(vocab_size=40, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=12, dropout=0.0)
    for ours in (bert.BertForMaskedLM(cfg, token_types=2), bert.BertClassifier(cfg, 3, token_types=2)):
        _randomised(ours, 1)
        theirs = tl.hf.to_hf(ours)
        tokens = torch.tensor([[CLS, 9, 12, 30, SEP, 14, 7, SEP, PAD, PAD]])
        types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1, 1]])
        with torch.no_grad():
            got = ours(tokens, types)[..., :]
            want = theirs(input_ids=tokens, token_type_ids=types, attention_mask=(tokens != PAD).long()).logits
        if got.dim() == 3:
            got, want = got[tokens != PAD], want[tokens != PAD]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_masked_lm_head_reads_the_token_table_itself():
    model = bert.BertForMaskedLM(
        bert.bert_config(vocab_size=30, d_model=8, num_heads=2, num_layers=1, max_len=8)
    ).eval()
    table = model.bert.embeddings.word.weight
    with torch.no_grad():
        step = torch.linspace(-1, 1, 8)  # not a constant: a LayerNorm's output sums to 0 along a constant
        table[5] += step  # a change to the input table changes the output scores of word 5 only
        tokens = torch.tensor([[CLS, 7, 8]])
        before = model(tokens)
        table[5] -= step
        after = model(tokens)
    changed = (before - after).abs().amax(dim=(0, 1)) > 1e-6  # (V,)
    assert changed.nonzero().flatten().tolist() == [5]  # tied: the output layer is that table


def test_bert_differs_from_the_2017_encoder_where_the_text_says():
    cfg = bert.bert_config(vocab_size=30)
    assert (cfg.norm_first, cfg.positional, cfg.activation, cfg.scale_embedding, cfg.eps) == (
        False,
        "learned",
        "gelu",
        False,
        1e-12,
    )
    with pytest.raises(ValueError, match=r"not a BERT config; these fields differ .*'norm_first': \(True, False\)"):
        bert.BertModel(cfg.replace(norm_first=True))
    with pytest.raises(ValueError, match="at most max_len = 8 tokens, got 9"):
        bert.BertModel(cfg.replace(max_len=8))(torch.ones(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token_types must have the tokens' shape \(1, 3\), got \(1, 2\)"):
        bert.BertModel(cfg)(torch.ones(1, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
    relative = transformers.BertConfig(vocab_size=30, hidden_size=8, num_attention_heads=2, num_hidden_layers=1)
    relative.position_embedding_type = "relative_key"
    with pytest.raises(ValueError, match="only absolute positions are supported"):
        tl.hf._bert_config(relative)
    takes = "DecoderOnlyLM, BertForMaskedLM, BertClassifier, VisionTransformer, SpeechTranscriber, "
    takes += "BartForConditionalGeneration, Wav2Vec2ForCTC, Wav2Vec2ForPreTraining, CLIPModel, LatentLM"
    with pytest.raises(TypeError, match=f"to_hf takes one of {takes}, got Linear"):
        tl.hf.to_hf(torch.nn.Linear(2, 2))


def _corrupt(tokens, seed=0, rate=0.15, vocab_size=50):
    return bert.mask_tokens(
        tokens,
        mask_id=MASK,
        special_ids=SPECIAL,
        vocab_size=vocab_size,
        rate=rate,
        generator=torch.Generator().manual_seed(seed),
    )


def test_the_80_10_10_rule_on_many_positions():
    """Rates within five standard deviations of the binomial's, on 200,000 ordinary positions."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(len(SPECIAL), 50, (400, 500), generator=g)
    inputs, labels = _corrupt(tokens)
    chosen = labels != bert.IGNORE
    n, k = tokens.numel(), int(chosen.sum())

    def within(count, total, p):
        return abs(count - total * p) < 5 * math.sqrt(total * p * (1 - p))

    assert within(k, n, 0.15)
    masked = int((inputs[chosen] == MASK).sum())
    kept = int((inputs[chosen] == tokens[chosen]).sum())
    # a random word equal to the original by chance counts as kept: 1 in 46 ordinary words
    assert within(masked, k, 0.8)
    assert within(kept, k, 0.1 + 0.1 / 46)
    assert torch.equal(labels[chosen], tokens[chosen])  # the label is the original word
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # nothing else changes


def test_masking_never_touches_special_tokens_and_draws_only_ordinary_words():
    tokens = torch.tensor([[CLS] + list(range(4, 20)) + [SEP] + [PAD] * 6] * 300)
    inputs, labels = _corrupt(tokens, rate=0.9)
    special = torch.isin(tokens, torch.tensor(SPECIAL))
    assert (labels[special] == bert.IGNORE).all()
    assert torch.equal(inputs[special], tokens[special])
    drawn = inputs[(labels != bert.IGNORE) & (inputs != MASK)]
    assert drawn.numel() > 0 and not torch.isin(drawn, torch.tensor(SPECIAL)).any()
    again = _corrupt(tokens, rate=0.9)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)  # the generator decides everything
    assert not torch.equal(_corrupt(tokens, seed=1, rate=0.9)[0], inputs)


def test_masking_refuses_what_it_cannot_do():
    tokens = torch.tensor([[CLS, 5, 6]])
    with pytest.raises(ValueError, match=r"rate must be in \(0, 1\], got 1.5"):
        _corrupt(tokens, rate=1.5)
    with pytest.raises(ValueError, match="special_ids must include mask_id = 3"):
        bert.mask_tokens(tokens, mask_id=MASK, special_ids=(0, 1), vocab_size=50)
    with pytest.raises(ValueError, match="every id below vocab_size = 4 is special"):
        _corrupt(tokens, vocab_size=4)
    with pytest.raises(ValueError, match=r"tokens must be a \(B, S\) tensor"):
        _corrupt(torch.tensor([5, 6]))


def test_the_loss_reads_only_the_chosen_positions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=g, requires_grad=True)
    labels = torch.full((2, 5), bert.IGNORE)
    labels[0, 1], labels[1, 4] = 3, 7
    want = (F.cross_entropy(logits[0, 1], torch.tensor(3)) + F.cross_entropy(logits[1, 4], torch.tensor(7))) / 2
    torch.testing.assert_close(bert.mlm_loss(logits, labels), want)
    none = bert.mlm_loss(logits, torch.full((2, 5), bert.IGNORE))
    none.backward()
    assert none.item() == 0.0 and logits.grad.abs().sum() == 0  # no NaN from an empty batch
    with pytest.raises(ValueError, match=r"for the n = 1 chosen positions of labels \(2, 4\), got \(2, 5, 11\)"):
        bert.mlm_loss(logits, labels[:, :4])


def test_the_head_at_chosen_positions_only_gives_the_same_scores_and_loss():
    torch.manual_seed(0)
    model = bert.BertForMaskedLM(bert.bert_config(vocab_size=30, d_model=16, num_heads=2, num_layers=1, max_len=12))
    model.eval()
    tokens = torch.randint(len(SPECIAL), 30, (3, 10))
    inputs, labels = _corrupt(tokens, rate=0.3, vocab_size=30)
    chosen = labels != bert.IGNORE
    with torch.no_grad():
        every, some = model(inputs), model(inputs, at=chosen)  # (B, S, V), (n, V)
    torch.testing.assert_close(some, every[chosen])
    torch.testing.assert_close(bert.mlm_loss(some, labels), bert.mlm_loss(every, labels))
    with pytest.raises(ValueError, match=r"at must be a bool tensor of the tokens' shape \(3, 10\)"):
        model(inputs, at=chosen.long())


@pytest.mark.parametrize("kind", ["BertForMaskedLM", "BertForSequenceClassification"])
def test_a_config_without_a_pad_id_treats_no_token_as_padding_and_takes_attention_mask(kind):
    """Hugging Face hides keys by attention_mask alone. A BERT whose config names no pad_token_id converts to ours
    with no padding id: a real token 0 in the text is read (it was masked before, 1.9 apart), and an attention_mask
    with their meaning (1 = token, 0 = padding) hides the same keys in both."""
    cfg = _hf_config(3)
    cfg.pad_token_id = None
    theirs = _randomised(getattr(transformers, kind)(cfg), 3)
    ours = tl.hf.from_hf(theirs)
    assert ours.config.pad_id is None
    tokens, types = _batch(cfg, 3)
    tokens[:, 1:3] = 0  # id 0 in real text, in every row
    with torch.no_grad():
        torch.testing.assert_close(
            ours(tokens, types), theirs(input_ids=tokens, token_type_ids=types).logits, atol=1e-5, rtol=1e-5
        )
        mask = torch.ones_like(tokens)
        mask[1, -3:], mask[2, 4:] = 0, 0  # the same rows padded, now said by the mask, whatever the ids there
        got = ours(tokens, types, attention_mask=mask)
        want = theirs(input_ids=tokens, token_type_ids=types, attention_mask=mask).logits
    if kind == "BertForMaskedLM":
        got, want = got[mask.bool()], want[mask.bool()]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="attention_mask must have the tokens' shape"):
        ours(tokens, types, attention_mask=mask[:, :3])
    assert type(tl.hf.to_hf(ours)).__name__ == kind and tl.hf.to_hf(ours).config.pad_token_id is None


def test_hugging_face_berts_that_ours_would_compute_differently_are_refused_by_name():
    """is_decoder (a causal mask in transformers) and an untied output matrix converted silently before (logits 4.8
    and 6.3 apart): now each is refused with its field's name."""
    for field, value in [("is_decoder", True), ("tie_word_embeddings", False), ("add_cross_attention", True)]:
        cfg = _hf_config(1)
        setattr(cfg, field, value)
        if field == "add_cross_attention":
            cfg.is_decoder = True
        theirs = transformers.BertForMaskedLM(cfg).eval()
        with pytest.raises(ValueError, match=field):
            tl.hf.from_hf(theirs)
