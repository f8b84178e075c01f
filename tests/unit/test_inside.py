"""transformer_lib.inside: what it captures adds up by hand and equals Hugging Face's hidden states and attentions."""

import pytest
import torch

import transformer_lib as tl
from transformer_lib import inside
from transformer_lib.hf import to_hf

GPT2_LIKE = dict(
    norm_first=True, positional="learned", activation="gelu_tanh", scale_embedding=False, tie_embeddings=True
)
LLAMA_LIKE = dict(norm_first=True, norm="rms", positional="rope", activation="swiglu", d_ff=48, num_kv_heads=2,
                  bias=False, tie_embeddings=False, scale_embedding=False)  # fmt: skip


def _lm(seed=0, **fields):
    torch.manual_seed(seed)
    config = dict(vocab_size=50, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=64)
    return tl.DecoderOnlyLM(**(config | fields)).eval()


def _tokens(B=2, T=11, seed=1):
    return torch.randint(0, 50, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("norm_first", [True, False])
def test_the_residual_stream_adds_up_and_the_heads_sum_to_the_attention_output(norm_first):
    model = _lm(norm_first=norm_first)
    x = _tokens()
    logits, cache = inside.run_with_cache(model, x)
    with torch.no_grad():
        torch.testing.assert_close(logits, model(x))  # capturing changes nothing
    assert set(cache) == set(inside.hook_points(model))
    for i, layer in enumerate(model.decoder.layers):
        p = f"decoder.layers.{i}"
        pre, attn, mid = cache[f"{p}.resid_pre"], cache[f"{p}.self_attn.out"], cache[f"{p}.self_attn.resid"]
        ff, post = cache[f"{p}.feed_forward.out"], cache[f"{p}.resid_post"]
        with torch.no_grad():
            if norm_first:  # pre-LN: each sublayer's output is added to the stream as it is
                torch.testing.assert_close(mid, pre + attn)
                torch.testing.assert_close(post, mid + ff)
            else:  # post-LN: added, then normalised
                torch.testing.assert_close(mid, layer.norm1(pre + attn))
                torch.testing.assert_close(post, layer.norm3(mid + ff))
        assert torch.equal(cache[f"{p}.feed_forward.resid"], post)
        if i:
            assert torch.equal(pre, cache[f"decoder.layers.{i - 1}.resid_post"])
        heads = cache[f"{p}.self_attn.heads"]  # (B, T, h, d_k)
        assert heads.shape == (2, 11, 4, 8)
        parts = inside.head_contributions(model, cache, f"{p}.self_attn.heads")  # (B, T, h, d)
        torch.testing.assert_close(parts.sum(2) + layer.self_attn.out_proj.bias, attn, atol=1e-5, rtol=1e-5)
        pattern = cache[f"{p}.self_attn.pattern"]  # (B, h, T, T): causal, rows sum to 1
        assert pattern.shape == (2, 4, 11, 11) and torch.allclose(pattern.sum(-1), torch.ones(2, 4, 11))
        assert torch.all(pattern.triu(1) == 0)
        # the pattern times the values is each head's output
        v = layer.self_attn.split_heads(layer.self_attn.v_proj(layer.norm1(pre) if norm_first else pre))
        with torch.no_grad():
            torch.testing.assert_close((pattern @ v).transpose(1, 2), heads, atol=1e-5, rtol=1e-5)


def test_an_encoder_decoder_has_every_point_and_cross_attention():
    torch.manual_seed(0)
    model = tl.Transformer(vocab_size=20, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0).eval()
    src, tgt = torch.randint(1, 20, (2, 7)), torch.randint(1, 20, (2, 5))
    out, cache = inside.run_with_cache(model, src, tgt)
    assert cache["decoder.layers.0.cross_attn.pattern"].shape == (2, 2, 5, 7)
    assert cache["encoder.layers.0.self_attn.pattern"].shape == (2, 2, 7, 7)
    mid, cross = cache["decoder.layers.0.self_attn.resid"], cache["decoder.layers.0.cross_attn.out"]
    with torch.no_grad():  # post-LN by default
        torch.testing.assert_close(
            cache["decoder.layers.0.cross_attn.resid"], model.decoder.layers[0].norm2(mid + cross)
        )
    assert list(cache) and set(cache) == set(inside.hook_points(model))


def _eager(hf_model):
    hf_model.config._attn_implementation = "eager"  # the attention weights are returned by eager attention only
    return hf_model


@pytest.mark.parametrize("fields", [GPT2_LIKE, LLAMA_LIKE], ids=["gpt2", "llama"])
def test_residual_streams_and_patterns_equal_hugging_face_hidden_states_and_attentions(fields):
    ours = _lm(**fields)
    if ours.head.bias is not None:
        torch.nn.init.zeros_(ours.head.bias)  # GPT-2 and Llama have none
    theirs = _eager(to_hf(ours))
    x = _tokens()
    logits, cache = inside.run_with_cache(ours, x)
    with torch.no_grad():
        out = theirs(x, output_hidden_states=True, output_attentions=True)
    n = len(ours.decoder.layers)
    assert len(out.hidden_states) == n + 1 and len(out.attentions) == n
    for i in range(n):  # hidden_states[i] enters layer i; the last one has been through the final norm
        torch.testing.assert_close(cache[f"decoder.layers.{i}.resid_pre"], out.hidden_states[i], atol=1e-5, rtol=0)
        torch.testing.assert_close(cache[f"decoder.layers.{i}.self_attn.pattern"], out.attentions[i], atol=1e-5, rtol=0)
    with torch.no_grad():
        final = ours.decoder.norm(cache[f"decoder.layers.{n - 1}.resid_post"])
    torch.testing.assert_close(final, out.hidden_states[n], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=0)


def test_zero_ablating_a_head_equals_zeroing_its_columns_of_the_output_projection():
    model = _lm(**GPT2_LIKE)
    x = _tokens()
    with inside.intervene(model, {"decoder.layers.1.self_attn.heads": inside.zero_heads(2)}), torch.no_grad():
        ablated = model(x)
    w = model.decoder.layers[1].self_attn.out_proj.weight
    saved = w.detach().clone()
    with torch.no_grad():
        w[:, 16:24] = 0.0  # head 2 of 4, d_k = 8
        by_weights = model(x)
        w.copy_(saved)
        again = model(x)
    torch.testing.assert_close(ablated, by_weights, atol=1e-5, rtol=0)
    assert not torch.allclose(ablated, again), "the ablation must change the output"
    assert torch.equal(again, model(x).detach()), "intervene must leave the model as it was"


def test_patching_everything_from_another_run_gives_that_run_and_patching_a_position_changes_only_later_ones():
    model = _lm(**LLAMA_LIKE)
    clean, corrupt = _tokens(seed=1), _tokens(seed=2)
    clean_logits, clean_cache = inside.run_with_cache(model, clean)
    name = "decoder.layers.1.resid_pre"
    with inside.intervene(model, {name: inside.patch(clean_cache[name])}), torch.no_grad():
        torch.testing.assert_close(model(corrupt), clean_logits)  # the whole stream from the clean run
    with torch.no_grad():
        corrupt_logits = model(corrupt)
    with inside.intervene(model, {name: inside.patch(clean_cache[name], positions=[5])}), torch.no_grad():
        patched = model(corrupt)
    assert torch.equal(patched[:, :5], corrupt_logits[:, :5])  # causal: earlier positions cannot see position 5
    assert not torch.allclose(patched[:, 5:], corrupt_logits[:, 5:])
    heads = "decoder.layers.0.self_attn.heads"
    with inside.intervene(model, {heads: inside.patch(clean_cache[heads], positions=[3, 4], heads=[1])}):
        _, cache = inside.run_with_cache(model, corrupt)
    got, src = cache[heads], clean_cache[heads]
    assert torch.equal(got[:, [3, 4], 1], src[:, [3, 4], 1])
    _, corrupt_cache = inside.run_with_cache(model, corrupt)
    assert torch.equal(got[:, [3, 4], 0], corrupt_cache[heads][:, [3, 4], 0])  # other heads left alone


def test_mean_ablation_writes_the_mean_and_bad_requests_say_what_was_expected():
    model = _lm()
    x = _tokens()
    _, cache = inside.run_with_cache(model, x, names=["decoder.layers.0.self_attn.heads"])
    assert list(cache) == ["decoder.layers.0.self_attn.heads"]
    mean = cache["decoder.layers.0.self_attn.heads"].mean(dim=(0, 1))  # (h, d_k): over the batch and positions
    with inside.intervene(model, {"decoder.layers.0.self_attn.heads": inside.mean_heads([0, 3], mean)}):
        _, after = inside.run_with_cache(model, x)
    got = after["decoder.layers.0.self_attn.heads"]
    assert torch.equal(got[:, :, 0], mean[0].expand(2, 11, 8)) and torch.equal(got[:, :, 3], mean[3].expand(2, 11, 8))
    with pytest.raises(KeyError, match="no hook point"):
        with inside.capture(model, ["decoder.layers.9.resid_pre"]):
            pass
    with pytest.raises(ValueError, match=r"must return a tensor of shape \(2, 11, 32\), got \(2, 32\)"):
        with inside.intervene(model, {"decoder.layers.0.resid_post": lambda v: v[:, 0]}), torch.no_grad():
            model(x)
    with pytest.raises(ValueError, match="can be read"):
        with inside.intervene(model, {"decoder.layers.0.self_attn.pattern": lambda v: v}):
            pass
    with pytest.raises(TypeError, match="no EncoderLayer or DecoderLayer"):
        inside.hook_points(torch.nn.Linear(2, 2))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()), "every hook is removed"


