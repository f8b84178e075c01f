"""wav2vec 2.0's parts against transformers' Wav2Vec2ForPreTraining; the masks and distractors by statistics."""

import math

import pytest
import torch
from scipy import stats
from torch import nn

from transformer_lib import wav2vec2 as w2v

transformers = pytest.importorskip("transformers")


def _hf_model(seed=0, groups=2, entries=5, **overrides):
    torch.manual_seed(seed)
    cfg = dict(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=24,
        conv_dim=(8, 8),
        conv_kernel=(10, 3),
        conv_stride=(5, 2),
        num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2,
        codevector_dim=12,
        num_codevector_groups=groups,
        num_codevectors_per_group=entries,
        proj_codevector_dim=10,
        num_negatives=4,
        diversity_loss_weight=0.1,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        feat_quantizer_dropout=0.0,
        final_dropout=0.0,
        layerdrop=0.0,
    )
    cfg.update(overrides)
    return transformers.Wav2Vec2ForPreTraining(transformers.Wav2Vec2Config(**cfg))


def _ours_from(hf_quantizer, d_in, groups, entries, code_dim):
    ours = w2v.GumbelQuantizer(d_in, groups, entries, code_dim)
    with torch.no_grad():
        ours.scores.weight.copy_(hf_quantizer.weight_proj.weight)
        ours.scores.bias.copy_(hf_quantizer.weight_proj.bias)
        ours.codebooks.copy_(hf_quantizer.codevectors.view(groups, entries, code_dim // groups))
    ours.tau = hf_quantizer.temperature
    return ours


@pytest.mark.parametrize(("groups", "entries", "code_dim"), [(2, 5, 12), (1, 7, 9), (3, 4, 15)])
def test_the_quantizer_equals_hugging_faces_in_eval_and_in_training(groups, entries, code_dim):
    hf = _hf_model(1, groups=groups, entries=entries, codevector_dim=code_dim).quantizer
    ours = _ours_from(hf, 8, groups, entries, code_dim)
    x = torch.randn(3, 11, 8)
    mask = torch.rand(3, 11) < 0.5
    for training in (False, True):
        hf.train(training)
        ours.train(training)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2)
            x_hf = x.clone().requires_grad_()
            theirs, their_ppl = hf(x_hf, mask_time_indices=mask)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2)  # the same Gumbel noise, drawn in the same order
            x_ours = x.clone().requires_grad_()
            codes, ppl, chosen = ours(x_ours, mask)
        assert torch.allclose(codes, theirs, atol=1e-6) and torch.allclose(ppl, their_ppl, atol=1e-5)
        picked = ours.codebooks[torch.arange(groups), chosen]  # (B, T, G, code_dim / G): the entries named
        assert torch.allclose(codes, picked.flatten(2), atol=1e-6)
        if training:  # straight-through: the soft choice's gradient reaches the input
            (codes * torch.linspace(-1, 1, code_dim)).sum().backward()
            (theirs * torch.linspace(-1, 1, code_dim)).sum().backward()
            assert x_ours.grad.abs().sum() > 0 and torch.allclose(x_ours.grad, x_hf.grad, atol=1e-5)
    assert 1.0 <= float(ppl.detach()) <= groups * entries


def test_perplexity_is_the_number_of_entries_in_use():
    q = w2v.GumbelQuantizer(4, groups=2, entries=8, code_dim=4).eval()
    with torch.no_grad():
        q.scores.weight.zero_()
        q.scores.bias.zero_()
        q.scores.bias[torch.tensor([3, 8 + 5])] = 1.0  # every frame picks entry 3, then entry 5
    _, ppl, chosen = q(torch.randn(2, 6, 4))
    assert float(ppl) == pytest.approx(2.0) and (chosen == torch.tensor([3, 5])).all()
    assert float(w2v.diversity_loss(ppl, 2, 8)) == pytest.approx(14 / 16)


