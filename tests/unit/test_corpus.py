"""The shipped Shakespeare corpus: the rules its files keep, and the split by play."""

import pytest

from transformer_lib import corpus


def test_every_play_is_shipped_clean():
    for name in corpus.SPLITS["all"]:
        text = corpus.play(name)
        assert len(text) > 90_000, name  # a whole play, not a fragment
        assert "gutenberg" not in text.lower(), name
        assert "\r" not in text and "\n\n\n" not in text, name
        assert all(line == line.rstrip() for line in text.split("\n")), name
        assert text.endswith("\n") and not text.endswith("\n\n"), name


def test_the_corpus_fits_its_size_limit():
    total = sum((corpus.TEXT_DIR / f"{name}.txt").stat().st_size for name in corpus.SPLITS["all"])
    assert total <= 1_500_000


def test_split_is_by_whole_play():
    assert not set(corpus.TRAIN) & set(corpus.HELD_OUT)
    train, valid = corpus.shakespeare("train"), corpus.shakespeare("validation")
    assert valid == corpus.play("twelfth_night")
    assert "VIOLA" not in train  # Twelfth Night's heroine appears only in the held-out play
    assert corpus.shakespeare("all") == train + "\n" + valid


def test_clear_errors():
    with pytest.raises(ValueError, match="split must be one of"):
        corpus.shakespeare("test")
    with pytest.raises(ValueError, match="no play called 'hamlett'"):
        corpus.play("hamlett")