def test_the_logit_lens_reads_each_layer_and_its_last_row_is_the_models_logits():
    model = _lm(**GPT2_LIKE)
    x = _tokens()
    logits, cache = inside.run_with_cache(model, x)
    lens = inside.logit_lens(model, cache)  # (L, B, T, V)
    assert lens.shape == (2, 2, 11, 50)
    torch.testing.assert_close(lens[-1], logits, atol=0, rtol=0)
    with torch.no_grad():
        first = model.head(model.decoder.norm(cache["decoder.layers.0.resid_post"]))
    torch.testing.assert_close(lens[0], first, atol=0, rtol=0)
    with pytest.raises(TypeError, match="DecoderOnlyLM"):
        inside.logit_lens(tl.Transformer(vocab_size=20, d_model=16, num_heads=2, num_layers=1, d_ff=32), cache)


def test_head_scores_find_a_previous_token_head_and_an_induction_head_by_hand():
    n, T = 5, 10  # a block of 5 tokens shown twice
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(0, T - 1)] = 1.0  # every query on the token before it
    induction = torch.eye(T)
    for t in range(n, T):  # the second copy: the token after this one's first occurrence
        induction[t] = 0.0
        induction[t, t - n + 1] = 1.0
    pattern = torch.stack([previous, induction, torch.eye(T)])[None]  # (1, 3 heads, T, T)
    prev_scores, induction_scores = inside.head_scores(pattern, 1), inside.head_scores(pattern, n - 1)
    assert prev_scores.argmax() == 0 and prev_scores[0] == 1.0 and prev_scores[2] == 0.0
    assert induction_scores.argmax() == 1 and induction_scores[1] == pytest.approx(5 / 6)  # 5 of t = 4..9
    with pytest.raises(ValueError, match=r"1 <= offset < T, got shape \(1, 3, 10, 10\), offset 10"):
        inside.head_scores(pattern, 10)


