"""Chapter 16's sound half: the log-mel spectrogram by hand equals transformers' WhisperFeatureExtractor, the
touch-tone clips are what they promise, and our SpeechTranscriber is transformers' WhisperForConditionalGeneration
(logits to 1e-5 both ways, weights back unchanged)."""

import math

import pytest
import torch
from torch import nn

from transformer_lib import hf, speech
from transformer_lib.attention import MultiHeadAttention

transformers = pytest.importorskip("transformers")

TOKENIZER = speech.touch_tone_tokenizer()


# ---- the log-mel spectrogram ---------------------------------------------------------------------


@pytest.mark.parametrize("n_mels, n_fft, rate", [(80, 400, 16000), (128, 400, 16000), (40, 512, 22050)])
def test_mel_filters_equal_transformers_mel_filter_bank(n_mels, n_fft, rate):
    from transformers.audio_utils import mel_filter_bank

    theirs = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=rate,
        norm="slaney",
        mel_scale="slaney",
    )  # (F, n_mels) float64
    ours = speech.mel_filters(sampling_rate=rate, n_fft=n_fft, n_mels=n_mels)  # (n_mels, F) float32
    assert ours.shape == (n_mels, n_fft // 2 + 1) and ours.dtype == torch.float32
    # measured: at most 2e-9 apart, float32's rounding of the float64 filters (whose peak is about 0.03)
    torch.testing.assert_close(ours.double(), torch.from_numpy(theirs.T), atol=1e-8, rtol=1e-6)


def test_the_slaney_scale_is_linear_below_1000_hz_and_logarithmic_above():
    assert speech.hz_to_mel(torch.tensor(200.0)).item() == pytest.approx(3.0)
    assert speech.hz_to_mel(torch.tensor(1000.0)).item() == pytest.approx(15.0)
    assert speech.hz_to_mel(torch.tensor(6400.0)).item() == pytest.approx(15.0 + 27.0)  # 27 mels per factor 6.4
    hz = torch.linspace(0, 8000, 101, dtype=torch.float64)
    torch.testing.assert_close(speech.mel_to_hz(speech.hz_to_mel(hz)), hz)


def test_power_spectrogram_by_hand_equals_torch_stft():
    x = torch.randn(2, 3200, generator=torch.Generator().manual_seed(3))
    window = torch.hann_window(400)  # periodic, as Whisper's
    stft = torch.stft(x, 400, 160, window=window, center=True, pad_mode="reflect", return_complex=True)
    ours = speech.power_spectrogram(x)  # (B, 201, 1 + 3200 // 160)
    assert ours.shape == (2, 201, 21)
    torch.testing.assert_close(ours, stft.abs() ** 2, atol=1e-3, rtol=1e-4)


def _whisper_features(waves: torch.Tensor, seconds: int) -> torch.Tensor:
    extractor = transformers.WhisperFeatureExtractor(
        feature_size=80, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=seconds
    )  # it pads every clip to chunk_length seconds: the clips here are that long already
    return torch.from_numpy(extractor(waves.numpy(), sampling_rate=16000, return_tensors="np")["input_features"])


def test_log_mel_by_hand_equals_whisper_feature_extractor():
    tones, _ = speech.touch_tone_clips(6, seed=0)  # (6, 16000): noisy touch tones
    quiet = tones.clone()
    quiet[:, :8000] = 0.0  # half a second of digital silence: the floor at max - 8 decides there
    noise = 0.1 * torch.randn(3, 32000, generator=torch.Generator().manual_seed(1))  # two seconds
    # measured: at most 5e-6 apart on values between -0.5 and 1.5 (float32 FFTs summed in another order)
    for waves, seconds in ((tones, 1), (quiet, 1), (noise, 2)):
        ours = speech.log_mel(waves)
        assert ours.shape == (len(waves), 80, 100 * seconds)
        torch.testing.assert_close(ours, _whisper_features(waves, seconds), atol=1e-5, rtol=0)
    torch.testing.assert_close(speech.log_mel(tones[0]), speech.log_mel(tones)[0])  # one clip, no batch
    assert speech.log_mel(quiet)[:, :, :40].amin() == speech.log_mel(quiet).amin()  # silence sits on the floor


@pytest.mark.parametrize(
    "bad, kwargs, error, message",
    [
        (torch.zeros(1, 2, 16000), {}, ValueError, r"shape \(samples,\) or \(B, samples\), got \(1, 2, 16000\)"),
        (torch.zeros(16000, dtype=torch.long), {}, TypeError, "float samples"),
        ([0.0] * 16000, {}, TypeError, "torch.Tensor of samples, got list"),
        (torch.zeros(100), {}, ValueError, "at least 201 samples"),
        (torch.zeros(16000), {"sampling_rate": 8000}, ValueError, "sampling_rate >= 16000.*got 8000"),
    ],
)
def test_log_mel_names_what_it_expected(bad, kwargs, error, message):
    with pytest.raises(error, match=message):
        speech.log_mel(bad, **kwargs)


def test_mel_filters_refuse_what_cannot_be_built():
    with pytest.raises(ValueError, match="Nyquist"):
        speech.mel_filters(sampling_rate=8000)
    with pytest.raises(ValueError, match="cover no FFT bin: n_mels=128 is too many for n_fft=64"):
        speech.mel_filters(n_fft=64, n_mels=128)


# ---- the touch-tone clips ------------------------------------------------------------------------


def test_clips_are_the_same_for_a_seed_and_differ_across_seeds():
    waves, texts = speech.touch_tone_clips(5, seed=0)
    again, texts_again = speech.touch_tone_clips(5, seed=0)
    other, other_texts = speech.touch_tone_clips(5, seed=1)
    assert waves.shape == (5, 16000) and waves.dtype == torch.float32
    assert torch.equal(waves, again) and texts == texts_again
    assert not torch.equal(waves, other) and texts != other_texts
    assert texts == ["488", "314091", "13*3", "396", "121#18"]  # integer draws: the same on every machine
    many = speech.touch_tone_clips(200, seed=2)[1]
    assert {len(t) for t in many} == {3, 4, 5, 6} and set("".join(many)) == set(speech.TOUCH_TONE_KEYS)


def test_the_noise_is_gaussian_and_at_the_promised_signal_to_noise_ratio():
    clean, texts = speech.touch_tone_clips(40, seed=3, snr_db=None)
    noisy, same = speech.touch_tone_clips(40, seed=3, snr_db=(-5.0, 15.0))
    assert texts == same  # the noise is drawn last: the same clips, plus noise
    noise = (noisy - clean).double()
    snr = 10 * torch.log10(clean.double().pow(2).mean(1) / noise.pow(2).mean(1))  # (40,) dB
    assert snr.min() >= -5.0 - 1e-3 and snr.max() <= 15.0 + 1e-3 and snr.max() - snr.min() > 10.0
    fixed, _ = speech.touch_tone_clips(40, seed=3, snr_db=(7.5, 7.5))
    snr = 10 * torch.log10(clean.double().pow(2).mean(1) / (fixed - clean).double().pow(2).mean(1))
    torch.testing.assert_close(snr, torch.full_like(snr, 7.5), atol=1e-3, rtol=0)
    z = noise / noise.std(dim=1, keepdim=True)  # (40, 16000): each clip's noise, standardised
    assert z.mean(1).abs().max() < 0.05
    assert (z.pow(4).mean(1) - 3.0).abs().max() < 0.25  # a Gaussian's kurtosis is 3 (a uniform's 1.8)


def test_each_key_sounds_its_row_and_column_tone():
    for seed in range(4):
        wave, (key,) = speech.touch_tone_clips(1, seed=seed, keys=(1, 1), snr_db=None)
        spectrum = torch.fft.rfft(wave[0].double()).abs()  # 16000 samples: bins 1 Hz apart
        low, high = spectrum[:1100].argmax().item(), spectrum[1100:].argmax().item() + 1100
        row, col = divmod(speech.TOUCH_TONE_KEYS.index(key), 3)
        assert abs(low - speech.ROW_TONES[row]) <= 15 and abs(high - speech.COLUMN_TONES[col]) <= 15, key


def test_batches_repeat_for_a_seed_and_hold_bos_keys_eos():
    first = next(speech.touch_tone_batches(4, seed=5))
    features, tgt = next(speech.touch_tone_batches(4, seed=5))
    assert torch.equal(features, first[0]) and torch.equal(tgt, first[1])
    assert features.shape == (4, 80, 100) and tgt.dtype == torch.long
    assert (tgt[:, 0] == TOKENIZER.bos_id).all()
    ends = (tgt != TOKENIZER.pad_id).sum(1) - 1  # (4,): where each row's <eos> sits
    assert (tgt[torch.arange(4), ends] == TOKENIZER.eos_id).all()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(n=0, seed=0), ValueError, "n must be a positive int"),
        (dict(n=2, seed=0.5), TypeError, "seed must be an int or a torch.Generator, got float"),
        (dict(n=2, seed=0, sampling_rate=2000), ValueError, "above 2954 Hz to hold the tones, got 2000"),
        (dict(n=2, seed=0, keys=(0, 3)), ValueError, r"keys must be a pair \(low, high\) with 1 <= low"),
        (dict(n=2, seed=0, snr_db=(5.0, 1.0)), ValueError, "snr_db must be a pair"),
        (dict(n=2, seed=0, keys=(6, 6), tone_ms=(200, 200)), ValueError, "do not fit in 1 s"),
    ],
)
def test_clips_name_what_they_expected(kwargs, error, message):
    with pytest.raises(error, match=message):
        speech.touch_tone_clips(**kwargs)


