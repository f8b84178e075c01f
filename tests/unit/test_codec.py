"""Residual vector quantization (transformer_lib.codec) against Hugging Face's EnCodec quantizer and by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import codec

pytest.importorskip("transformers")


def _trained(q: codec.ResidualVectorQuantizer, steps: int = 30, seed: int = 0) -> torch.Tensor:
    """A few moving-average steps on clustered vectors (so that the codebooks are not their random start)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(6, q.dim, generator=g) * 3  # (6, dim)
    q.train()
    for _ in range(steps):
        x = centres[torch.randint(6, (256,), generator=g)] + 0.3 * torch.randn(256, q.dim, generator=g)
        q(x, generator=g)
    q.eval()
    return centres


@pytest.mark.parametrize(("num_quantizers", "size", "dim"), [(1, 2, 1), (3, 16, 8), (5, 37, 13), (8, 1024, 4)])
def test_codes_and_decoded_vectors_equal_hugging_faces_both_ways(num_quantizers, size, dim):
    """The same codebooks in EncodecResidualVectorQuantizer give the same codes, and the same vectors back from any
    codes; from_encodec brings them back unchanged. Trained codebooks, so that every layer's choice matters."""
    torch.manual_seed(num_quantizers)
    ours = codec.ResidualVectorQuantizer(num_quantizers, size, dim)
    _trained(ours)
    theirs = codec.to_encodec(ours)
    x = torch.randn(3, dim, 41)  # (B, D, T): EnCodec's layout
    mine = ours.encode(x.transpose(1, 2))  # (B, T, n)
    assert torch.equal(mine.permute(2, 0, 1), theirs.encode(x))  # (n, B, T)
    random_codes = torch.randint(size, (num_quantizers, 3, 41))  # (n, B, T)
    torch.testing.assert_close(ours.decode(random_codes.permute(1, 2, 0)).transpose(1, 2), theirs.decode(random_codes))
    back = codec.from_encodec(theirs)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), ours.state_dict().values()))
    for n in range(1, num_quantizers + 1):  # fewer codebooks: EnCodec's lower bandwidths
        bandwidth = n * math.log2(size) * 75 / 1000 if size & (size - 1) == 0 else None
        if bandwidth is not None:
            assert torch.equal(ours.encode(x.transpose(1, 2), n).permute(2, 0, 1), theirs.encode(x, bandwidth))


def test_each_codebook_codes_what_the_ones_before_it_left():
    q = codec.ResidualVectorQuantizer(3, 8, 5)
    _trained(q)
    x = torch.randn(50, 5)
    codes = q.encode(x)  # (50, 3)
    residual = x.clone()
    for i, layer in enumerate(q.layers):
        distances = ((residual[:, None] - layer.codebook.embed[None]) ** 2).sum(-1)  # (50, 8)
        assert torch.equal(codes[:, i], distances.argmin(-1))
        residual = residual - layer.codebook.embed[codes[:, i]]
    torch.testing.assert_close(q.decode(codes), x - residual)
    errors = [((q.decode(codes[:, :n]) - x) ** 2).sum(-1).mean().item() for n in (1, 2, 3)]
    assert errors[0] > errors[1] > errors[2]  # each codebook takes away more of what is left


def test_the_moving_average_step_is_the_formula():
    book = codec.Codebook(4, 2, decay=0.9, eps=0.5, dead=0.0)  # a large eps, so that the smoothing shows
    embed_avg, cluster_size = book.embed_avg.clone(), book.cluster_size.clone()
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    codes = torch.tensor([0, 0, 2])
    book.update(x, codes)
    counts = torch.tensor([2.0, 0.0, 1.0, 0.0])
    sums = torch.stack([x[0] + x[1], torch.zeros(2), x[2], torch.zeros(2)])
    size = 0.9 * cluster_size + 0.1 * counts
    avg = 0.9 * embed_avg + 0.1 * sums
    torch.testing.assert_close(book.cluster_size, size)
    torch.testing.assert_close(book.embed_avg, avg)
    smoothed = (size + 0.5) / (size.sum() + 4 * 0.5) * size.sum()  # Laplace: counts + eps, the total kept
    torch.testing.assert_close(book.embed, avg / smoothed[:, None])