def test_the_pretraining_loss_equals_hugging_faces_on_the_same_masks_and_distractors():
    g = torch.Generator().manual_seed(3)
    for training in (False, True):
        model = _hf_model(4)
        model.train(training)
        samples = 16 * 50
        frames = w2v.conv_frames(samples, (10, 3), (5, 2))
        mask = w2v.span_mask(2, frames, start_prob=0.1, span=4, min_spans=2, generator=g)
        negatives = w2v.sample_negatives(mask, 4, generator=g)  # (B, T, K) within each clip
        flat = negatives + (torch.arange(2) * frames)[:, None, None]  # Hugging Face's: indices into B * T
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            out = model(torch.randn(2, samples), mask_time_indices=mask, sampled_negative_indices=flat)
        logits = w2v.contrastive_logits(out.projected_states, out.projected_quantized_states, negatives, 0.1)
        contrastive = w2v.contrastive_loss(logits, mask)
        diversity = w2v.diversity_loss(out.codevector_perplexity, 2, 5) * mask.sum()
        assert torch.allclose(contrastive + 0.1 * diversity, out.loss, rtol=1e-5), training
        assert torch.isinf(logits[..., 1:][mask]).any() or not training  # codes repeat: same-code distractors out


def test_conv_geometry_and_frames_match_the_paper_pytorch_and_hugging_face():
    assert w2v.conv_geometry() == (400, 320)  # 25 ms every 20 ms at 16 kHz
    assert w2v.conv_frames(16000) == 49
    g = torch.Generator().manual_seed(6)
    for _ in range(20):
        n = int(torch.randint(1, 5, (1,), generator=g))
        kernels = tuple(int(k) for k in torch.randint(1, 6, (n,), generator=g))
        strides = tuple(int(s) for s in torch.randint(1, 4, (n,), generator=g))
        samples = int(torch.randint(1, 400, (1,), generator=g))
        stack = nn.Sequential(*[nn.Conv1d(1, 1, k, s) for k, s in zip(kernels, strides)])
        try:
            length = stack(torch.zeros(1, 1, samples)).shape[-1]
        except RuntimeError:  # too short for some layer: PyTorch refuses, we say 0 frames
            length = 0
        assert w2v.conv_frames(samples, kernels, strides) == length, (kernels, strides, samples)
        field, hop = w2v.conv_geometry(kernels, strides)
        assert hop == math.prod(strides) and w2v.conv_frames(field, kernels, strides) == 1
        assert field == 1 or w2v.conv_frames(field - 1, kernels, strides) == 0  # the smallest input of one frame
        tiny = dict(hidden_size=4, num_hidden_layers=1, num_attention_heads=1, intermediate_size=4)
        tiny.update(num_conv_pos_embeddings=2, num_conv_pos_embedding_groups=1)
        cfg = transformers.Wav2Vec2Config(conv_dim=(1,) * n, conv_kernel=kernels, conv_stride=strides, **tiny)
        theirs = transformers.Wav2Vec2Model(cfg)._get_feat_extract_output_lengths(torch.tensor(max(samples, field)))
        assert int(theirs) == w2v.conv_frames(max(samples, field), kernels, strides)


def test_span_masks_hide_the_papers_share_and_spans_have_the_papers_length():
    g = torch.Generator().manual_seed(7)
    mask = w2v.span_mask(400, 300, generator=g)  # 0.065 and 10, the paper's
    interior = mask[:, 20:].float().mean()  # away from the start, where fewer spans can reach
    assert abs(float(interior) - (1 - (1 - 0.065) ** 10)) < 0.01
    lone = w2v.span_mask(3000, 40, start_prob=0.005, span=6, generator=g)  # rare starts: most spans alone
    runs, first, last = [], [], []
    for row in lone:
        edges = torch.diff(torch.cat([torch.tensor([0]), row.int(), torch.tensor([0])]))
        begins, ends = (edges == 1).nonzero().flatten(), (edges == -1).nonzero().flatten()
        runs += (ends - begins).tolist()
        first += [int(e - b) for b, e in zip(begins, ends) if b == 0]
        last += [int(e - b) for b, e in zip(begins, ends) if e == 40]
    assert max(set(runs), key=runs.count) == 6  # cut only at the clip's end, merged only when starts meet
    assert first and min(first) >= 6  # a span runs forward from its start: at frame 0 it is whole
    assert last and min(last) < 6  # and the clip's end cuts it
    at_least = w2v.span_mask(50, 30, start_prob=0.0, span=3, min_spans=2, generator=g)
    assert (at_least.sum(dim=1) >= 3).all() and (at_least.sum(dim=1) <= 6).all()