# ---- the model: stem, positions, decoding --------------------------------------------------------


def test_the_stem_halves_the_frames_as_the_closed_form_says():
    stem = speech.ConvStem(n_mels=4, d_model=8)
    for frames in (1, 2, 3, 7, 8, 99, 100, 101):
        out = stem(torch.randn(2, 4, frames))
        conv = (frames + 2 * 1 - 3) // 2 + 1  # a convolution's output length: floor((T + 2p - k) / s) + 1
        assert out.shape == (2, speech.stem_frames(frames), 8)
        assert speech.stem_frames(frames) == conv == math.ceil(frames / 2)
    with pytest.raises(ValueError, match="n_frames must be a positive int, got 0"):
        speech.stem_frames(0)


def test_whisper_positions_are_transformers_sinusoids():
    from transformers.models.whisper.modeling_whisper import sinusoids

    for length, d in ((50, 32), (1500, 384), (7, 6)):
        torch.testing.assert_close(speech.whisper_positions(length, d), sinusoids(length, d), atol=0, rtol=0)
    with pytest.raises(ValueError, match="even d_model"):
        speech.whisper_positions(10, 7)


def test_a_key_bias_would_change_nothing_so_the_model_has_none():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).eval()
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    before = attention(q, kv, kv, mask)[0]
    with torch.no_grad():
        attention.k_proj.bias.add_(torch.randn(16))  # every score of one query moves by the same q . b
    torch.testing.assert_close(attention(q, kv, kv, mask)[0], before, atol=1e-5, rtol=1e-5)
    model = _random_model(0, tie=True)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 2 + 2 * 2 and all(m.k_proj.bias is None for m in attentions)
    assert all(m.v_proj.bias is not None for m in attentions)


