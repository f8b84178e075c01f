import pytest
import torch

import transformer_lib as tl

SMALL = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=64)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("scale_embedding", [False, True])
def test_decoder_causality_changing_a_future_token_leaves_earlier_outputs(norm_first, scale_embedding):
    model = tl.Transformer(vocab_size=20, norm_first=norm_first, scale_embedding=scale_embedding, **SMALL).eval()
    src = torch.randint(1, 20, (2, 6))
    tgt = torch.randint(1, 20, (2, 7))
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] % 19) + 1  # a different non-pad token at position 4
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)


def test_lm_causality():
    lm = tl.DecoderOnlyLM(vocab_size=15, **SMALL).eval()
    x = torch.randint(0, 15, (1, 10))
    y = x.clone()
    y[0, 7] = (y[0, 7] + 1) % 15
    assert torch.allclose(lm(x)[:, :7], lm(y)[:, :7], atol=1e-6)


def test_padding_does_not_change_outputs_at_real_positions():
    model = tl.Transformer(vocab_size=20, **SMALL).eval()
    src = torch.tensor([[5, 6, 7, 0, 0]])
    tgt = torch.tensor([[1, 8, 9]])
    short = model(src[:, :3], tgt)
    for pad_len in (2, 6):
        padded = torch.cat([src[:, :3], torch.zeros(1, pad_len, dtype=torch.long)], dim=1)
        assert torch.allclose(model(padded, tgt), short, atol=1e-5)


def test_padding_tokens_values_do_not_leak_into_encoder_only_predictions():
    clf = tl.EncoderClassifier(vocab_size=12, num_classes=3, **SMALL).eval()
    x = torch.tensor([[3, 4, 5, 0, 0, 0]])
    assert torch.allclose(clf(x), clf(x[:, :3]), atol=1e-5)


def test_encoder_only_heads_shapes():
    x = torch.randint(1, 12, (4, 9))
    assert tl.EncoderClassifier(vocab_size=12, num_classes=5, **SMALL)(x).shape == (4, 5)
    assert tl.EncoderRegressor(vocab_size=12, **SMALL)(x).shape == (4,)
    assert tl.EncoderRegressor(vocab_size=12, num_targets=2, **SMALL)(x).shape == (4, 2)
    assert tl.EncoderClassifier(vocab_size=12, pooling="first", **SMALL)(x).shape == (4, 2)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_kv_cache_gives_the_same_tokens_and_logits(norm_first, positional):
    torch.manual_seed(3)
    lm = tl.DecoderOnlyLM(vocab_size=17, norm_first=norm_first, positional=positional, **SMALL).eval()
    prompt = torch.randint(0, 17, (2, 5))
    greedy_cached = lm.generate(prompt, 30, temperature=0.0, use_cache=True)
    greedy_plain = lm.generate(prompt, 30, temperature=0.0, use_cache=False)
    assert torch.equal(greedy_cached, greedy_plain)
    sampled_cached = lm.generate(prompt, 30, temperature=1.0, top_k=5, rng=torch.Generator().manual_seed(0))
    sampled_plain = lm.generate(
        prompt, 30, temperature=1.0, top_k=5, use_cache=False, rng=torch.Generator().manual_seed(0)
    )
    assert torch.equal(sampled_cached, sampled_plain)
    # logits of the last step, computed incrementally and all at once
    caches = lm.new_cache()
    lm(greedy_cached[:, :-1], caches)
    step = lm(greedy_cached[:, -1:], caches)[:, -1]
    assert torch.allclose(step, lm(greedy_cached)[:, -1], atol=1e-4)