def test_distractors_come_from_the_other_hidden_frames_of_the_same_clip_uniformly():
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[0, [1, 2, 3, 7, 9]] = True
    mask[1, [0, 11]] = True
    negatives = w2v.sample_negatives(mask, 3000, generator=torch.Generator().manual_seed(8))
    assert negatives.shape == (2, 12, 3000)
    for t in (1, 2, 3, 7, 9):
        drawn = negatives[0, t]
        assert set(drawn.tolist()) == {1, 2, 3, 7, 9} - {t}  # the others, never itself
        counts = torch.bincount(drawn, minlength=12)[[i for i in (1, 2, 3, 7, 9) if i != t]]
        assert stats.chisquare(counts.numpy()).pvalue > 1e-3
    assert (negatives[1, 0] == 11).all() and (negatives[1, 11] == 0).all()
    assert (negatives[0, 0] == 0).all()  # a frame not hidden: its own index, never read


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: w2v.sample_negatives(torch.tensor([[True, False, False]]), 2), "clip 0 has 1 hidden frame"),
        (lambda: w2v.sample_negatives(torch.ones(2, 3), 2), "mask must be bool"),
        (lambda: w2v.span_mask(2, 10, start_prob=1.5), "start_prob must be a probability"),
        (lambda: w2v.span_mask(2, 10, min_spans=11), "min_spans must be an int from 0 to frames = 10"),
        (lambda: w2v.conv_geometry((3, 3), (2,)), "one stride per kernel"),
        (lambda: w2v.GumbelQuantizer(8, groups=3, entries=4, code_dim=10), "code_dim must be divisible by groups"),
        (
            lambda: w2v.contrastive_logits(torch.zeros(1, 4, 3), torch.zeros(1, 4, 2), torch.zeros(1, 4, 2).long()),
            "share a shape",
        ),
        (lambda: w2v.contrastive_loss(torch.zeros(1, 4, 3), torch.ones(1, 4)), "mask must be bool of shape"),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("seed", range(6))
def test_wav2vec2_for_ctc_converts_both_ways_with_the_same_logits_on_random_configurations(seed):
    from transformer_lib.hf import from_hf, to_hf

    g = torch.Generator().manual_seed(seed)

    def pick(*options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    heads = pick(1, 3, 4)
    layers = pick(1, 2)
    config = transformers.Wav2Vec2Config(
        vocab_size=pick(5, 9, 32),
        hidden_size=heads * pick(3, 5),  # odd widths too
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=pick(7, 20),
        conv_dim=[pick(5, 8) for _ in range(3)],
        conv_kernel=[pick(10, 7), pick(3, 2), pick(3, 2)],
        conv_stride=[pick(5, 3), 2, pick(2, 1)],
        conv_bias=pick(False, True),
        feat_extract_norm=pick("group", "layer"),
        do_stable_layer_norm=pick(False, True),
        num_conv_pos_embeddings=pick(4, 5),
        num_conv_pos_embedding_groups=pick(1, heads),
        layer_norm_eps=pick(1e-5, 1e-6),
    )
    torch.manual_seed(seed)
    theirs = transformers.Wav2Vec2ForCTC(config).eval()
    ours = from_hf(theirs)
    samples = torch.randn(2, 300, generator=g)
    with torch.no_grad():
        want = theirs(input_values=samples).logits
        assert (
            ours(samples).shape
            == want.shape
            == (2, w2v.conv_frames(300, config.conv_kernel, config.conv_stride), config.vocab_size)
        )
        torch.testing.assert_close(ours(samples), want, atol=1e-5, rtol=0)
        back = to_hf(ours)
        torch.testing.assert_close(back(input_values=samples).logits, want, atol=1e-5, rtol=0)
        mask = w2v.span_mask(2, want.shape[1], start_prob=0.2, span=2, min_spans=1, generator=g)
        hidden, features = ours.wav2vec2(samples, mask)
        out = theirs.wav2vec2(input_values=samples, mask_time_indices=mask)
        torch.testing.assert_close(hidden, out.last_hidden_state, atol=1e-5, rtol=0)
        torch.testing.assert_close(features, out.extract_features, atol=1e-5, rtol=0)
    assert type(back).__name__ == "Wav2Vec2ForCTC" and back.config.do_stable_layer_norm == config.do_stable_layer_norm


def test_what_the_book_does_not_build_is_refused_by_name():
    from transformer_lib.hf import from_hf

    small = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, conv_dim=(4,))
    small |= dict(conv_kernel=(4,), conv_stride=(2,), num_conv_pos_embeddings=2, num_conv_pos_embedding_groups=1)
    for field, value in (("hidden_act", "relu"), ("feat_extract_activation", "relu"), ("add_adapter", True)):
        theirs = transformers.Wav2Vec2ForCTC(transformers.Wav2Vec2Config(**small, **{field: value})).eval()
        with pytest.raises(ValueError, match=field):
            from_hf(theirs)