def test_an_entry_nobody_chooses_restarts_on_a_vector_of_the_batch():
    book = codec.Codebook(3, 2, decay=0.5, dead=0.9)
    x = torch.tensor([[10.0, 10.0], [10.5, 9.5], [9.5, 10.5]])
    codes = torch.tensor([0, 0, 0])
    before = book.embed.clone()
    for _ in range(2):  # counts 1 -> 0.5 -> 0.25 for the entries never chosen
        book.update(x, codes, generator=torch.Generator().manual_seed(0))
    restarted = [k for k in (1, 2) if not torch.equal(book.embed[k], before[k])]
    assert restarted == [1, 2]
    assert all(any(torch.equal(book.embed[k], row) for row in x) for k in restarted)  # a vector of the batch
    assert (book.cluster_size[1:] == 0.9).all()


def test_gradients_pass_straight_through_and_the_commitment_loss_is_each_layers_mse():
    q = codec.ResidualVectorQuantizer(2, 8, 4)
    _trained(q)
    x = torch.randn(10, 4, requires_grad=True)
    quantized, codes, commitment = q(x)
    torch.testing.assert_close(quantized, q.decode(codes))  # the value is the codes'
    weights = torch.randn(10, 4)
    (quantized * weights).sum().backward()
    torch.testing.assert_close(x.grad, weights)  # the gradient is x's
    first = q.layers[0].codebook.embed[codes[:, 0]]
    second = q.layers[1].codebook.embed[codes[:, 1]]
    want = (((x - first) ** 2).mean() + ((x - first - second) ** 2).mean()) / 2
    torch.testing.assert_close(commitment, want)


def test_quantizer_dropout_draws_a_prefix_in_training_and_eval_uses_every_codebook():
    q = codec.ResidualVectorQuantizer(4, 8, 3, dropout=True)
    g = torch.Generator().manual_seed(1)
    q.train()
    drawn = {q(torch.randn(20, 3), generator=g)[1].shape[-1] for _ in range(60)}
    assert drawn == {1, 2, 3, 4}
    q.eval()
    assert q(torch.randn(20, 3))[1].shape == (20, 4)
    assert q(torch.randn(20, 3), n=2)[1].shape == (20, 2)
    before = [layer.codebook.embed.clone() for layer in q.layers]
    q(torch.randn(20, 3))
    assert all(torch.equal(b, layer.codebook.embed) for b, layer in zip(before, q.layers))  # eval: no update


def test_moving_averages_find_the_clusters():
    q = codec.ResidualVectorQuantizer(1, 6, 2)
    g = torch.Generator().manual_seed(3)
    centres = torch.randn(6, 2, generator=g) * 5
    x = centres[torch.randint(6, (512,), generator=g)] + 0.1 * torch.randn(512, 2, generator=g)
    q.eval()
    start = ((q(x)[0] - x) ** 2).sum(-1).mean()
    q.train()
    for _ in range(100):
        q(x, generator=g)
    q.eval()
    end = ((q(x)[0] - x) ** 2).sum(-1).mean()
    assert end < 0.1 * start and end < 0.5  # near the clusters' own spread (2 x 0.1^2 = 0.02), or close to it


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_is_lloyds_as_scikit_learn_runs_it(seed):
    """From the same starting rows, scikit-learn's Lloyd k-means ends on the same centres and assignment (clustered
    data, so that no centre is left without rows, where the two differ on purpose: sklearn moves it, we keep it)."""
    from sklearn.cluster import KMeans

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(300, 4, generator=g, dtype=torch.float64) + 3 * torch.randint(0, 5, (300, 1), generator=g)
    centres, assignment = codec.kmeans(x, 5, 20, torch.Generator().manual_seed(seed + 10))
    start = x[torch.randperm(300, generator=torch.Generator().manual_seed(seed + 10))[:5]]  # the rows kmeans drew
    theirs = KMeans(5, init=start.numpy(), n_init=1, max_iter=20, tol=0, algorithm="lloyd").fit(x.numpy())
    assert torch.allclose(centres, torch.from_numpy(theirs.cluster_centers_), atol=1e-10)
    assert torch.equal(assignment, torch.from_numpy(theirs.labels_).long())