def test_repeated_prompts_are_run_once_and_sample_as_if_each_ran_alone(monkeypatch):
    """generate runs a prompt that several rows share once, then copies its keys and values: the samples are the
    ones each row would draw with its own prompt run (the same generator, the same numbers)."""
    lm = tl.DecoderOnlyLM(vocab_size=11, **SMALL).eval()
    distinct = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(4))  # (3, 5)
    prompt = distinct[torch.tensor([0, 1, 0, 2, 1, 0])]  # (6, 5): rows 0, 2, 5 and rows 1, 4 repeat a prompt
    batches = []
    embed = lm.embed.forward  # the first module every pass goes through: its batch is the rows run
    monkeypatch.setattr(lm.embed, "forward", lambda ids, *a, **k: batches.append(ids.shape[0]) or embed(ids, *a, **k))
    shared = lm.generate(prompt, 12, temperature=1.0, rng=torch.Generator().manual_seed(9))
    assert batches[0] == 3 and set(batches[1:]) == {6}  # the prompt once per distinct row, then every row
    monkeypatch.setattr(tl.decoding, "_prefill", lambda model, p, caches: model(p, caches, checked=True)[:, -1])
    alone = lm.generate(prompt, 12, temperature=1.0, rng=torch.Generator().manual_seed(9))
    assert torch.equal(shared, alone)
    assert not torch.equal(shared[0], shared[2])  # the rows that share a prompt still draw their own samples
    batches.clear()
    monkeypatch.undo()
    monkeypatch.setattr(lm.embed, "forward", lambda ids, *a, **k: batches.append(ids.shape[0]) or embed(ids, *a, **k))
    lm.train()  # dropout would draw one mask for the shared run: every row runs
    lm.generate(prompt, 2, temperature=1.0, rng=torch.Generator().manual_seed(9))
    assert batches[0] == 6


def test_top_k_one_is_greedy():
    lm = tl.DecoderOnlyLM(vocab_size=9, **SMALL).eval()
    p = torch.randint(0, 9, (1, 3))
    assert torch.equal(lm.generate(p, 10, temperature=0.7, top_k=1), lm.generate(p, 10, temperature=0.0))


def test_generate_past_max_len_is_a_clear_error():
    lm = tl.DecoderOnlyLM(vocab_size=9, **SMALL)
    with pytest.raises(ValueError, match=r"prompt length 60 \+ max_new_tokens 10 = 70 exceeds max_len=64"):
        lm.generate(torch.zeros(1, 60, dtype=torch.long), 10)


def test_greedy_decode_stops_after_eos_and_pads():
    model = tl.Transformer(vocab_size=10, **SMALL).eval()
    with torch.no_grad():
        model.head.bias.fill_(0)
        model.head.bias[2] = 100.0  # always predict EOS (id 2)
    out = model.greedy_decode(torch.randint(1, 10, (3, 4)), bos_id=1, eos_id=2, max_new_tokens=5)
    assert out.tolist() == [[1, 2]] * 3


@pytest.mark.parametrize("norm_first", [False, True])
def test_norm_first_changes_the_wiring_and_final_norm(norm_first):
    model = tl.Transformer(vocab_size=10, norm_first=norm_first, **SMALL)
    assert (model.encoder.norm is not None) == norm_first
    assert model.encoder.layers[0].config.norm_first == norm_first


def test_scale_embedding_multiplies_by_sqrt_d_model():
    e1 = tl.TokenEmbedding(10, 16, scale=True)
    e0 = tl.TokenEmbedding(10, 16, scale=False)
    e0.load_state_dict(e1.state_dict())
    ids = torch.tensor([[1, 2, 3]])
    assert torch.allclose(e1(ids), e0(ids) * 4.0)


def test_embedding_equals_one_hot_times_table():
    emb = tl.TokenEmbedding(7, 5, scale=False)
    ids = torch.tensor([[0, 6, 3]])
    one_hot = torch.nn.functional.one_hot(ids, 7).float()  # (1, 3, 7)
    assert torch.allclose(emb(ids), one_hot @ emb.weight)


def test_tied_embeddings_share_storage():
    lm = tl.DecoderOnlyLM(vocab_size=9, tie_embeddings=True, **SMALL)
    assert lm.head.weight is lm.embed.table.weight