def test_induction_scores_follow_repeats_on_any_text_and_agree_with_head_scores_on_a_repeated_block():
    torch.manual_seed(0)
    n = 6
    block = torch.randperm(20)[:n]  # n distinct tokens
    tokens = torch.cat([block, block])[None]  # (1, 2n)
    T = 2 * n
    induction = torch.zeros(T, T)
    for t in range(T):
        induction[t, t - n + 1 if t >= n else 0] = 1.0  # second copy: the key after the first occurrence
    uniform = torch.ones(T, T).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    pattern = torch.stack([induction, uniform])[None]  # (1, 2, T, T)
    scores = inside.induction_scores(pattern, tokens)
    assert torch.allclose(scores[0], torch.tensor(1.0))
    assert torch.allclose(scores[1], (1 / torch.arange(n + 1, T + 1.0)).mean())  # uniform: 1 / (t + 1) at t >= n
    assert torch.allclose(inside.head_scores(pattern, n - 1)[0], torch.tensor(1.0))  # the same head, by offset
    # by hand on text with one repeat: "abcab" -> at t = 3 ('a') the key after the first 'a' is 1
    text = torch.tensor([[0, 1, 2, 0, 1]])
    p = torch.ones(5, 5).tril()
    p = (p / p.sum(-1, keepdim=True))[None, None]  # (1, 1, 5, 5) uniform causal
    # t = 3: key 1 (1/4); t = 4: key 2 (1/5)
    assert torch.allclose(inside.induction_scores(p, text), torch.tensor([(1 / 4 + 1 / 5) / 2]))
    with pytest.raises(ValueError, match="no token repeats"):
        inside.induction_scores(p, torch.tensor([[0, 1, 2, 3, 4]]))
    with pytest.raises(ValueError, match="tokens must be"):
        inside.induction_scores(p, text[:, :4])


