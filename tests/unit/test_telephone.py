"""Chapter 18's recipes on telephone clips: the clips, the frame labels, CTC's targets and training, and the shipped
pre-trained wav2vec 2.0 with its fine-tuning runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer_lib import ctc, recipes, speech, wav2vec2
from transformer_lib.checkpoints import load_checkpoint


def test_normalize_samples_equals_hugging_faces_feature_extractor():
    transformers = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(0)
    scales = torch.tensor([[0.001], [1.0], [40.0]])  # quiet (there eps matters: var 1e-6 against 1e-7), plain, loud
    clips = torch.randn(3, 500, generator=g) * scales + 0.05  # float32 as the extractor keeps them, off centre
    extractor = transformers.Wav2Vec2FeatureExtractor(do_normalize=True, sampling_rate=8000)
    theirs = extractor([c.numpy() for c in clips], sampling_rate=8000, return_tensors="np")["input_values"]
    ours = wav2vec2.normalize_samples(clips.double())  # the same float32 samples, in float64
    torch.testing.assert_close(ours, torch.from_numpy(theirs).double(), atol=1e-4, rtol=0)
    eps_outside = (clips.double() - clips.double().mean(1, keepdim=True)) / (clips.double().std(1, False, True) + 1e-7)
    assert (eps_outside - ours).abs().max() > 1e-2  # the check would see eps in the wrong place
    assert torch.allclose(ours.mean(1), torch.zeros(3, dtype=torch.float64), atol=1e-9)
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        wav2vec2.normalize_samples(torch.zeros(500))


def test_telephone_clips_are_chapter_16s_clips_every_other_sample():
    fast, texts = recipes.telephone_clips(5, seed=3)
    slow, same = speech.touch_tone_clips(5, seed=3)  # (5, 16000)
    assert texts == same and fast.shape == (5, 8000)
    torch.testing.assert_close(fast, wav2vec2.normalize_samples(slow[:, ::2].contiguous()))
    waves, test_texts = recipes.telephone_test()
    assert waves.shape == (300, 8000) and test_texts == recipes.touch_tone_test()[1]
    # a stream drawn from one generator is chapter 16's stream: the second batch too
    g16, g8 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for _ in range(2):
        _, a = speech.touch_tone_clips(4, seed=g16)
        _, b = recipes.telephone_clips(4, seed=g8)
        assert a == b


def test_frame_labels_spell_each_clips_keys_and_mark_silence():
    labels = recipes.telephone_frame_labels(40, seed=12345)  # (40, 49)
    _, texts = recipes.telephone_clips(40, seed=12345)
    assert labels.shape == (40, wav2vec2.conv_frames(8000, recipes.W2V_KERNELS, recipes.W2V_STRIDES))
    for row, text in zip(labels.tolist(), texts):
        runs = [k for i, k in enumerate(row) if k > 0 and (i == 0 or row[i - 1] != k)]
        assert "".join(speech.TOUCH_TONE_KEYS[k - 1] for k in runs) == text
    assert (labels == 0).any() and (labels == -1).any() and labels.max() <= 12


def test_ctc_targets_put_each_key_after_the_blank():
    ids, lengths = recipes.ctc_targets(["12", "#0*9"])
    keys = speech.TOUCH_TONE_KEYS
    assert lengths.tolist() == [2, 4]
    assert ids.tolist() == [[keys.index("1") + 1, keys.index("2") + 1, 0, 0], [keys.index(k) + 1 for k in "#0*9"]]
    assert ctc.ctc_collapse(ids[0].tolist()) == ids[0, :2].tolist()


def test_the_ctc_model_takes_the_pretrained_network_as_a_copy_under_a_fresh_head():
    pretrained = recipes.telephone_wav2vec2(seed=4)
    fine = recipes.telephone_ctc(seed=1, pretrained=pretrained)
    for (name, a), b in zip(fine.wav2vec2.state_dict().items(), pretrained.wav2vec2.state_dict().values()):
        assert torch.equal(a, b), name
    assert fine.wav2vec2.projection.weight.data_ptr() != pretrained.wav2vec2.projection.weight.data_ptr()
    scratch = recipes.telephone_ctc(seed=1)
    assert torch.equal(scratch.head.weight, fine.head.weight)  # the seed makes the head, whatever the start
    assert not torch.equal(scratch.wav2vec2.projection.weight, fine.wav2vec2.projection.weight)


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_finetune_ctc_refuses_a_bad_budget_and_repeats_itself_for_a_seed():
    for bad in (0, 513, 2.5, True):
        with pytest.raises(ValueError, match="budget"):
            recipes.finetune_ctc(bad, 0)
    _, first = recipes.finetune_ctc(8, 2, steps=3)
    _, again = recipes.finetune_ctc(8, 2, steps=3, evaluate=False)  # the same steps, not scored
    _, other = recipes.finetune_ctc(8, 3, steps=3, evaluate=False)
    assert first["first_losses"] == again["first_losses"] != other["first_losses"]
    assert set(again) == {"seconds", "first_losses"}
    assert len(first["edits"]) == 300 and 0 <= first["character error rate"]


def test_the_pretraining_scores_are_what_they_say_on_an_untrained_model():
    scores = recipes.w2v_scores(recipes.telephone_wav2vec2(seed=0))
    assert set(scores) == {"contrastive loss", "pick accuracy", "perplexity"}
    assert 0 <= scores["pick accuracy"] < 0.25 and 2 <= scores["perplexity"] <= 64
    assert abs(scores["contrastive loss"] - np.log(21)) < 1.0  # near guessing among 21


@pytest.mark.slow  # reads the shipped checkpoint and file, transcribes 300 clips
def test_the_shipped_pretrained_model_and_the_ctc_runs_hold_what_the_chapter_says():
    model, meta = load_checkpoint("telephone_wav2vec2")
    assert meta["steps"] == recipes.W2V_STEPS
    final = meta["evals"][-1]
    assert final == pytest.approx(recipes.w2v_scores(model), abs=1e-4)  # the same numbers, measured again
    runs = recipes.load_ctc_runs()
    assert runs["budgets"] == list(recipes.CTC_BUDGETS)
    for name, records in runs["runs"].items():
        assert [r["seed"] for r in records] == list(recipes.SEEDS), name
        for r in records:
            total = sum(len(t) for t in recipes.telephone_test()[1])
            assert r["character_error_rate"] == pytest.approx(sum(r["edits"]) / total)
    # seed 0 of "scratch 8" again: the file's first losses and its error rate
    _, again = recipes.finetune_ctc(8, 0)
    filed = runs["runs"]["scratch 8"][0]
    assert again["first_losses"] == pytest.approx(filed["first_losses"], abs=1e-3)
    assert again["character error rate"] == pytest.approx(filed["character_error_rate"], abs=0.05)