def test_models_run_with_odd_sizes_and_batch_of_one():
    model = tl.Transformer(
        vocab_size=7,
        tgt_vocab_size=9,
        d_model=30,
        num_heads=5,
        num_layers=1,
        num_decoder_layers=3,
        d_ff=31,
        dropout=0.0,
    )
    out = model(torch.randint(0, 7, (1, 4)), torch.randint(0, 9, (1, 11)))
    assert out.shape == (1, 11, 9)
    assert len(model.decoder.layers) == 3


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
def test_encoder_decoder_greedy_decode_is_the_same_with_and_without_the_cache(norm_first, positional):
    torch.manual_seed(5)
    model = tl.Transformer(vocab_size=13, norm_first=norm_first, positional=positional, **SMALL).eval()
    src = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 12, 4], [5, 0, 0, 0, 0, 0]])  # padded, different lengths
    for eos_id in (2, -1):  # a real end token, and one never produced, so that all 25 steps run
        cached = model.greedy_decode(src, bos_id=1, eos_id=eos_id, max_new_tokens=25, use_cache=True)
        plain = model.greedy_decode(src, bos_id=1, eos_id=eos_id, max_new_tokens=25, use_cache=False)
        assert torch.equal(cached, plain)
    assert plain.shape == (3, 26)
    full = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]])  # no padding: greedy_decode's cross-attention drops the mask
    fast, slow = (model.greedy_decode(full, 1, -1, 25, use_cache=flag) for flag in (True, False))
    assert torch.equal(fast, slow)
    full_memory = model.encode(full)
    assert torch.allclose(
        model.decode(fast, full_memory, None), model.decode(fast, full_memory, model.make_src_mask(full)), atol=1e-5
    )
    caches = model.new_cache()
    memory = model.encode(src)
    step_by_step = torch.cat(
        [
            model.decode(plain[:, t : t + 1], memory, model.make_src_mask(src), caches=caches)
            for t in range(plain.shape[1])
        ],
        dim=1,
    )
    # one token at a time through the cache gives the logits of one full pass, at the rows not yet done
    full = model.decode(plain, memory, model.make_src_mask(src))
    assert torch.allclose(step_by_step[0], full[0], atol=1e-5)


def test_cross_attention_keys_and_values_are_projected_once_per_source():
    """greedy_decode's cross caches: the memory goes through each layer's k_proj once, not once per step."""
    torch.manual_seed(6)
    model = tl.Transformer(vocab_size=13, num_kv_heads=1, **SMALL).eval()  # multi-query: the cache keeps 1 head
    src = torch.tensor([[4, 5, 6, 7, 0], [8, 9, 10, 11, 12]])
    calls = []
    hooks = [
        layer.cross_attn.k_proj.register_forward_hook(lambda *_: calls.append(1)) for layer in model.decoder.layers
    ]
    out = model.greedy_decode(src, bos_id=1, eos_id=-1, max_new_tokens=12)
    assert out.shape == (2, 13) and len(calls) == len(model.decoder.layers)
    calls.clear()
    model.greedy_decode(src, bos_id=1, eos_id=-1, max_new_tokens=12, use_cache=False)
    assert len(calls) == 12 * len(model.decoder.layers)
    for hook in hooks:
        hook.remove()
    memory, src_mask = model.encode(src), model.make_src_mask(src)
    caches, cross = model.new_cache(), model.new_cross_cache()
    steps = [model.decode(out[:, t : t + 1], memory, src_mask, caches=caches, cross_caches=cross) for t in range(13)]
    assert torch.allclose(torch.cat(steps, dim=1), model.decode(out, memory, src_mask), atol=1e-5)
    assert cross[0].key.shape == (2, 1, 5, model.config.d_k)  # (B, h_kv, S, d_k), filled at the first step


def test_a_static_cache_is_filled_once_and_refuses_what_it_cannot_be():
    k = torch.randn(1, 2, 3, 4)
    cache = tl.KVCache(static=True)
    assert cache.update(k, k)[0] is k and len(cache) == 3
    with pytest.raises(ValueError, match="already holds"):
        cache.update(k, k)
    with pytest.raises(ValueError, match="no capacity"):
        tl.KVCache(capacity=4, static=True)
    rotary = tl.MultiHeadAttention(8, 2, rotary=True)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match="cross-attention"):
        rotary(x, x, x, cache=tl.KVCache(static=True))
    model = tl.Transformer(vocab_size=13, **SMALL)
    with pytest.raises(ValueError, match="cross_caches"):
        model.decode(
            torch.ones(1, 1, dtype=torch.long),
            torch.randn(1, 3, model.config.d_model),
            cross_caches=model.new_cross_cache()[:1],
        )