def test_an_attention_only_model_has_no_feed_forward_and_its_stream_is_embeddings_plus_heads():
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(
        vocab_size=11, d_model=16, num_heads=2, num_layers=2, dropout=0.0, norm_first=True, attention_only=True
    )
    model.eval()
    assert all(layer.feed_forward is None and layer.norm3 is None for layer in model.decoder.layers)
    assert not any("feed_forward" in name for name in inside.hook_points(model))
    assert not any("feed_forward" in name for name, _ in model.named_parameters())
    tokens = torch.randint(0, 11, (2, 7))
    logits, cache = inside.run_with_cache(model, tokens)
    for i in range(2):
        layer = f"decoder.layers.{i}"
        heads = inside.head_contributions(model, cache, f"{layer}.self_attn.heads").sum(2)  # (B, T, d)
        bias = model.decoder.layers[i].self_attn.out_proj.bias
        assert torch.allclose(cache[f"{layer}.resid_pre"] + heads + bias, cache[f"{layer}.resid_post"], atol=1e-5)
    assert torch.allclose(inside.logit_lens(model, cache)[-1], logits, atol=1e-6)
    with pytest.raises(ValueError, match="attention_only must be True or False"):
        tl.TransformerConfig(attention_only=1)


def _circuit_model():
    torch.manual_seed(3)
    model = tl.DecoderOnlyLM(vocab_size=11, d_model=16, num_heads=4, num_layers=2, d_ff=32, dropout=0.0,
                             norm="rms", bias=False, norm_first=True, positional="learned").eval()  # fmt: skip
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.norm1.weight.uniform_(0.5, 2.0)  # a gain that matters, folded into the circuits
    return model


def test_the_qk_and_ov_circuits_give_the_heads_scores_and_outputs():
    model = _circuit_model()
    tokens = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(1))
    _, cache = inside.run_with_cache(model, tokens)
    qk, ov = inside.head_circuits(model, 1)
    assert qk.shape == ov.shape == (4, 16, 16)
    x = cache["decoder.layers.1.resid_pre"]  # (B, T, d)
    unit = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + model.config.eps)  # RMSNorm without its gain
    scores = torch.einsum("btd,hde,bse->bhts", unit, qk, unit) / 4**0.5  # (B, h, T, T), d_k = 4
    scores = scores.masked_fill(~tl.causal_mask(7), float("-inf"))
    torch.testing.assert_close(scores.softmax(-1), cache["decoder.layers.1.self_attn.pattern"], atol=1e-5, rtol=0)
    written = torch.einsum("bhts,hde,bse->bhtd", cache["decoder.layers.1.self_attn.pattern"], ov, unit)
    by_head = inside.head_contributions(model, cache, "decoder.layers.1.self_attn.heads")  # (B, T, h, d)
    torch.testing.assert_close(written.transpose(1, 2), by_head, atol=1e-5, rtol=0)