def test_kmeans_keeps_a_centre_nobody_chose_and_zero_iterations_is_the_start():
    x = torch.tensor([[0.0], [0.1], [10.0], [10.1]])
    centres, assignment = codec.kmeans(x, 2, 0, torch.Generator().manual_seed(0))
    assert all((x == c).all(-1).any() for c in centres)  # rows of x, not moved
    x = torch.tensor([[0.0], [0.0], [1.0]])  # two equal rows: a start on both leaves one centre without rows
    for seed in range(20):
        centres, assignment = codec.kmeans(x, 2, 3, torch.Generator().manual_seed(seed))
        assert torch.isfinite(centres).all() and set(assignment.tolist()) <= {0, 1}


def test_kmeans_init_starts_every_codebook_on_the_residuals_it_will_code():
    """After kmeans_init on clustered vectors the first codebook codes them far better than its random start, the
    second codes what the first leaves (smaller entries, and less left again), no entry starts dead, and the moving
    averages agree with the entries."""
    g = torch.Generator().manual_seed(4)
    centres = torch.randn(8, 3, generator=g) * 4  # (8, 3)
    x = centres[torch.randint(8, (2000,), generator=g)] + 0.05 * torch.randn(2000, 3, generator=g)  # (2000, 3)
    q = codec.ResidualVectorQuantizer(2, 8, 3)
    q.kmeans_init(x.reshape(40, 50, 3), generator=torch.Generator().manual_seed(0))
    first, second = (layer.codebook for layer in q.layers)
    q.eval()
    left_by = [((q.decode(q.encode(x, n)) - x) ** 2).sum(-1).mean() for n in (1, 2)]
    start, _ = codec.kmeans(x, 8, 0, torch.Generator().manual_seed(0))  # the rows k-means started from
    at_start = (torch.cdist(x, start).min(-1).values ** 2).mean()
    assert left_by[0] < at_start / 2 and left_by[1] < left_by[0] / 2
    assert second.embed.norm(dim=-1).mean() < first.embed.norm(dim=-1).mean() / 4
    for book in (first, second):
        assert (book.cluster_size >= book.dead).all()
        assert torch.allclose(book.embed_avg / book.cluster_size[:, None], book.embed, atol=1e-5)


def test_bits_per_second_is_encodecs_bandwidth():
    assert codec.bits_per_second(32, 1024, 75) == 24_000  # EnCodec 24 kHz at 24 kbps: 32 codebooks of 1,024
    assert codec.bits_per_second(2, 1024, 75) == 1_500  # and at 1.5 kbps: the first two


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.encode(torch.randn(4, 5)), r"vectors of size 3 along the last axis, got shape \(4, 5\)"),
        (lambda q: q.encode(torch.ones(4, 3, dtype=torch.long)), "reads float vectors"),
        (lambda q: q.encode(torch.randn(4, 3), n=3), "n must be a number of codebooks from 1 to 2, got 3"),
        (lambda q: q.encode(torch.randn(4, 3), n=True), "got True"),
        (lambda q: q.decode(torch.full((4, 2), 8)), r"codes must be in \[0, 7\], got 8 to 8"),
        (lambda q: q.decode(torch.zeros(4, 3, dtype=torch.long)), "from 1 to 2, got 3"),
        (lambda q: q.decode(torch.zeros(4, 2)), "codes must be integer ids"),
        (lambda q: codec.Codebook(1, 3), "at least 2 entries"),
        (lambda q: codec.ResidualVectorQuantizer(0, 8, 3), "num_quantizers must be at least 1, got 0"),
        (lambda q: codec.kmeans(torch.randn(4, 3), 5), "k must be a number of centres from 1 to the 4 rows, got 5"),
        (lambda q: codec.kmeans(torch.randn(4, 3, 2), 2), r"kmeans reads float rows \(N, dim\), got shape \(4, 3, 2\)"),
        (lambda q: codec.kmeans(torch.randn(4, 3), 2, -1), "iterations must be a whole number of at least 0, got -1"),
        (lambda q: q.kmeans_init(torch.randn(20, 4)), "vectors of size 3 along the last axis"),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call(codec.ResidualVectorQuantizer(2, 8, 3))