def test_nucleus_keeps_the_smallest_likeliest_set_reaching_top_p():
    logits = torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.05, 0.05, 0.1, 0.8]]).log()  # (2, 4) probabilities, as logits
    assert tl.nucleus(logits, 0.6).tolist() == [[True, True, False, False], [False, False, False, True]]
    assert tl.nucleus(logits, 0.5).tolist()[0] == [True, False, False, False]  # 0.5 reached by the first alone
    assert tl.nucleus(logits, 1.0).all() and tl.nucleus(logits, 1e-9).sum().item() == 2  # all; the top one per row
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(3, 50, generator=g)
    for p in (0.1, 0.5, 0.9):
        kept = tl.nucleus(wide, p)
        mass = (wide.softmax(-1) * kept).sum(-1)  # (3,)
        assert (mass >= p - 1e-6).all()  # enough mass kept, and dropping the least likely kept token falls short
        least = wide.softmax(-1).masked_fill(~kept, 2.0).min(-1).values  # (3,) the least likely kept token
        assert (mass - least < p).all()


def test_top_p_sampling_keeps_only_the_nucleus_and_tiny_top_p_is_greedy():
    lm = tl.DecoderOnlyLM(vocab_size=9, **SMALL).eval()
    p = torch.randint(0, 9, (2, 3), generator=torch.Generator().manual_seed(1))
    greedy = lm.generate(p, 8, temperature=0.0)
    assert torch.equal(lm.generate(p, 8, temperature=1.0, top_p=1e-6, rng=torch.Generator().manual_seed(0)), greedy)
    full = lm.generate(p, 8, temperature=1.0, top_p=1.0, rng=torch.Generator().manual_seed(3))
    plain = lm.generate(p, 8, temperature=1.0, rng=torch.Generator().manual_seed(3))
    assert torch.equal(full, plain)  # top_p = 1 keeps every token


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(top_p=0.0), "top_p must be in"),
        (dict(top_p=1.5), "top_p must be in"),
        (dict(temperature=-0.5), "temperature must be >= 0"),
        (dict(top_k=0), "top_k must be at least 1"),
    ],
)
def test_bad_sampling_settings_are_clear_errors_even_for_greedy(bad, message):
    lm = tl.DecoderOnlyLM(vocab_size=9, **SMALL).eval()
    settings = dict(temperature=0.0) | bad
    with pytest.raises(ValueError, match=message):
        lm.generate(torch.zeros(1, 2, dtype=torch.long), 3, **settings)


def _toy_translator(seed=0):
    tl.set_seed(seed)
    return tl.Transformer(vocab_size=7, tgt_vocab_size=5, **SMALL).eval()  # targets: pad 0, bos 1, eos 2, and 3, 4


def test_beam_search_of_width_one_is_greedy_decoding():
    model = _toy_translator()
    src = torch.randint(1, 7, (6, 5), generator=torch.Generator().manual_seed(2))
    greedy = model.greedy_decode(src, bos_id=1, eos_id=2, max_new_tokens=6)
    beam, logp = model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=6, beam_size=1)
    assert torch.equal(beam, greedy)
    assert logp.shape == (6,) and (logp <= 0).all()


def test_beam_search_over_a_batch_equals_each_row_searched_alone():
    """All rows are decoded in one batch; a row that finishes early must not change the others."""
    model = _toy_translator(seed=5)
    src = torch.randint(1, 7, (8, 5), generator=torch.Generator().manual_seed(6))
    batch, logp = model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=7, beam_size=3)
    lengths = set()
    for b in range(src.shape[0]):
        alone, alone_logp = model.beam_search(src[b : b + 1], bos_id=1, eos_id=2, max_new_tokens=7, beam_size=3)
        n = alone.shape[1]
        assert batch[b, :n].tolist() == alone[0].tolist() and (batch[b, n:] == model.pad_id).all()
        assert logp[b].item() == pytest.approx(alone_logp.item(), abs=1e-5)
        lengths.add(n)
    assert len(lengths) > 1  # the rows really did finish at different steps