def _random_model(seed, *, tie, n_mels=16, n_frames=30, layers=(2, 2), d_model=32) -> speech.SpeechTranscriber:
    """A small model with every weight moved off its start, biases and norms too."""
    torch.manual_seed(seed)
    cfg = speech.speech_config(
        vocab_size=16,
        d_model=d_model,
        num_heads=4,
        num_layers=layers[0],
        num_decoder_layers=layers[1],
        d_ff=2 * d_model,
        max_len=24,
        tie_embeddings=tie,
    )
    model = speech.SpeechTranscriber(cfg, n_mels=n_mels, n_frames=n_frames).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    return model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_and_uncached_greedy_decoding_agree(seed):
    model = _random_model(seed, tie=seed != 1, layers=(1 + seed % 2, 2 + seed % 2))
    features = torch.randn(5, 16, 30, generator=torch.Generator().manual_seed(seed))
    cached = model.greedy_decode(features, TOKENIZER.bos_id, TOKENIZER.eos_id, max_new_tokens=12)
    plain = model.greedy_decode(features, TOKENIZER.bos_id, TOKENIZER.eos_id, max_new_tokens=12, use_cache=False)
    assert torch.equal(cached, plain)
    with torch.no_grad():
        first = model(features, cached[:, :1]).argmax(-1)[:, 0]  # (5,): teacher forcing's first choice
    assert torch.equal(cached[:, 1], first)