def test_our_pretraining_model_gives_hugging_faces_loss_with_the_same_weights_both_ways():
    from transformer_lib.hf import from_hf, to_hf

    g = torch.Generator().manual_seed(9)
    theirs = _hf_model(10, groups=2, entries=5, layerdrop=0.0)
    ours = from_hf(theirs.eval())
    assert isinstance(ours, w2v.Wav2Vec2ForPreTraining) and ours.quantizer.codebooks.shape == (2, 5, 6)
    samples = torch.randn(2, 800, generator=g)
    frames = w2v.conv_frames(800, (10, 3), (5, 2))
    mask = w2v.span_mask(2, frames, start_prob=0.1, span=4, min_spans=2, generator=g)
    negatives = w2v.sample_negatives(mask, 4, generator=g)
    flat = negatives + (torch.arange(2) * frames)[:, None, None]
    for training in (False, True):
        theirs.train(training)
        ours.train(training)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(11)
            want = theirs(samples, mask_time_indices=mask, sampled_negative_indices=flat)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(11)  # the same Gumbel noise: drawn after the same layers in the same order
            loss, contrastive, diversity = ours.loss(samples, mask, negatives)
        torch.testing.assert_close(loss, want.loss, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(contrastive, want.contrastive_loss, rtol=1e-5, atol=1e-4)
    ours.eval()
    back = to_hf(ours)
    with torch.no_grad():
        context, targets, perplexity = ours(samples, mask)
        out = back(samples, mask_time_indices=mask)
    torch.testing.assert_close(context, out.projected_states, atol=1e-5, rtol=0)
    torch.testing.assert_close(targets, out.projected_quantized_states, atol=1e-5, rtol=0)
    torch.testing.assert_close(perplexity, out.codevector_perplexity, atol=1e-5, rtol=0)
    assert type(back).__name__ == "Wav2Vec2ForPreTraining" and back.config.diversity_loss_weight == 0.1


def test_pretraining_refuses_a_model_that_would_not_hide_frames_and_keeps_its_temperature():
    from transformer_lib.hf import from_hf

    with pytest.raises(ValueError, match="apply_spec_augment=False"):
        from_hf(_hf_model(12, apply_spec_augment=False).eval())
    with pytest.raises(ValueError, match="no mask vector"):
        from_hf(_hf_model(12, mask_time_prob=0.0, mask_feature_prob=0.0).eval())
    theirs = _hf_model(12)
    theirs.set_gumbel_temperature(0.7)  # annealed in training: an attribute, not a config field
    assert from_hf(theirs.eval()).quantizer.tau == pytest.approx(0.7)