def test_beam_candidates_are_the_search_beam_search_answers_from_best_first():
    model = _toy_translator(seed=5)
    for row in range(6):
        src = torch.randint(1, 7, (1, 5), generator=torch.Generator().manual_seed(10 + row))
        best, logp = model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=7, beam_size=3, length_penalty=0.6)
        found = tl.beam_candidates(model, src, bos_id=1, eos_id=2, max_new_tokens=7, beam_size=3, length_penalty=0.6)
        assert found[0][0] == best[0].tolist() and found[0][1] == pytest.approx(logp.item(), abs=1e-6)
        ranks = [r for _, _, r in found]
        assert 1 <= len(found) <= 2 * 3 - 1 and ranks == sorted(ranks, reverse=True)
        for ids, p, rank in found:  # each is a whole finished hypothesis, scored by its own probability
            assert ids[0] == 1 and (ids[-1] == 2 or len(ids) == 8) and 2 not in ids[1:-1]
            assert p == pytest.approx(_sequence_logp(model, src, torch.tensor(ids)), abs=1e-4)
            assert rank == pytest.approx(p / (len(ids) - 1) ** 0.6)
    with pytest.raises(ValueError, match=r"searches one source: src must be \(1, S\), got \(2, 5\)"):
        tl.beam_candidates(model, torch.ones(2, 5, dtype=torch.long), bos_id=1, eos_id=2, max_new_tokens=3)


def _sequence_logp(model, src, seq):
    """Log-probability of the generated part of seq (BOS first) under teacher forcing."""
    with torch.no_grad():
        logits = model(src, seq[None, :-1])  # (1, t - 1, V)
        return logits.log_softmax(-1)[0].gather(-1, seq[1:, None]).sum().item()


def test_a_wide_beam_finds_the_likeliest_finished_sequence_found_by_brute_force():
    import itertools

    model = _toy_translator(seed=3)
    src = torch.randint(1, 7, (1, 4), generator=torch.Generator().manual_seed(4))
    best = None  # every output of up to 3 tokens that ends in EOS
    for n in range(1, 4):
        for body in itertools.product([0, 1, 3, 4], repeat=n - 1):
            seq = torch.tensor([1, *body, 2])
            score = _sequence_logp(model, src, seq)
            best = max(best or (score, seq), (score, seq), key=lambda s: s[0])
    found, logp = model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=3, beam_size=200, length_penalty=0.0)
    assert found[0].tolist() == best[1].tolist()
    assert logp.item() == pytest.approx(best[0], abs=1e-5)


def test_beam_search_settings_are_checked():
    model = _toy_translator()
    src = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="beam_size must be at least 1, got 0"):
        model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=4, beam_size=0)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=0)


def test_what_decoding_returns_and_leaves_behind_can_be_trained_on():
    """The decoding loops run under inference_mode; their ids, and the rotary tables they fill, stay ordinary."""
    lm = tl.DecoderOnlyLM(vocab_size=15, positional="rope", **SMALL)
    out = lm.eval().generate(torch.randint(1, 15, (2, 3)), 8, temperature=0.0)  # (2, 11)
    assert not out.is_inference()
    lm.train()
    tl.lm_loss(lm, (out[:, :-1], out[:, 1:])).backward()  # would raise if the cached cos/sin were inference tensors
    assert all(p.grad is not None for p in lm.parameters() if p.requires_grad)
    model = tl.Transformer(vocab_size=20, **SMALL).eval()
    src = torch.randint(1, 20, (2, 5))
    ids = model.greedy_decode(src, bos_id=1, eos_id=2, max_new_tokens=4)
    beams, logp = model.beam_search(src, bos_id=1, eos_id=2, max_new_tokens=4, beam_size=2)
    assert not (ids.is_inference() or beams.is_inference() or logp.is_inference())
    model.train()
    tl.seq2seq_loss(model, (src, ids)).backward()