def test_composition_score_is_one_only_at_rank_one_its_ceiling_is_one_over_root_rank_and_zero_for_none():
    torch.manual_seed(0)
    u, v, w = torch.randn(8, 1), torch.randn(8, 1), torch.randn(8, 1)
    reader, writer = u @ v.T, v @ w.T  # rank 1: reads exactly the direction v the writer writes
    assert float(inside.composition_score(reader, writer)) == pytest.approx(1.0, abs=1e-5)
    for r in (2, 4, 16):  # the same rank-r projection as reader and writer: all it writes is read, evenly
        basis = torch.linalg.qr(torch.randn(64, r, dtype=torch.float64))[0]  # (64, r), orthonormal columns
        projection = basis @ basis.T  # (64, 64), rank r
        assert float(inside.composition_score(projection, projection)) == pytest.approx(r**-0.5, rel=1e-9)
        mixed = basis @ torch.randn(r, r, dtype=torch.float64) @ basis.T  # reads only those r directions, unevenly
        sv = torch.linalg.svdvals(mixed)  # the bound: norm(AB) <= ||A||_2 norm(B)
        assert inside.composition_score(mixed, projection) <= sv[0] / sv.norm() + 1e-12
    other = torch.linalg.qr(torch.cat([v, torch.randn(8, 1)], 1))[0][:, 1:]  # a direction orthogonal to v
    assert float(inside.composition_score(u @ other.T, writer)) == pytest.approx(0.0, abs=1e-6)
    a, b = torch.randn(3, 8, 8), torch.randn(8, 8)
    torch.testing.assert_close(inside.composition_score(5 * a, b / 7), inside.composition_score(a, b))
    assert inside.composition_score(a, b).shape == (3,)
    with pytest.raises(ValueError, match="must chain"):
        inside.composition_score(torch.randn(4, 5), torch.randn(4, 5))


