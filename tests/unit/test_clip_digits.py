"""Chapter 19's CLIP on the digits: the captions, the zero-shot classifier, retrieval and the shipped checkpoint."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import clip, recipes, vit


def test_describe_fills_every_field_and_refuses_what_is_not_a_digit():
    assert clip.describe(7, "a handwritten {word}") == "a handwritten seven"
    assert clip.describe(0, "the digit {digit}") == "the digit 0"
    assert clip.describe(8, "an {parity} digit {side} five") == "an even digit above five"
    assert clip.describe(3, "an {parity} digit {side} five") == "an odd digit below five"
    assert clip.describe(5, "an {parity} digit {side} five") == "an odd digit equal to five"
    for bad in (10, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="digit must be an int from 0 to 9"):
            clip.describe(bad, "{word}")


def test_every_template_writes_only_characters_the_tokenizer_knows_and_names_its_digit():
    tokenizer = clip.caption_tokenizer()
    for template, digit in itertools.product(clip.CAPTION_TEMPLATES + clip.HELD_OUT_TEMPLATES, range(10)):
        ids = clip.encode_captions(tokenizer, [clip.describe(digit, template)])
        assert tokenizer.unk_id not in ids.tolist()[0]
    # the held-out phrasings are new, and each names its digit (an attribute alone would tie two classes)
    assert not set(clip.HELD_OUT_TEMPLATES) & set(clip.CAPTION_TEMPLATES)
    assert all("{word}" in t or "{digit}" in t for t in clip.HELD_OUT_TEMPLATES)


def test_captions_follow_the_generator_and_the_labels():
    labels = torch.tensor([0, 7, 7, 3, 9])
    first = clip.digit_captions(labels, torch.Generator().manual_seed(4))
    assert first == clip.digit_captions(labels, torch.Generator().manual_seed(4))
    assert first != clip.digit_captions(labels, torch.Generator().manual_seed(5))
    for caption, label in zip(first, labels.tolist()):
        assert caption in {clip.describe(label, t) for t in clip.CAPTION_TEMPLATES}
    with pytest.raises(ValueError, match="labels must be integer digits"):
        clip.digit_captions(labels.float(), torch.Generator())
    with pytest.raises(ValueError, match="at least one phrasing"):
        clip.digit_captions(labels, torch.Generator(), templates=())


def test_captions_end_with_the_end_of_text_id_and_unknown_characters_are_named():
    tokenizer = clip.caption_tokenizer()
    ids = clip.encode_captions(tokenizer, ["the digit 4", "look: six"])  # (2, 12)
    assert ids.shape == (2, 12)
    assert ids[0, 11] == tokenizer.eos_id and ids[1, 9] == tokenizer.eos_id and ids[1, 10:].eq(tokenizer.pad_id).all()
    assert tokenizer.decode(ids[1]) == "look: six"
    with pytest.raises(ValueError, match=r"characters the tokenizer does not know: \['!', 'S'\]"):
        clip.encode_captions(tokenizer, ["Six!"])


def _brute_recall(images, texts, k, image_labels, text_labels):
    """Recall at k by sorting every row and column: ties put matches first."""
    sim = (images @ texts.T).tolist()
    hits_i = sum(
        any(text_labels[j] == image_labels[i] for j in sorted(range(len(texts)),
            key=lambda j: (-sim[i][j], text_labels[j] != image_labels[i]))[:k])
        for i in range(len(images))
    )  # fmt: skip
    hits_t = sum(
        any(image_labels[i] == text_labels[j] for i in sorted(range(len(images)),
            key=lambda i: (-sim[i][j], image_labels[i] != text_labels[j]))[:k])
        for j in range(len(texts))
    )  # fmt: skip
    return {"image to text": hits_i / len(images), "text to image": hits_t / len(texts)}


@pytest.mark.parametrize("k", [1, 2, 5])
def test_retrieval_recall_matches_sorting_every_row_with_pairs_and_with_labels(k):
    g = torch.Generator().manual_seed(k)
    images = F.normalize(torch.randn(12, 6, generator=g), dim=-1)
    texts = F.normalize(images + 0.8 * torch.randn(12, 6, generator=g), dim=-1)  # noisy partners
    pairs = list(range(12))
    assert clip.retrieval_recall(images, texts, k) == pytest.approx(_brute_recall(images, texts, k, pairs, pairs))
    assert clip.retrieval_recall(images, images, 1) == {"image to text": 1.0, "text to image": 1.0}
    # labels: 12 images of 4 classes against 5 texts (one class twice, one class with no text), with exact ties
    image_labels, text_labels = torch.arange(12) % 4, torch.tensor([0, 1, 1, 2, 0])
    few = torch.cat([texts[:4], texts[:1]])  # text 4 is text 0 again: a tie between two texts of one class
    expected = _brute_recall(images, few, k, image_labels.tolist(), text_labels.tolist())
    assert clip.retrieval_recall(images, few, k, image_labels, text_labels) == pytest.approx(expected)
    with pytest.raises(ValueError, match="k must be an int from 1 to the number of images or texts"):
        clip.retrieval_recall(images, texts, 13)
    with pytest.raises(ValueError, match="the same number of each"):
        clip.retrieval_recall(images, texts[:5], 1)
    with pytest.raises(ValueError, match="for both the images and the texts"):
        clip.retrieval_recall(images, texts, 1, image_labels)


def test_class_embeddings_average_the_prompts_and_zero_shot_takes_the_nearest():
    tokenizer = clip.caption_tokenizer()
    model = recipes.digits_clip(seed=3)
    templates = clip.HELD_OUT_TEMPLATES
    classes = clip.class_embeddings(model, tokenizer, templates)  # (10, 64)
    assert classes.shape == (10, 64) and torch.allclose(classes.norm(dim=-1), torch.ones(10))
    with torch.no_grad():
        for digit in (0, 6):
            texts = [clip.describe(digit, t) for t in templates]
            own = F.normalize(model.encode_text(clip.encode_captions(tokenizer, texts)).mean(0), dim=-1)
            assert torch.allclose(classes[digit], own, atol=1e-6)
    images = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        guesses = (model.encode_image(images) @ classes.T).argmax(-1)
    labels = guesses.clone()
    labels[:5] = (labels[:5] + 1) % 10  # five wrong on purpose
    assert clip.zero_shot_accuracy(model, images, labels, classes) == pytest.approx(15 / 20)
    assert model.training  # every helper leaves the mode as it found it
    assert clip.image_features(model, images).shape == (20, 64) and model.training


def test_a_clip_checkpoint_saves_and_loads_with_both_configs(tmp_path):
    model = recipes.digits_clip(seed=1).eval()
    init = model.checkpoint_init()
    path = tl.save_checkpoint(model, tmp_path / "clip.pt", init=init)
    loaded, _ = tl.load_checkpoint(path)
    images, tokens = torch.rand(3, 1, 8, 8), clip.encode_captions(clip.caption_tokenizer(), ["a six", "nine", "0"])
    with torch.no_grad():
        assert torch.equal(loaded(images, tokens), model(images, tokens))
    assert loaded.vision_config == model.vision_config


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_shipped_clip_classifies_the_digits_from_phrasings_it_never_saw():
    """The shipped checkpoint's zero-shot accuracy from phrasings it never saw is what its file records, and five
    times chance (0.1) or more; with the training phrasings it is far higher."""
    model, meta = tl.load_checkpoint("digits_clip")
    assert isinstance(model, clip.CLIPModel) and not model.training
    _, _, test_x, test_y = vit.digits_data()
    tokenizer = clip.caption_tokenizer()
    held_out = clip.zero_shot_accuracy(model, test_x, test_y, clip.class_embeddings(model, tokenizer))
    assert held_out == pytest.approx(meta["evals"][-1]["zero-shot, held-out phrasings"], abs=0.005)
    assert held_out >= 0.5
    trained = clip.zero_shot_accuracy(
        model, test_x, test_y, clip.class_embeddings(model, tokenizer, clip.CAPTION_TEMPLATES[:-1])
    )
    assert trained == pytest.approx(meta["evals"][-1]["zero-shot, training phrasings"], abs=0.005) and trained >= 0.9
