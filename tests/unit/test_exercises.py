"""Every exercise checker accepts the reference solution and rejects typical mistakes with the right hint."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lib as tl
from transformer_lib import exercises as ex
from transformer_lib.exercises.ch03_positional_encoding import _doubled_exponent
from transformer_lib.exercises.ch12_modern_blocks import _rotate


def _attention(q, k, v, scale=True, axis=-1):
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1)
    return s.softmax(axis) @ v


def _pad(seqs, pad, left=False):
    n = max(len(s) for s in seqs)
    rows = [([pad] * (n - len(s)) + list(s)) if left else (list(s) + [pad] * (n - len(s))) for s in seqs]
    return torch.tensor(rows, dtype=torch.long)


def _encoding(max_len, d, swap=False):  # by hand: the checker refuses tl.sinusoidal_encoding
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    pe = torch.stack([angles.sin(), angles.cos()], -1).reshape(max_len, d)
    return torch.stack([pe[:, 1::2], pe[:, 0::2]], -1).reshape(max_len, d) if swap else pe


def _sample(logits, temperature, top_k, rng, divide=True):
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / temperature if divide else logits
    if top_k is not None:
        logits = logits.masked_fill(logits < logits.topk(top_k, -1).values[:, -1:], float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=rng)


def _windows(ids, starts, n, shift=1):
    offsets = torch.arange(n)
    return ids[starts[:, None] + offsets], ids[starts[:, None] + offsets + shift]


class _Layer(nn.Module):  # the learner's encoder layer of chapter 08 (the encoder)
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = tl.MultiHeadAttention(d_model, num_heads)
        self.feed_forward = tl.FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        z = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(z + self.feed_forward(z))


def _pre_ln_layer(layer, x, mask):
    h = layer.norm1(x)
    z = x + layer.self_attn(h, h, h, mask)[0]
    return z + layer.feed_forward(layer.norm2(z))


def _floor_experiment(V, eps, steps, lr=0.1, smoothing=True):
    logits = torch.zeros(V, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=lr)
    losses = []
    for _ in range(steps):
        loss = tl.label_smoothed_cross_entropy(logits, torch.tensor(0), smoothing=eps if smoothing else 0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _mask_fraction(mask, blocked=False, count=False):
    if blocked:
        mask = ~mask
    return mask.sum().item() if count else mask.float().mean().item()


def _scale_ratio(d, g, scale=True, inverse=False):
    tokens = torch.randn(500, d, generator=g) * (d**0.5 if scale else 1.0)  # nn.Embedding's N(0, 1) start
    ratio = tokens.norm(dim=-1).mean() / tl.sinusoidal_encoding(500, d).norm(dim=-1).mean()
    return (1 / ratio if inverse else ratio).item()


def _permutation_gap(layer, tokens, perm, use_pe, pe_after_permuting=False):
    pe = tl.sinusoidal_encoding(tokens.shape[1], tokens.shape[2])
    with torch.no_grad():
        if pe_after_permuting and use_pe:  # the mistake: positions travel with their tokens
            return (layer((tokens + pe)[:, perm]) - layer(tokens + pe)[:, perm]).abs().max().item()
        run = lambda t: layer(t + pe if use_pe else t)  # noqa: E731
        return (run(tokens[:, perm]) - run(tokens)[:, perm]).abs().max().item()


def _scaling_gradient(d_k, scale, g, always_scale=False, never_scale=False):
    q, k = torch.randn(64, d_k, generator=g), torch.randn(16, d_k, generator=g)
    divide = (scale or always_scale) and not never_scale
    scores = (q @ k.T / (math.sqrt(d_k) if divide else 1.0)).requires_grad_()
    (scores.softmax(-1) * torch.randn(64, 16, generator=g)).sum().backward()
    return scores.grad.norm(dim=-1).mean().item()


def _score_std(d_k, g, variance=False, scaled=False):
    dots = (torch.randn(10_000, d_k, generator=g) * torch.randn(10_000, d_k, generator=g)).sum(-1)
    dots = dots / math.sqrt(d_k) if scaled else dots
    return (dots.var() if variance else dots.std()).item()


def _padding_ablation(layer, tokens, num_pad, use_mask, mask_always=None):
    B, T, d = tokens.shape
    padded = torch.cat([tokens, torch.zeros(B, num_pad, d)], dim=1)
    keep = use_mask if mask_always is None else mask_always
    mask = torch.tensor([[True] * T + [False] * num_pad])[:, None, None, :] if keep else None
    with torch.no_grad():
        return (layer(padded, mask)[:, :T] - layer(tokens)).abs().max().item()


def _depth_growth(num_layers, seed, final_norm=False, norm_first=True):
    tl.set_seed(seed)
    stack = tl.Encoder(
        d_model=32,
        num_heads=4,
        num_layers=num_layers,
        d_ff=64,
        dropout=0.0,
        norm_first=norm_first,
        final_norm=final_norm,
    ).eval()
    with torch.no_grad():
        return stack(torch.randn(4, 10, 32)).std().item()


def _future_leak(lm, tokens, position, new_token, causal, compare_after=False, always_causal=False):
    changed = tokens.clone()
    changed[0, position] = new_token
    mask = tl.causal_mask(tokens.shape[1]) if (causal or always_causal) else None
    with torch.no_grad():
        logits = [lm.head(lm.decoder(lm.pos(lm.embed(t)), tgt_mask=mask)) for t in (tokens, changed)]
    part = slice(position, None) if compare_after else slice(0, position)
    return (logits[1][:, part] - logits[0][:, part]).abs().max().item()


def _pair_counts(words, weighted=True, overlapping=True):
    counts = Counter()
    for w, f in words.items():
        pairs = list(zip(w, w[1:]))
        for pair in pairs if overlapping else dict.fromkeys(pairs):
            counts[pair] += f if weighted else 1
    return counts


def _merge_ids(ids, pair, new_id, first_only=False, keep_second=False):
    out, i, done = [], 0, False
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair and not done:
            out += [new_id, ids[i + 1]] if keep_second else [new_id]
            i, done = i + 2, first_only
        else:
            out.append(ids[i])
            i += 1
    return out


def _compression(text, n, inverse=False, in_bytes=False):
    tokens = len(tl.train_bpe(text, n).encode(text))
    chars = len(text.encode("utf-8")) if in_bytes else len(text)
    return tokens / chars if inverse else chars / tokens


def _nucleus_set(probs, p, unsorted=False, too_few=False):
    sorted_probs, order = (probs, torch.arange(probs.numel())) if unsorted else probs.sort(descending=True)
    keep = sorted_probs.cumsum(0) < p if too_few else sorted_probs.cumsum(0) - sorted_probs < p
    return torch.zeros_like(keep).scatter(0, order, keep)


def _temperature_loss(logits, targets, t, nats=False, multiply=False):
    loss = F.cross_entropy(logits * t if multiply else logits / t, targets).item()
    return loss if nats else loss / math.log(2)


# (checker, reference solution, [(wrong answer, words the hint must contain), ...])
CASES = {
    "pair_counts": (ex.check_pair_counts, _pair_counts, [
        (lambda w: _pair_counts(w, weighted=False), "weight each word"),
        (lambda w: _pair_counts(w, overlapping=False), "overlapping"), (lambda w: [], "Return a dict")]),
    "merge": (ex.check_merge, _merge_ids, [
        (lambda i, p, n: _merge_ids(i, p, n, first_only=True), "every occurrence"),
        (lambda i, p, n: _merge_ids(i, p, n, keep_second=True), "both ids")]),
    "compression": (ex.check_compression, _compression, [
        (lambda t, n: _compression(t, n, inverse=True), "tokens per character"),
        (lambda t, n: _compression(t, n, in_bytes=True), "count characters"), (lambda t, n: "about 2", "as a number")]),
    "future_mask": (ex.check_future_mask, lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), [
        (lambda n: tl.causal_mask(n), "allowed mask"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(0), "diagonal is blocked"),
        (lambda n: torch.ones(n, n).triu(1), "bool tensor")]),
    "allowed_count": (ex.check_allowed_count, lambda n: n * (n + 1) // 2, [
        (lambda n: n * n, "every entry"), (lambda n: n * (n - 1) // 2, "include the diagonal")]),
    "cached_rows": (ex.check_cached_rows, lambda p, n: tl.causal_mask(p + n)[p:], [
        (lambda p, n: tl.causal_mask(p + n)[:n], "first rows"), (lambda p, n: tl.causal_mask(n), "cached keys too")]),
    "embed": (ex.check_embed, lambda ids, t: F.one_hot(ids, t.shape[0]).float() @ t, [
        (lambda ids, t: t @ t.T, "Expected shape"), (lambda ids, t: t[ids], "by hand"),
        (lambda ids, t: F.one_hot((ids + 1) % t.shape[0], t.shape[0]).float() @ t, "off by one")]),
    "embedding_parameters": (ex.check_embedding_parameters, lambda v, d: v * d, [
        (lambda v, d: v * d + d, "no bias"), (lambda v, d: v + d, "per token per dimension")]),
    "pad": (ex.check_pad, lambda s, p: _pad(s, p), [
        (lambda s, p: _pad(s, p, left=True), "on the left"), (lambda s, p: _pad(s, 0), "use the pad_id"),
        (lambda s, p: _pad(s, p).float(), "torch.long")]),
    "encoding": (ex.check_encoding, _encoding, [
        (lambda m, d: _encoding(m, d, swap=True), "swapped"), (_doubled_exponent, "exponent is doubled"),
        (lambda m, d: _encoding(m, d)[:, :-1], "Expected shape")]),
    "self_similarity": (ex.check_self_similarity, lambda d: d / 2, [
        (lambda d: float(d), "count pairs"), (lambda d: 1.0, "one pair")]),
    "wavelength": (ex.check_wavelength, lambda d, i: 2 * math.pi * 10000 ** (2 * i / d), [
        (lambda d, i: 10000 ** (2 * i / d), "2 pi"), (lambda d, i: 2 * math.pi * 10000 ** (4 * i / d), "doubled")]),
    "attention": (ex.check_attention, _attention, [
        (lambda q, k, v: _attention(q, k, v, scale=False), "sqrt(d_k)"),
        (lambda q, k, v: _attention(q, k, v, axis=-2), "over the keys"),
        (lambda q, k, v: (q @ k.transpose(-2, -1) / q.shape[-1]).softmax(-1) @ v, "not by d_k")]),
    "split": (ex.check_split, lambda t, h: t.view(t.shape[0], t.shape[1], h, -1).transpose(1, 2), [
        (lambda t, h: t.view(t.shape[0], h, t.shape[1], -1), "wrong content"), (lambda t, h: t, "Expected shape")]),
    "score_std": (ex.check_score_std, _score_std, [
        (lambda d, g: _score_std(d, g, variance=True), "variance"), (lambda d, g: _score_std(d, g, scaled=True), "after dividing"),
        (lambda d, g: math.sqrt(d), "nothing was measured")]),
    "padding_mask": (ex.check_padding_mask, lambda t, p: (t != p)[:, None, None, :], [
        (lambda t, p: (t == p)[:, None, None, :], "Reversed"), (lambda t, p: t != p, "broadcast"),
        (lambda t, p: (t != 0)[:, None, None, :], "hard-coded 0")]),
    "target_mask": (ex.check_target_mask, lambda t, p: (t != p)[:, None, None, :] & tl.causal_mask(t.shape[1]), [
        (lambda t, p: (t != p)[:, None, None, :].expand(-1, 1, t.shape[1], -1), "Only padding"),
        (lambda t, p: tl.causal_mask(t.shape[1]).expand(t.shape[0], 1, -1, -1), "Only the future"),
        (lambda t, p: ~((t != p)[:, None, None, :] & tl.causal_mask(t.shape[1])), "Reversed")]),
    "masks_needed": (ex.check_masks_needed, lambda f: {"encoder-only": {"padding"}, "decoder-only": {"causal"},
                                                       "encoder-decoder": {"padding", "causal"}}[f], [
        (lambda f: {"padding", "causal"}, "both directions"), (lambda f: {"padding"}, "causal mask")]),
    "layer_norm": (ex.check_layer_norm, lambda x, w, b, e: (x - x.mean(-1, True)) / (x.var(-1, False, True) + e).sqrt() * w + b, [
        (lambda x, w, b, e: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + e) * w + b, "biased"),
        (lambda x, w, b, e: (x - x.mean(-1, keepdim=True)) / (x.std(-1, unbiased=False, keepdim=True) + e) * w + b,
         "inside the square root"),
        (lambda x, w, b, e: (x - x.mean(-1, True)) / (x.var(-1, False, True) + e).sqrt(), "gain and the shift"),
        (lambda x, w, b, e: F.layer_norm(x, x.shape[-1:], w, b, e), "by hand")]),
    "pre_ln": (ex.check_pre_ln, lambda x, s, n: x + s(n(x)), [
        (lambda x, s, n: n(x + s(x)), "post-LN"), (lambda x, s, n: s(n(x)), "residual is missing")]),
    "batch_norm_mean": (ex.check_batch_norm_mean, lambda x: x.mean(dim=(0, 1)), [
        (lambda x: x.mean(-1), "layer norm"), (lambda x: x.mean(0), "positions too")]),
    "mask_fraction": (ex.check_mask_fraction, _mask_fraction, [
        (lambda m: _mask_fraction(m, blocked=True), "blocked"), (lambda m: _mask_fraction(m, count=True), "divide"),
        (lambda m: (m.shape[0] + 1) / (2 * m.shape[0]), "formula")]),
    "scale_ratio": (ex.check_scale_ratio, _scale_ratio, [
        (lambda d, g: _scale_ratio(d, g, scale=False), "multiply"), (lambda d, g: _scale_ratio(d, g, inverse=True), "upside down"),
        (lambda d, g: (2 * d) ** 0.5, "nothing was measured")]),
    "permutation_gap": (ex.check_permutation_gap, _permutation_gap, [
        (lambda *a: _permutation_gap(*a, pe_after_permuting=True), "shuffle the tokens first"),
        (lambda layer, t, p, u: _permutation_gap(layer, t, p, True), "rounding noise")]),
    "scaling_gradient": (ex.check_scaling_gradient, _scaling_gradient, [
        (lambda d, s, g: _scaling_gradient(d, s, g, always_scale=True), "even when scale is False"),
        (lambda d, s, g: _scaling_gradient(d, s, g, never_scale=True), "sqrt(d_k)")]),
    "padding_ablation": (ex.check_padding_ablation, _padding_ablation, [
        (lambda *a: _padding_ablation(*a, mask_always=False), "pass the padding mask"),
        (lambda *a: _padding_ablation(*a, mask_always=True), "mask=None")]),
    "depth_growth": (ex.check_depth_growth, _depth_growth, [
        (lambda n, s: _depth_growth(n, s, final_norm=True), "final_norm=False"),
        (lambda n, s: _depth_growth(n, s, norm_first=False), "still normalised")]),
    "future_leak": (ex.check_future_leak, _future_leak, [
        (lambda *a: _future_leak(*a, compare_after=True), "before the token you change"),
        (lambda *a: _future_leak(*a, always_causal=True), "tgt_mask=None")]),
    "noam": (ex.check_noam, lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-1.5), [
        (lambda n, d, w: min(n**-0.5, n * w**-1.5), "d_model ** -0.5"),
        (lambda n, d, w: d**-0.5 * max(n**-0.5, n * w**-1.5), "min, not max"),
        (lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-0.5), "expected")]),
    "smoothing_floor": (ex.check_smoothing_floor, tl.smoothing_floor, [
        (lambda V, e: -(1 - e) * math.log(1 - e) - e * math.log(e / (V - 1)), "all V classes"),
        (lambda V, e: math.log(V), "entropy of the smoothed target"),
        (lambda V, e: tl.smoothing_floor(V, e) + 0.01, "expected")]),
    "floor_experiment": (ex.check_floor_experiment, _floor_experiment, [
        (lambda V, e, n: _floor_experiment(V, e, n, lr=0.001), "still above the floor"),
        (lambda V, e, n: _floor_experiment(V, e, n, smoothing=False), "below the floor"),
        (lambda V, e, n: tl.smoothing_floor(V, e), "closed form")]),
    "mean_pool": (ex.check_mean_pool, lambda h, m: (h * m[:, 0, 0, :, None]).sum(1) / m[:, 0, 0].sum(1, keepdim=True), [
        (lambda h, m: h.mean(1), "padding is averaged"), (lambda h, m: (h * m[:, 0, 0, :, None]).sum(1) / 5, "real tokens")]),
    "first_pool": (ex.check_first_pool, lambda h: h[:, 0], [
        (lambda h: h[:, -1], "last position"), (lambda h: h.mean(1), "mean pooling")]),
    "sample": (ex.check_sample, _sample, [
        (lambda lg, t, k, g: torch.multinomial(lg.softmax(-1), 1, generator=g), "argmax"),
        (lambda lg, t, k, g: _sample(lg, t, None, g), "top_k=2"),
        (lambda lg, t, k, g: _sample(lg, t, k, g, divide=False), "temperature")]),
    "windows": (ex.check_windows, _windows, [
        (lambda i, s, n: _windows(i, s, n, shift=0), "shifted by one"), (lambda i, s, n: _windows(i, s, n, shift=-1), "wrong way")]),
    "kv_cache_bytes": (ex.check_kv_cache_bytes, lambda L, d, T, B, nb: 2 * L * d * T * B * nb, [
        (lambda L, d, T, B, nb: L * d * T * B * nb, "keys AND values"), (lambda L, d, T, B, nb: 2 * L * d * T * B, "bytes")]),
    "bits_per_char": (ex.check_bits_per_char, lambda n, t, c: n * t / c / math.log(2), [
        (lambda n, t, c: n * t / c, "log(2)"), (lambda n, t, c: n / math.log(2), "bits per token"),
        (lambda n, t, c: n * c / t / math.log(2), "upside down")]),
    "nucleus_set": (ex.check_nucleus_set, lambda pr, p: tl.nucleus(pr.log(), p), [
        (lambda pr, p: _nucleus_set(pr, p, too_few=True), "too few"),
        (lambda pr, p: _nucleus_set(pr, p, unsorted=True), "sort by probability"),
        (lambda pr, p: pr > p, "always kept"), (lambda pr, p: pr > 0, "too many")]),
    "temperature_loss": (ex.check_temperature_loss, _temperature_loss, [
        (lambda lg, y, t: _temperature_loss(lg, y, t, nats=True), "nats"),
        (lambda lg, y, t: _temperature_loss(lg, y, t, multiply=True), "multiplied"),
        (lambda lg, y, t: None if t > 5 else "low", "as a number")]),
    "shift": (ex.check_shift, lambda t: (t[:, :-1], t[:, 1:]), [
        (lambda t: (t[:, 1:], t[:, :-1]), "Swapped"), (lambda t: (t, t[:, 1:]), "not shifted")]),
    "loss_positions": (ex.check_loss_positions, lambda y, p: y != p, [
        (lambda y, p: y == p, "Reversed"), (lambda y, p: (y != p) & (y != 2), "<eos>")]),
    "rms_norm": (ex.check_rms_norm, lambda x, w, e: x / (x.pow(2).mean(-1, keepdim=True) + e).sqrt() * w, [
        (lambda x, w, e: torch.nn.functional.layer_norm(x, x.shape[-1:], w, None, e), "LayerNorm"),
        (lambda x, w, e: x / (x.pow(2).mean(-1, keepdim=True) + e).sqrt(), "weight"),
        (lambda x, w, e: x / (x.pow(2).sum(-1, keepdim=True) + e).sqrt() * w, "mean of the squares"),
        (lambda x, w, e: x / x.pow(2).mean(-1, keepdim=True).sqrt() * w, "eps")]),
    "rotary": (ex.check_rotary, lambda x, pos: _rotate(x, pos), [
        (lambda x, pos: _rotate(x, pos, pairs="adjacent"), "adjacent pairs"),
        (lambda x, pos: _rotate(x, -pos), "wrong way"),
        (lambda x, pos: _rotate(x, pos * 2), "angles"), (lambda x, pos: tl.apply_rotary(x, pos), "by hand")]),
    "position_accuracy": (ex.check_position_accuracy, lambda p, t, s: (p[:, s:] == t[:, :-s]).float().mean(0), [
        (lambda p, t, s: (p[:, :-s] == t[:, s:]).float().mean(0), "wrong way"),
        (lambda p, t, s: (p == t.roll(s, 1)).float().mean(0), "T - shift")]),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_checker_accepts_the_solution_and_explains_mistakes(name):
    check, solution, wrong_answers = CASES[name]
    assert check(solution) == ex.CORRECT
    assert len(wrong_answers) >= 2
    for wrong, hint in wrong_answers:
        feedback = check(wrong)
        assert feedback != ex.CORRECT, f"{name}: a wrong answer was accepted"
        assert hint.lower() in feedback.lower(), f"{name}: expected a hint about {hint!r}, got {feedback!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stub_is_not_answered_and_a_student_stub_raises_a_friendly_error(name):
    check = CASES[name][0]
    assert check(lambda *args: None).startswith("Not answered yet")

    def student_stub(*args):
        raise tl.NotYetDone(f"exercise {name}")

    with pytest.raises(tl.NotYetDone, match=f"exercise {name} is not done yet"):
        check(student_stub)


def test_pre_ln_layer_checker():
    assert ex.check_pre_ln_layer(_pre_ln_layer, _Layer) == ex.CORRECT
    assert "post-LN order" in ex.check_pre_ln_layer(lambda layer, x, m: layer(x, m), _Layer)
    assert "Not quite" in ex.check_pre_ln_layer(lambda layer, x, m: x + layer.self_attn(x, x, x, m)[0], _Layer)


def test_greedy_checker():
    src_tok, tgt_tok = tl.CharTokenizer("0123456789"), tl.CharTokenizer("abcdefgh ")
    model = tl.Transformer(
        vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=16,
        num_heads=2,
        num_layers=1,
        d_ff=32,
        dropout=0.0,
    ).eval()

    def solution(m, src, bos, eos, n):  # by hand: the checker refuses m.greedy_decode
        memory, out = m.encode(src, m.make_src_mask(src)), torch.tensor([[bos]])
        for _ in range(n):
            next_id = m.decode(out, memory, m.make_src_mask(src))[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, next_id], dim=1)
            if next_id.item() == eos:
                break
        return out

    assert ex.check_greedy(solution, model, src_tok, tgt_tok) == ex.CORRECT
    assert "by hand" in ex.check_greedy(lambda m, s, b, e, n: m.greedy_decode(s, b, e, n), model, src_tok, tgt_tok)
    assert "Start the output with bos_id" in ex.check_greedy(
        lambda m, s, b, e, n: solution(m, s, b, e, n)[:, 1:], model, src_tok, tgt_tok
    )
    wrong = lambda m, s, b, e, n: torch.cat([solution(m, s, b, e, n), torch.full((1, 1), tgt_tok.stoi["a"])], dim=1)
    assert ex.check_greedy(wrong, model, src_tok, tgt_tok) != ex.CORRECT


def _trained_enough_classifier():
    tl.set_seed(0)
    tok = tl.CharTokenizer("()[]")
    x, y = tl.encode_labelled(tl.brackets_task(200, seed=3, max_pairs=4), tok, bos=True)
    model = tl.EncoderClassifier(
        vocab_size=tok.vocab_size,
        num_classes=2,
        d_model=16,
        num_heads=2,
        num_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=32,
    ).eval()
    return model, x, y


def _head_off(model, x, y, layer, head, restore=True, switch_off=True):
    attn = model.encoder.layers[layer].self_attn
    saved = attn.out_proj.weight.detach().clone()
    with torch.no_grad():
        if switch_off:
            attn.out_proj.weight[:, head * attn.d_k : (head + 1) * attn.d_k] = 0.0
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
        if restore:
            attn.out_proj.weight.copy_(saved)
    return accuracy


def test_head_ablation_checker_measures_what_the_learner_measures_and_wants_the_model_back():
    model, x, y = _trained_enough_classifier()
    assert ex.check_head_ablation(_head_off, model, x, y) == ex.CORRECT
    assert "Not answered" in ex.check_head_ablation(lambda *a: None, model, x, y)
    feedback = ex.check_head_ablation(lambda *a: _head_off(*a, restore=False), model, x, y)
    assert "put the head back" in feedback
    assert ex.check_head_ablation(_head_off, model, x, y) == ex.CORRECT  # the checker restored the weights
    full = ex.check_head_ablation(lambda *a: _head_off(*a, switch_off=False), model, x, y)
    assert full != ex.CORRECT and ("every head on" in full or "expected accuracy" in full)


def _token_accuracy(model, src, tgt, ablate, count_pad=False, ignore_ablate=False):
    with torch.no_grad():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        if ablate and not ignore_ablate:
            memory = torch.zeros_like(memory)
        logits = model.decode(tgt[:, :-1], memory, src_mask)
        hit = logits.argmax(-1) == tgt[:, 1:]
        return (hit.float().mean() if count_pad else hit[tgt[:, 1:] != model.pad_id].float().mean()).item()


def test_memory_ablation_checker_compares_with_its_own_measurement():
    tl.set_seed(0)
    model = tl.Transformer(
        vocab_size=12, tgt_vocab_size=9, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0
    ).eval()
    src = torch.randint(1, 12, (64, 6), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(1, 9, (64, 7), generator=torch.Generator().manual_seed(2))
    tgt[:32, 5:] = 0  # padding at the end of half the rows
    with torch.no_grad():  # make the encoder's output matter, so that zeroing it changes the predictions
        for layer in model.decoder.layers:
            layer.cross_attn.out_proj.weight.mul_(30.0)
    assert ex.check_memory_ablation(_token_accuracy, model, src, tgt) == ex.CORRECT
    assert "replace the encoder's output" in ex.check_memory_ablation(
        lambda *a: _token_accuracy(*a, ignore_ablate=True), model, src, tgt
    )
    assert "not padding" in ex.check_memory_ablation(lambda *a: _token_accuracy(*a, count_pad=True), model, src, tgt)