# ---- the encoder and decoder around the quantizer -------------------------------------------------------------------


@pytest.mark.parametrize("strides", [(2, 4, 5), (3, 2)])
def test_the_encoder_makes_one_frame_per_hop_and_reads_its_receptive_field(strides):
    torch.manual_seed(0)
    encoder = codec.CodecEncoder(channels=4, strides=strides, dim=6).eval()
    hop = math.prod(strides)
    samples = torch.randn(2, 40 * hop, requires_grad=True)
    frames = encoder(samples)
    assert frames.shape == (2, 40, 6) and encoder.hop == hop
    frames[0, 20].sum().backward()  # which samples does the middle frame read? those with a gradient
    read = samples.grad[0].nonzero()[:, 0]
    assert read.max() - read.min() + 1 == encoder.receptive_field()
    assert samples.grad[1].abs().sum() == 0  # and nothing of the other clip


def test_the_decoder_returns_the_length_and_the_codec_its_codes():
    torch.manual_seed(1)
    model = codec.Codec(channels=4, strides=(2, 5), dim=8, num_quantizers=3, size=16).eval()
    samples = torch.randn(3, 200)
    with torch.no_grad():
        rebuilt, codes, commitment = model(samples)
        assert rebuilt.shape == (3, 200) and codes.shape == (3, 20, 3) and commitment >= 0
        torch.testing.assert_close(model.decode(model.encode(samples)), rebuilt, atol=1e-5, rtol=0)
        coarse = model.decode(model.encode(samples, n=1))  # the first codebook alone: another, coarser sound
    assert coarse.shape == (3, 200) and not torch.allclose(coarse, rebuilt, atol=1e-4)


@pytest.mark.slow  # about 2 s: make test runs it, make check does not
def test_the_codec_learns_to_rebuild_a_tone_through_the_quantizer():
    """A few Adam steps on one clip: the reconstruction error falls, and the reconstruction's gradient reaches the
    encoder through the codes (straight through), beside the commitment loss's."""
    torch.manual_seed(2)
    model = codec.Codec(channels=8, strides=(2, 4), dim=8, num_quantizers=2, size=32, dropout=False)
    t = torch.arange(800) / 8000
    clip = (0.5 * torch.sin(2 * math.pi * 440 * t) + 0.3 * torch.sin(2 * math.pi * 1209 * t))[None]  # (1, 800)
    before = model.encoder.stem.weight.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    errors = []
    for _ in range(60):
        rebuilt, _, commitment = model(clip, generator=torch.Generator().manual_seed(0))
        loss = F.mse_loss(rebuilt, clip) + 0.25 * commitment
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        errors.append(F.mse_loss(rebuilt, clip).item())
    assert errors[-1] < 0.5 * errors[0]
    assert not torch.equal(model.encoder.stem.weight, before)


def test_the_codec_refuses_what_it_cannot_read():
    model = codec.Codec(channels=4, strides=(2, 5), dim=8)
    with pytest.raises(ValueError, match=r"T a multiple of its hop 10, got torch.float32 of shape \(1, 95\)"):
        model(torch.zeros(1, 95))
    with pytest.raises(ValueError, match=r"the decoder reads frames \(B, F, 8\), got \(1, 5, 7\)"):
        model.decoder(torch.zeros(1, 5, 7))
    with pytest.raises(ValueError, match="strides must be positive ints"):
        codec.CodecEncoder(strides=(2, 0))


def test_the_reconstruction_reaches_the_encoder_straight_through_the_codes():
    torch.manual_seed(3)
    model = codec.Codec(channels=4, strides=(2, 5), dim=8, num_quantizers=2, size=16, dropout=False)
    rebuilt, _, _ = model(torch.randn(1, 100))
    F.mse_loss(rebuilt, torch.zeros(1, 100)).backward()  # the reconstruction alone, no commitment loss
    assert model.encoder.stem.weight.grad.abs().sum() > 0