def _random_translator(seed: int) -> tuple[tl.Transformer, torch.Tensor, int]:
    """A small random encoder-decoder whose padding id varies, pushed in half the seeds to emit that id."""
    g = torch.Generator().manual_seed(seed)
    pad_id = int(torch.randint(0, 9, (), generator=g))
    torch.manual_seed(seed)
    model = tl.Transformer(vocab_size=9, pad_id=pad_id, d_model=16, num_heads=2, d_ff=24, num_layers=2, dropout=0.0)
    model.eval()
    if seed % 2:
        with torch.no_grad():
            model.head.bias[pad_id] += 3.0  # a half-trained model that often says "padding"
    src = torch.randint(0, 9, (3, 5), generator=g)
    src[1, 3:] = pad_id  # one padded source
    return model, src, pad_id


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_cached_and_uncached_greedy_decoding_agree_on_many_random_models():
    """A generated padding id is an ordinary token: the uncached path does not mask it as padding either."""
    emitted_pad = 0
    for seed in range(200):
        model, src, pad_id = _random_translator(seed)
        eos_id = (pad_id + 1) % 9
        cached = model.greedy_decode(src, bos_id=(pad_id + 2) % 9, eos_id=eos_id, max_new_tokens=12)
        plain = model.greedy_decode(src, bos_id=(pad_id + 2) % 9, eos_id=eos_id, max_new_tokens=12, use_cache=False)
        assert torch.equal(cached, plain), f"seed {seed}: {cached.tolist()} vs {plain.tolist()}"
        rows = [row[1:].tolist() for row in cached]
        before_eos = [row[: row.index(eos_id)] if eos_id in row else row for row in rows]
        emitted_pad += any(pad_id in row for row in before_eos)
    assert emitted_pad >= 50, emitted_pad  # the models did emit the padding id before their end


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_beam_search_of_width_one_is_greedy_decoding_even_through_a_generated_padding_id():
    for seed in range(1, 60, 2):  # the seeds that push the padding id
        model, src, pad_id = _random_translator(seed)
        bos, eos = (pad_id + 2) % 9, (pad_id + 1) % 9
        greedy = model.greedy_decode(src, bos, eos, max_new_tokens=10)
        for row in range(src.shape[0]):
            ids, _ = model.beam_search(src[row : row + 1], bos, eos, max_new_tokens=10, beam_size=1)
            want = greedy[row, : ids.shape[1]]
            assert torch.equal(ids[0], want), f"seed {seed} row {row}: {ids[0].tolist()} vs {greedy[row].tolist()}"


def test_the_decoding_loops_check_the_ids_once_not_at_every_step(monkeypatch):
    """Reading the ids' range waits for the device; the loops check the prompt (or BOS and EOS) once."""
    from transformer_lib import embedding

    calls = []
    real = embedding.check_token_ids
    monkeypatch.setattr(embedding, "check_token_ids", lambda *a, **k: calls.append(a) or real(*a, **k))
    torch.manual_seed(0)
    lm = tl.DecoderOnlyLM(vocab_size=12, d_model=16, num_heads=2, num_layers=1, max_len=32).eval()
    seq2seq = tl.Transformer(vocab_size=12, d_model=16, num_heads=2, num_layers=1, max_len=32).eval()
    prompt = torch.randint(0, 12, (2, 3))
    lm(prompt)
    assert len(calls) == 1  # a plain forward pass checks its ids
    calls.clear()
    for use_cache in (True, False):
        lm.generate(prompt, max_new_tokens=6, temperature=0, use_cache=use_cache)
        tl.greedy_decode(seq2seq, prompt, bos_id=1, eos_id=2, max_new_tokens=6, use_cache=use_cache)
    tl.beam_search(seq2seq, prompt, bos_id=1, eos_id=2, max_new_tokens=6, beam_size=2)
    assert len(calls) == 3  # the source of each greedy run and of the beam search, by encode; no step of a loop
    with pytest.raises(ValueError, match=r"prompt must hold ids in \[0, 11\]"):
        lm.generate(torch.tensor([[3, 12]]), max_new_tokens=2)
    for bad in (12, -1, 1.0):
        with pytest.raises(ValueError, match=r"bos_id must be an int in \[0, 11\] \(the target vocabulary\), got"):
            tl.greedy_decode(seq2seq, prompt, bos_id=bad, eos_id=2, max_new_tokens=2)
        with pytest.raises(ValueError, match=r"bos_id must be an int in \[0, 11\]"):
            tl.beam_search(seq2seq, prompt, bos_id=bad, eos_id=2, max_new_tokens=2)