def test_the_model_names_what_it_expected():
    model = _random_model(0, tie=True)
    tgt = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"shape \(B, n_mels, n_frames\), got \(16, 30\)"):
        model(torch.randn(16, 30), tgt)
    with pytest.raises(TypeError, match="must hold floats"):
        model(torch.zeros(2, 16, 30, dtype=torch.long), tgt)
    with pytest.raises(ValueError, match=r"n_mels=16, n_frames=30\), got \(2, 80, 30\)"):
        model(torch.randn(2, 80, 30), tgt)
    with pytest.raises(ValueError, match="positions are a learned table"):
        speech.SpeechTranscriber(speech.speech_config(positional="sinusoidal"))


# ---- Whisper parity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, tie, n_mels, n_frames, layers, d_model",
    [(0, True, 16, 30, (2, 2), 32), (1, False, 24, 40, (1, 3), 32), (2, True, 8, 12, (3, 1), 48)],
)
def test_to_hf_gives_whisper_with_our_logits_and_from_hf_gives_our_weights_back(
    seed, tie, n_mels, n_frames, layers, d_model
):
    ours = _random_model(seed, tie=tie, n_mels=n_mels, n_frames=n_frames, layers=layers, d_model=d_model)
    theirs = hf.to_hf(ours)
    assert type(theirs).__name__ == "WhisperForConditionalGeneration"
    features = torch.randn(3, n_mels, n_frames)
    tgt = torch.randint(0, 16, (3, 11))
    with torch.no_grad():
        torch.testing.assert_close(
            ours(features, tgt), theirs(input_features=features, decoder_input_ids=tgt).logits, atol=1e-5, rtol=1e-5
        )
    back = hf.from_hf(theirs)
    assert isinstance(back, speech.SpeechTranscriber) and (back.n_mels, back.n_frames) == (n_mels, n_frames)
    assert list(back.state_dict()) == list(ours.state_dict())
    for (name, a), b in zip(ours.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), name
    assert (back.head.weight is back.tgt_embed.weight) == tie


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=30, num_mel_bins=16, d_model=24, encoder_layers=1, decoder_layers=2, encoder_attention_heads=3,
        decoder_attention_heads=3, encoder_ffn_dim=40, decoder_ffn_dim=40, max_source_positions=15,
        max_target_positions=12, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        begin_suppress_tokens=None,
    )  # fmt: skip
    model = transformers.WhisperForConditionalGeneration(config)
    with torch.no_grad():  # biases and norms off their start too; the encoder's sinusoids stay frozen
        for name, p in model.named_parameters():
            if "embed_positions" not in name or "decoder" in name:
                p.add_(torch.randn(p.shape) * 0.1)
    folder = tmp_path_factory.mktemp("whisper")
    model.save_pretrained(folder)
    return transformers.WhisperForConditionalGeneration.from_pretrained(folder).eval()