def _tone(freq, phase, rate=4000, n=1920):
    t = torch.arange(n, dtype=torch.float64) / rate
    return 0.3 * torch.sin(2 * math.pi * freq * t + phase)


def test_the_spectral_loss_is_zero_for_the_same_sound_and_blind_to_phase_but_not_to_pitch():
    tone = _tone(941.0, 0.0)[None]  # (1, 1920)
    shifted = _tone(941.0, 1.3)[None]  # the same tone, another phase
    other = _tone(1209.0, 0.0)[None]  # another key's tone
    assert codec.spectral_loss(tone, tone) == 0
    assert codec.spectral_loss(shifted, tone) < 0.1 * codec.spectral_loss(other, tone)  # 0.07: the leakage moves
    assert F.l1_loss(shifted, tone) > 0.5 * F.l1_loss(other, tone)  # the waveform distance punishes the phase
    # each window's term by hand: log distance (floor 1) plus a tenth of the plain distance, Hann window, hop n / 4
    a, b = tone.float(), (0.5 * other).float()
    by_hand = 0
    for n in (64, 256):
        w = torch.hann_window(n)
        x, y = (torch.stft(v, n, n // 4, window=w, return_complex=True).abs() for v in (a, b))
        by_hand += (torch.log(x + 1) - torch.log(y + 1)).abs().mean() + (x - y).abs().mean() / 10
    assert codec.spectral_loss(a, b) == pytest.approx(float(by_hand), rel=1e-6)
    with pytest.raises(ValueError, match="one shape"):
        codec.spectral_loss(a, b[:, :100])
    with pytest.raises(ValueError, match="each window must be from 4 samples"):
        codec.spectral_loss(a, b, windows=(4096,))


def test_the_codec_loss_adds_the_waveform_the_spectrum_and_the_commitment():
    torch.manual_seed(0)
    model = codec.Codec(4, (2, 4), 8, 2, 8, dropout=False).eval()
    samples = torch.randn(2, 256)
    rebuilt, _, commitment = model(samples)
    expected = F.l1_loss(rebuilt, samples) + codec.spectral_loss(rebuilt, samples) + commitment
    assert torch.allclose(codec.codec_loss(model, samples), expected)


def test_a_codec_checkpoint_has_no_config_and_loads_the_same_codes(tmp_path):
    import transformer_lib as tl

    torch.manual_seed(1)
    model = codec.Codec(4, (2, 5), 8, 3, 16, dropout=True).eval()
    path = tl.save_checkpoint(model, tmp_path / "codec.pt", init=model.checkpoint_init())
    loaded, _ = tl.load_checkpoint(path)
    samples = torch.randn(2, 40)
    assert loaded.quantizer.dropout and loaded.encoder.strides == (2, 5)
    assert torch.equal(loaded.encode(samples), model.encode(samples))
    assert torch.equal(loaded.decode(model.encode(samples)), model.decode(model.encode(samples)))


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_shipped_touch_tone_codec_is_read_back_by_a_decoder_that_learned_nothing():
    """Through three or four codebooks the Goertzel decoder reads the keys of nearly every held-out clip; through
    the first alone, far fewer: what the other codebooks add. The scores are what the file records (a clip or two
    may flip on another CPU)."""
    import transformer_lib as tl
    from transformer_lib import recipes

    model, meta = tl.load_checkpoint("touch_tone_codec")
    assert isinstance(model, codec.Codec) and not model.training
    scores, recorded = recipes.codec_scores(model), meta["evals"][-1]
    for key, value in scores.items():
        assert value == pytest.approx(recorded[key], abs=2 / 64 if key.startswith("read") else 0.1), key
    assert scores["read back, 4 codebooks"] >= 0.95 and scores["read back, 3 codebooks"] >= 0.95
    assert scores["read back, 1 codebooks"] < scores["read back, 2 codebooks"] - 0.3
    snr = [scores[f"snr dB, {k} codebooks"] for k in (1, 2, 3, 4)]
    assert snr == sorted(snr) and snr[-1] > 12  # each codebook adds; all four well above the old codec's 5.6 dB