def test_ov_copying_tells_a_copying_head_from_a_suppressing_one():
    model = tl.DecoderOnlyLM(vocab_size=8, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0,
                             norm_first=True, tie_embeddings=True, attention_only=True).eval()  # fmt: skip
    eye = torch.eye(8)
    with torch.no_grad():
        model.embed.table.weight.copy_(torch.cat([eye, torch.zeros(8, 8)], 1))  # token t: the unit vector e_t
        attn = model.decoder.layers[0].self_attn
        attn.v_proj.weight.zero_()
        attn.v_proj.weight[:8, :8] = eye  # head 0 reads dimensions 0..7, head 1 too (its rows repeat them)
        attn.v_proj.weight[8:, :8] = eye
        attn.out_proj.weight.zero_()
        attn.out_proj.weight[:8, :8] = eye  # head 0 writes them back
        attn.out_proj.weight[:8, 8:] = -eye  # head 1 writes them back negated
    share, hits = inside.ov_copying(model, 0)
    torch.testing.assert_close(share, torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(hits, torch.tensor([1.0, 0.0]))
    with torch.no_grad():
        model.embed.table.weight[0] = torch.cat([0.5 * eye[1], torch.zeros(8)])  # token 0, an unused id: half a 1
    assert inside.ov_copying(model, 0)[1][0] == pytest.approx(7 / 8)  # attending to it raises 1's logit most: a miss
    share, hits = inside.ov_copying(model, 0, tokens=range(1, 8))  # only tokens 1 .. 7 count
    torch.testing.assert_close(share, torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(hits, torch.tensor([1.0, 0.0]))


def test_patching_effect_equals_a_hand_computation_with_plain_hooks_in_both_directions():
    torch.manual_seed(0)
    model = tl.Transformer(vocab_size=12, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0).eval()
    g = torch.Generator().manual_seed(3)
    clean = torch.randint(1, 12, (6, 5), generator=g)  # (B, S)
    corrupt = clean.clone()
    corrupt[:, 1] = clean[:, 1] % 11 + 1  # one source token changed in every row, never to itself
    tgt = torch.randint(1, 12, (6, 3), generator=g)  # (B, T): the same decoder input in both runs
    metric = lambda out: out[:, -1, 3] - out[:, -1, 4]  # noqa: E731  (B, T, V) -> (B,)
    sites = [("encoder.layers.0.resid_post", 1), ("decoder.layers.1.cross_attn.heads", 2, 1)]
    denoise = inside.patching_effect(model, (clean, tgt), (corrupt, tgt), sites, metric)
    noise = inside.patching_effect(model, (clean, tgt), (corrupt, tgt), sites, metric, direction="noise")
    assert denoise.shape == noise.shape == (2, 6)

    # by hand: plain PyTorch hooks record one run's activation and write it into the other's
    enc, out_proj = model.encoder.layers[0], model.decoder.layers[1].cross_attn.out_proj
    d_k = 8  # 16 / 2 heads: head 1 is columns 8..15 of what out_proj reads

    def put_enc(saved):
        def hook(module, args, out):
            out = out.clone()
            out[:, 1] = saved["enc"][:, 1]  # encoder position 1
            return out

        return hook

    def put_head(saved):
        def hook(module, args):
            x = args[0].clone()  # (B, T, h * d_k)
            x[:, 2, d_k:] = saved["heads"][:, 2, d_k:]  # decoder position 2, head 1
            return (x,)

        return hook

    def patched(run, source):  # -> (2, B): the metric with each site patched from `source` into `run`
        saved = {}
        grab_enc = enc.register_forward_hook(lambda m, a, out: saved.setdefault("enc", out.clone()))
        grab_head = out_proj.register_forward_pre_hook(lambda m, args: saved.setdefault("heads", args[0].clone()))
        with torch.no_grad():
            model(source, tgt)
            grab_enc.remove()
            grab_head.remove()
            rows = []
            for register in (lambda: enc.register_forward_hook(put_enc(saved)),
                             lambda: out_proj.register_forward_pre_hook(put_head(saved))):  # fmt: skip
                handle = register()  # one site at a time
                rows.append(metric(model(run, tgt)))
                handle.remove()
        return torch.stack(rows)

    with torch.no_grad():
        m_clean, m_corrupt = metric(model(clean, tgt)), metric(model(corrupt, tgt))
    torch.testing.assert_close(denoise, (patched(corrupt, clean) - m_corrupt) / (m_clean - m_corrupt))
    torch.testing.assert_close(noise, (m_clean - patched(clean, corrupt)) / (m_clean - m_corrupt))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()), "every hook is removed"


def test_patching_effect_is_one_where_the_whole_difference_passes_and_zero_where_none_does():
    model = _lm()
    clean = _tokens(B=4, T=9, seed=1)
    corrupt = clean.clone()
    corrupt[:, 4] = (clean[:, 4] + 7) % 50  # the pairs differ at position 4 only
    metric = lambda logits: logits[:, -1, 0] - logits[:, -1, 1]  # noqa: E731
    sites = [("decoder.layers.0.resid_pre", [4]), ("decoder.layers.0.resid_pre", [0, 1, 2, 3, 5, 6, 7, 8]),
             "decoder.layers.1.resid_post", ("decoder.layers.1.resid_post", [3])]  # fmt: skip
    for direction in ("denoise", "noise"):
        shares = inside.patching_effect(model, clean, corrupt, sites, metric, direction=direction)  # (4, 4)
        torch.testing.assert_close(shares[0], torch.ones(4))  # the changed token's embedding: all of it
        torch.testing.assert_close(shares[1], torch.zeros(4))  # the same embeddings in both runs: nothing
        torch.testing.assert_close(shares[2], torch.ones(4))  # the last stream at every position: all of it
        torch.testing.assert_close(shares[3], torch.zeros(4))  # before the change, the streams are the same
    with pytest.raises(ValueError, match="direction must be 'denoise'"):
        inside.patching_effect(model, clean, corrupt, sites, metric, direction="both")
    with pytest.raises(ValueError, match="different in the clean and the corrupted run"):
        inside.patching_effect(model, clean, clean, sites, metric)
    with pytest.raises(ValueError, match="pair row by row"):
        inside.patching_effect(model, clean, corrupt[:3], sites, metric)