def test_from_hf_gives_whispers_logits_and_to_hf_gives_its_weights_back(whisper):
    ours = hf.from_hf(whisper)
    assert isinstance(ours, speech.SpeechTranscriber) and (ours.n_mels, ours.n_frames) == (16, 30)
    cfg = ours.config
    assert (cfg.num_layers, cfg.num_decoder_layers, cfg.num_heads, cfg.d_ff, cfg.max_len) == (1, 2, 3, 40, 12)
    features = torch.randn(2, 16, 30, generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = whisper(input_features=features, decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours(features, tgt), theirs, atol=1e-5, rtol=1e-5)
    back = hf.to_hf(ours).state_dict()
    assert back.keys() == whisper.state_dict().keys()
    for name, tensor in whisper.state_dict().items():
        assert torch.equal(back[name], tensor), name


def test_from_hf_refuses_what_ours_does_not_build(whisper):
    for change, message in (
        (dict(activation_function="relu"), "'activation_function': 'relu'"),
        (dict(decoder_attention_heads=6), r"'decoder_attention_heads / encoder_attention_heads': \(6, "),
        (dict(decoder_ffn_dim=48), r"'decoder_ffn_dim / encoder_ffn_dim': \(48, "),
        (dict(scale_embedding=True), "'scale_embedding': True"),
    ):
        config = transformers.WhisperConfig(**(whisper.config.to_dict() | change))
        with pytest.raises(ValueError, match=message):
            hf.from_hf(transformers.WhisperForConditionalGeneration(config))
    trained = transformers.WhisperForConditionalGeneration(whisper.config)
    with torch.no_grad():
        trained.model.encoder.embed_positions.weight.add_(0.01)
    with pytest.raises(ValueError, match="encoder positions are not its fixed sinusoids"):
        hf.from_hf(trained)


def test_to_hf_refuses_what_whisper_cannot_hold():
    for change, message in (
        (dict(activation="relu"), "'activation': \\('relu', 'gelu'\\)"),
        (dict(eps=1e-6), "'eps'"),
        (dict(norm="rms"), "'norm'"),
        (dict(vocab_size=20, tgt_vocab_size=16), "'vocab_size'"),
    ):
        cfg = speech.speech_config(vocab_size=16, d_model=32, num_heads=4, num_layers=1, d_ff=64, max_len=24)
        model = speech.SpeechTranscriber(cfg.replace(**change), n_mels=16, n_frames=30)
        with pytest.raises(ValueError, match="not a Whisper architecture.*" + message):
            hf.to_hf(model)
    model = _random_model(0, tie=True, n_frames=31)
    with pytest.raises(ValueError, match="2 \\* max_source_positions frames, an even number; this model takes 31"):
        hf.to_hf(model)
    model = _random_model(0, tie=True)
    model.decoder.layers[1].cross_attn.k_proj = nn.Linear(32, 32)  # a key bias put back by hand
    with pytest.raises(ValueError, match=r"key projections have no bias.*\['decoder.layers.1.cross_attn'\]"):
        hf.to_hf(model)


# ---- the baseline that learns nothing: Goertzel filters ------------------------------------------------------


def test_goertzel_power_is_the_fft_power_at_its_bins_and_dft_power_anywhere():
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(3, 5, 400, generator=g, dtype=torch.float64)  # (3, 5, N)
    bins = [0, 7, 30, 31, 200]  # frequencies k * 16000 / 400 = 40 k Hz fall on the FFT's bins
    reference = torch.fft.rfft(frames, dim=-1).abs().pow(2)[..., bins]  # (3, 5, 5): |X_k|^2
    by_recursion = speech.goertzel_power(frames, [40.0 * k for k in bins], 16000)
    torch.testing.assert_close(by_recursion, reference, rtol=1e-9, atol=1e-9)
    tones = (*speech.ROW_TONES, *speech.COLUMN_TONES)  # between bins: the DFT's sum written out
    n = torch.arange(400, dtype=torch.float64)
    written_out = torch.stack(
        [(frames * torch.exp(-2j * math.pi * f * n / 16000)).sum(-1).abs().pow(2) for f in tones], dim=-1
    )  # (3, 5, 7)
    torch.testing.assert_close(speech.goertzel_power(frames, tones), written_out, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(speech.dft_power(frames, tones), written_out, rtol=1e-9, atol=1e-9)
    # float32, as the decoder runs: measured within 1e-5 of the float64 numbers relative to their largest
    torch.testing.assert_close(
        speech.dft_power(frames.float(), tones).double(), written_out, rtol=0, atol=1e-5 * written_out.max().item()
    )


def test_a_pure_tone_peaks_at_its_own_filter_with_the_closed_form_power():
    t = torch.arange(400, dtype=torch.float64) / 16000
    power = speech.goertzel_power(0.3 * torch.sin(2 * math.pi * 1336.0 * t), (*speech.ROW_TONES, *speech.COLUMN_TONES))
    assert power.argmax().item() == 5  # 1,336 Hz
    assert power[5].item() == pytest.approx((0.3 * 400 / 2) ** 2, rel=0.02)  # (A N / 2)^2, up to leakage


def test_dtmf_decode_reads_every_clean_clip_exactly_and_nothing_from_silence_or_noise():
    waves, texts = speech.touch_tone_clips(200, seed=31, snr_db=None)
    assert speech.dtmf_decode(waves) == texts
    waves, texts = speech.touch_tone_clips(200, seed=32)  # noise from 0 to 20 dB, as the model's training
    assert speech.character_error_rate(speech.dtmf_decode(waves), texts) < 0.01  # measured 0
    quiet = torch.zeros(2, 16000)
    noise = torch.randn(2, 16000, generator=torch.Generator().manual_seed(0))
    assert speech.dtmf_decode(quiet) == ["", ""] == speech.dtmf_decode(noise)


def test_the_goertzel_functions_name_what_they_expected():
    with pytest.raises(TypeError, match="frames must be a float tensor"):
        speech.goertzel_power(torch.ones(4, dtype=torch.long), [697.0])
    with pytest.raises(ValueError, match="frequencies must lie between 0 and sampling_rate / 2 = 8000 Hz"):
        speech.dft_power(torch.ones(4), [9000.0])
    with pytest.raises(ValueError, match=r"a batch \(B, samples\)"):
        speech.dtmf_decode(torch.zeros(16000))
    with pytest.raises(ValueError, match="min_frames must be a positive int, got 0"):
        speech.dtmf_decode(torch.zeros(1, 16000), min_frames=0)
    with pytest.raises(ValueError, match="threshold must be a positive number"):
        speech.dtmf_decode(torch.zeros(1, 16000), threshold=-1.0)


# ---- transcribing, scoring, training --------------------------------------------------------------


def test_character_error_rate_on_hand_made_cases():
    assert speech.character_error_rate(["123", "#*0"], ["123", "#*0"]) == 0.0
    assert speech.character_error_rate([""], ["1234"]) == 1.0  # all deleted
    assert speech.character_error_rate(["1122334"], ["1234"]) == 3 / 4  # three insertions
    assert speech.character_error_rate(["1224"], ["1234"]) == 1 / 4  # one substitution
    assert speech.character_error_rate(["12", ""], ["123", "4"]) == (1 + 1) / 4  # summed, not averaged per clip
    assert speech.character_error_rate(["12345678"], ["1"]) == 7.0  # insertions can take it above 1
    assert speech.edit_distance("kitten", "sitting") == 3 == speech.edit_distance("sitting", "kitten")


@pytest.mark.parametrize(
    "hypotheses, references, error, message",
    [
        ("123", ["123"], TypeError, "hypotheses must be a list of strings"),
        (["123"], [123], TypeError, "references must be a list of strings"),
        (["1", "2"], ["1"], ValueError, "one hypothesis per reference, got 2 and 1"),
        ([""], [""], ValueError, "the references hold no characters"),
    ],
)
def test_character_error_rate_names_what_it_expected(hypotheses, references, error, message):
    with pytest.raises(error, match=message):
        speech.character_error_rate(hypotheses, references)


def test_transcribe_names_what_it_expected():
    model = _random_model(0, tie=True, n_mels=80, n_frames=100)
    waves, _ = speech.touch_tone_clips(2, seed=0)
    heard = speech.transcribe(model, waves, TOKENIZER, sampling_rate=16000)  # up to max_len - 1 = 23 tokens
    assert len(heard) == 2 and all(isinstance(h, str) and len(h) <= 23 for h in heard)
    with pytest.raises(ValueError, match="10 ms of 16000 Hz audio; got sampling_rate=8000"):
        speech.transcribe(model, waves, TOKENIZER, sampling_rate=8000)
    with pytest.raises(ValueError, match=r"takes 100 frames, 16000 samples; got 8000 samples \(50 frames\)"):
        speech.transcribe(model, waves[:, :8000], TOKENIZER, sampling_rate=16000)
    with pytest.raises(ValueError, match=r"a batch \(B, samples\)"):
        speech.transcribe(model, waves[0], TOKENIZER, sampling_rate=16000)
    with pytest.raises(ValueError, match="touch-tone tokenizer has 16 tokens, the model 30"):
        speech.train_touch_tones(speech.SpeechTranscriber(speech.speech_config(vocab_size=30)), steps=1, seed=0)


@pytest.mark.slow
def test_a_small_model_learns_to_hear_the_keys():
    """300 steps (about 15 s on a laptop CPU): a model deaf to the clips cannot go below about 2.3 nats a token."""
    torch.manual_seed(0)
    cfg = speech.speech_config(vocab_size=16, d_model=64, num_heads=4, num_layers=2, d_ff=256, max_len=16)
    model = speech.SpeechTranscriber(cfg)
    history = speech.train_touch_tones(model, steps=300, seed=0, batch_size=32, lr=2e-3, progress=False)
    assert sum(history.losses[-50:]) / 50 < 1.2  # measured 0.6
    waves, texts = speech.touch_tone_clips(100, seed=10_000)
    heard = speech.transcribe(model, waves, TOKENIZER, sampling_rate=16000, max_new_tokens=8)
    assert speech.character_error_rate(heard, texts) < 0.5  # measured 0.27


def test_the_shipped_touch_tone_model_and_its_seeds_hold_what_the_chapter_says():
    from transformer_lib import recipes
    from transformer_lib.checkpoints import load_checkpoint

    model, meta = load_checkpoint("touch_tones")
    waves, texts = recipes.touch_tone_test()
    scores = recipes.touch_tone_scores(model, waves, texts)
    assert abs(scores["character error rate"] - meta["evals"][-1]["character error rate"]) < 1e-9
    assert scores["character error rate"] < 0.02 and scores["exact share"] > 0.9
    runs = recipes.load_speech_runs()["runs"]
    assert [r["seed"] for r in runs] == list(recipes.SEEDS)
    assert all(r["character_error_rate"] < 0.02 for r in runs)
    # seed 0 of the runs is the shipped checkpoint's recipe: the same first steps
    assert runs[0]["first_losses"] == pytest.approx(meta["first_losses"], abs=1e-5)
    assert runs[0]["character_error_rate"] == pytest.approx(meta["evals"][-1]["character error rate"], abs=0.004)


def test_presses_reads_the_most_frequent_key_of_each_press_and_the_first_heard_of_a_tie():
    """The last step of dtmf_decode on frame keys: one press per run of frames that hold a key, its most frequent key;
    on a tie the key heard first, whatever the keys' indices (the rule max(set(run), key=run.count) followed the
    set's order, which CPython gives {3, 11} as 11 first: "#" here), and runs shorter than min_frames dropped."""
    four, hash_ = speech.TOUCH_TONE_KEYS.index("4"), speech.TOUCH_TONE_KEYS.index("#")
    assert speech.presses([-1, four, four, hash_, hash_, -1]) == "4"
    assert speech.presses([hash_, hash_, four, four]) == "#"
    assert speech.presses([four, hash_, hash_, -1, 0, -1, 1, 1], min_frames=2) == "#2"
    assert speech.presses([0, -1, 1], min_frames=1) == "12" and speech.presses([]) == ""
